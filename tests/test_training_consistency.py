"""What TRL trains on must match what was sampled: end-of-turn tokens count as EOS, generation runs under the
training autocast, and sampler settings reach ``generate`` without changing the recorded logprobs."""

from __future__ import annotations

import shutil

import pytest
import torch
from cpu_configs import cpu_grpo_config
from transformers import AutoTokenizer, GenerationConfig

from trl_envs import EnvGRPOTrainer, Renderer, make_env_dataset

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def base_chatml_model(tiny_model_path, tmp_path) -> str:
    """A copy of the tiny model shaped like a base ChatML model (Qwen2.5 base): EOS ``<|endoftext|>``, while the
    chat template ends a turn with ``<|im_end|>``."""
    path = tmp_path / "base-chatml"
    shutil.copytree(tiny_model_path, path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.eos_token = "<|endoftext|>"
    tok.save_pretrained(path)
    gen = GenerationConfig.from_pretrained(path)
    gen.eos_token_id = tok.eos_token_id
    gen.save_pretrained(path)
    return str(path)


def test_end_of_turn_token_ends_completions_when_it_differs_from_eos(base_chatml_model, tmp_path):
    tok = AutoTokenizer.from_pretrained(base_chatml_model)
    renderer = Renderer(tok)
    assert renderer.end_of_turn_token_id != tok.eos_token_id  # the situation under test
    builder = make_env_dataset("arithmetic", renderer, group_size=4, batch_size=2, num_batches=2)
    trainer = EnvGRPOTrainer(
        base_chatml_model, cpu_grpo_config(tmp_path, mask_truncated_completions=True), builder, processing_class=tok
    )
    assert renderer.end_of_turn_token_id in trainer.eos_token_ids
    trainer.model.train()
    torch.manual_seed(0)
    out = trainer.generation_batch(trainer.train_dataset["prompt"][:2])
    ended = [
        t
        for g in trainer.last_rollout.groups
        for t in g.trajectories
        if t.transitions[-1].ac.tokens[-1] == renderer.end_of_turn_token_id
    ]
    assert ended, "the tiny model should end most answers with <|im_end|>"
    # TRL counts a row as truncated when its last token is not in eos_token_ids (+ pad), then masks it out
    assert trainer.logged_metrics("train")["completions/clipped_ratio"][-1] < 1.0
    assert out["completion_mask"].sum() > 0


def _max_logprob_gap(trainer) -> float:
    """Largest |sampling logprob - TRL's training logprob| over the sampled tokens of one rollout batch."""
    trainer.model.train()
    torch.manual_seed(0)
    out = trainer.generation_batch(trainer.train_dataset["prompt"][:2])
    trained = trainer.completion_logprobs(out, batch_size=8)
    sampled = torch.zeros_like(trained)
    rows = [t for g in trainer.last_rollout.groups for t in g.trajectories]
    for i, trajectory in enumerate(rows):  # arithmetic: one turn per trajectory
        logprobs = trajectory.transitions[0].ac.logprobs
        sampled[i, : len(logprobs)] = torch.tensor(logprobs)
    return (trained - sampled)[out["completion_mask"].bool()].abs().max().item()


def test_peft_bf16_generation_runs_under_the_training_autocast(tiny_model_path, tokenizer, renderer, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    builder = make_env_dataset("arithmetic", renderer, group_size=4, batch_size=2, num_batches=2)
    trainer = EnvGRPOTrainer(
        tiny_model_path, cpu_grpo_config(tmp_path, bf16=True), builder, processing_class=tokenizer, peft_config=lora
    )
    assert next(trainer.model.parameters()).dtype == torch.float32  # fp32 weights, bf16 autocast in training
    # sampled in fp32 the gap is ~0.016 on this model; under the same autocast it is rounding noise
    assert _max_logprob_gap(trainer) < 1e-4


# -- HFSampler settings and the logprobs it records --------------------------------------------------------------


def _requests(renderer, n=4, max_tokens=6):
    from trl_envs.samplers.hf import SampleRequest

    prompt = renderer.build_generation_prompt([{"role": "user", "content": "What is 2 + 3?"}])
    return [SampleRequest(prompt, renderer.get_stop_sequences(), max_tokens) for _ in range(n)]


def test_sampler_passes_generation_kwargs_and_cache_implementation(tiny_model_path, tokenizer, renderer, monkeypatch):
    from transformers import AutoModelForCausalLM

    from trl_envs.samplers.hf import HFSampler

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    seen = {}
    real_generate = model.generate

    def spy(*args, generation_config, **kwargs):
        seen["cache_implementation"] = generation_config.cache_implementation
        return real_generate(*args, generation_config=generation_config, **kwargs)

    monkeypatch.setattr(model, "generate", spy)
    eot = renderer.end_of_turn_token_id
    with pytest.warns(UserWarning, match="suppress_tokens"):
        sampler = HFSampler(
            model,
            tokenizer,
            generation_kwargs={"suppress_tokens": [eot, tokenizer.eos_token_id]},
            cache_implementation="dynamic",
        )
    torch.manual_seed(0)
    results = sampler.sample(_requests(renderer))
    assert all(r.finish_reason == "length" and eot not in r.tokens for r in results)  # end of turn suppressed
    assert seen["cache_implementation"] == "dynamic"
    with pytest.raises(ValueError, match=r"generation_kwargs sets \['max_new_tokens'\]"):
        HFSampler(model, tokenizer, generation_kwargs={"max_new_tokens": 3})


def test_sampler_logprobs_exclude_the_repetition_penalty(tiny_model_path, tokenizer, renderer):
    from transformers import AutoModelForCausalLM

    from trl_envs.samplers.hf import HFSampler

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    sampler = HFSampler(model, tokenizer, temperature=0.7, repetition_penalty=3.0)
    torch.manual_seed(0)
    requests = _requests(renderer, n=3, max_tokens=8)
    for request, result in zip(requests, sampler.sample(requests)):
        ids = torch.tensor([request.prompt + result.tokens])
        with torch.no_grad():
            logits = model(ids).logits[0, len(request.prompt) - 1 : -1].float() / 0.7
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(result.tokens)[:, None]).squeeze(1)
        assert torch.allclose(torch.tensor(result.logprobs), expected, atol=1e-4)  # what TRL's training computes


def test_repetition_penalty_with_off_policy_mask_warns(tiny_model_path, tokenizer, renderer, tmp_path):
    builder = make_env_dataset("arithmetic", renderer, group_size=4, batch_size=2, num_batches=2)
    with pytest.warns(UserWarning, match=r"repetition_penalty=1.3 .*off_policy_mask_threshold=0.5"):
        EnvGRPOTrainer(
            tiny_model_path,
            cpu_grpo_config(tmp_path, repetition_penalty=1.3, off_policy_mask_threshold=0.5),
            builder,
            processing_class=tokenizer,
        )
