"""HFSampler on the real tiny model: token budgets, stop tokens/strings, and logprobs that equal a teacher-forced
forward pass (what TRL's importance-sampling correction relies on)."""

import contextlib
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from trl_envs import HFSampler, RolloutBudget, SampleRequest, run_rollout_batch, trajectory_to_data
from trl_envs.envs.guess_number import GuessNumberGroupBuilder


@pytest.fixture(scope="module")
def model(tiny_model_path):
    m = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    m.eval()
    return m


@pytest.fixture(scope="module")
def prompts(renderer, tokenizer):
    return {
        "sum": renderer.build_generation_prompt([{"role": "user", "content": "What is 3 + 4?"}]),
        "guess": renderer.build_generation_prompt(
            [
                {"role": "user", "content": "Guess my number between 1 and 16."},
                {"role": "assistant", "content": "8"},
                {"role": "user", "content": "Higher."},
            ]
        ),
        "text": tokenizer.encode("The quick brown fox", add_special_tokens=False),
    }


def teacher_forced(model, prompt, tokens, temperature=1.0):
    """log_softmax(logits / temperature) of ``tokens`` given ``prompt``, one unpadded forward pass."""
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1)


def _check_logprobs(result):
    assert result.logprobs is not None and len(result.logprobs) == len(result.tokens)
    assert all(math.isfinite(x) and x <= 0.0 for x in result.logprobs)


@pytest.mark.timeout(120)
def test_per_request_max_tokens_and_stop_token(model, tokenizer, renderer, prompts):
    eot = renderer.end_of_turn_token_id
    stop = renderer.get_stop_sequences()
    sampler = HFSampler(model, tokenizer, temperature=0)
    out = sampler.sample(
        [
            SampleRequest(prompts["guess"], stop, 16),
            SampleRequest(prompts["guess"], stop, 2),
            SampleRequest(prompts["sum"], stop, 16),
            SampleRequest(prompts["sum"], stop, 1),
        ]
    )
    full_guess, cut_guess, full_sum, cut_sum = out
    for full in (full_guess, full_sum):  # the warm-started model answers and ends its turn
        assert full.finish_reason == "stop"
        assert full.tokens[-1] == eot and eot not in full.tokens[:-1]
        assert len(full.tokens) <= 16
    assert len(full_guess.tokens) > 2 and len(full_sum.tokens) > 1  # so the cut rows below really are cut
    for cut, full, k in ((cut_guess, full_guess, 2), (cut_sum, full_sum, 1)):
        assert cut.finish_reason == "length"
        assert len(cut.tokens) == k
        assert cut.tokens == full.tokens[:k]
        assert cut.logprobs == pytest.approx(full.logprobs[:k], abs=1e-5)
    for r in out:
        _check_logprobs(r)


@pytest.mark.timeout(120)
def test_eos_always_stops_and_custom_stop_ids_cut(model, tokenizer, prompts):
    sampler = HFSampler(model, tokenizer, temperature=0)
    (natural,) = sampler.sample([SampleRequest(prompts["text"], [], 12)])
    # an empty stop list still stops on EOS (else rows would run into the next turn)
    assert natural.finish_reason == "stop" and natural.tokens[-1] == tokenizer.eos_token_id
    assert len(natural.tokens) >= 2
    first = natural.tokens[0]
    out = sampler.sample([SampleRequest(prompts["text"], [first], 12), SampleRequest(prompts["sum"], [], 12)])
    assert out[0].tokens == [first] and out[0].finish_reason == "stop"
    assert out[1].tokens[-1] == tokenizer.eos_token_id  # the other row of the batch is not cut by row 0's stop
    for r in (natural, *out):
        _check_logprobs(r)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_logprobs_match_teacher_forced_forward_pass(model, tokenizer, renderer, prompts, temperature):
    torch.manual_seed(1234)
    sampler = HFSampler(model, tokenizer, temperature=temperature)
    names = ["sum", "guess", "text", "sum"]  # different prompt lengths: left padding must not shift anything
    requests = [SampleRequest(prompts[n], renderer.get_stop_sequences(), 6) for n in names]
    out = sampler.sample(requests)
    assert len(out) == len(requests)
    for req, r in zip(requests, out):
        _check_logprobs(r)
        expected = teacher_forced(model, req.prompt, r.tokens, temperature)
        assert torch.allclose(torch.tensor(r.logprobs), expected, atol=1e-4), (r.tokens, r.logprobs, expected)


@pytest.mark.timeout(120)
def test_greedy_is_deterministic_and_takes_the_argmax(model, tokenizer, renderer, prompts):
    sampler = HFSampler(model, tokenizer, temperature=0)
    requests = [SampleRequest(prompts[n], renderer.get_stop_sequences(), 6) for n in ("sum", "guess", "text")]
    torch.manual_seed(0)
    first = sampler.sample(requests)
    torch.manual_seed(1)
    second = sampler.sample(requests)
    assert [r.tokens for r in first] == [r.tokens for r in second]
    assert [r.logprobs for r in first] == [r.logprobs for r in second]
    for req, r in zip(requests, first):
        ids = torch.tensor([req.prompt + r.tokens])
        with torch.no_grad():
            logits = model(ids).logits[0, len(req.prompt) - 1 : -1]
        assert logits.argmax(-1).tolist() == r.tokens
        # greedy logprobs are those of the unscaled distribution
        assert torch.allclose(torch.tensor(r.logprobs), teacher_forced(model, req.prompt, r.tokens), atol=1e-4)


@pytest.mark.timeout(120)
def test_stop_strings(model, tokenizer, renderer, prompts):
    sampler = HFSampler(model, tokenizer, temperature=0)
    (natural,) = sampler.sample([SampleRequest(prompts["guess"], renderer.get_stop_sequences(), 8)])
    assert len(natural.tokens) >= 2
    first_text = tokenizer.decode(natural.tokens[:1])
    (stopped,) = sampler.sample([SampleRequest(prompts["guess"], [first_text], 8)])
    assert stopped.tokens == natural.tokens[:1]  # the token completing the stop string is kept, nothing after
    assert stopped.finish_reason == "stop"
    with pytest.raises(TypeError, match="stop condition"):
        sampler.sample([SampleRequest(prompts["guess"], [2.5], 8)])


def test_invalid_requests_and_empty_batch(model, tokenizer, prompts):
    sampler = HFSampler(model, tokenizer)
    assert sampler.sample([]) == []
    with pytest.raises(ValueError, match="request 1 asks for max_tokens=0"):
        sampler.sample([SampleRequest(prompts["sum"], [], 4), SampleRequest(prompts["sum"], [], 0)])
    with pytest.raises(ValueError, match="request 0 has an empty prompt"):
        sampler.sample([SampleRequest([], [], 4)])


@pytest.mark.timeout(120)
def test_model_context_is_used_and_training_mode_restored(model, tokenizer, prompts):
    entered = []

    @contextlib.contextmanager
    def unwrap():
        entered.append(True)
        yield model

    sampler = HFSampler(object(), tokenizer, temperature=0, model_context=unwrap)  # `model` itself is never used
    model.train()
    try:
        (r,) = sampler.sample([SampleRequest(prompts["sum"], [], 3)])
        assert entered == [True]
        assert model.training  # the trainer's mode is kept
        assert len(r.tokens) >= 1
    finally:
        model.eval()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_sampling_runs_in_eval_mode_exactly_when_training_mode_would_change_the_outputs(
    tiny_model_path, tokenizer, prompts, dropout
):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, attention_dropout=dropout)
    seen = []
    model.model.layers[0].register_forward_hook(lambda module, args, out: seen.append(module.training))
    model.train()
    (r,) = HFSampler(model, tokenizer, temperature=0).sample([SampleRequest(prompts["sum"], [], 3)])
    assert seen and len(r.tokens) >= 1
    # dropout: sampled in eval mode (no dropout); none: left in training mode (same outputs, no mode switch)
    assert set(seen) == ({False} if dropout else {True})
    assert model.training


@pytest.mark.timeout(180)
def test_multi_turn_rollout_rows_carry_the_policys_logprobs(model, tokenizer, renderer):
    """End to end: HFSampler through the rollout engine on guess_number; each training row's logprobs on sampled
    tokens equal a teacher-forced pass over the whole row (env tokens are 0 and masked)."""
    torch.manual_seed(7)
    temperature = 0.8
    builders = [GuessNumberGroupBuilder(renderer, target=t, group_size=2, max_guesses=3) for t in (4, 13)]
    budget = RolloutBudget(max_turns=3, max_tokens_per_turn=4)
    result = run_rollout_batch(builders, HFSampler(model, tokenizer, temperature=temperature), budget)
    assert result.num_sampler_calls == max(len(t.transitions) for g in result.groups for t in g.trajectories)
    multi_turn = 0
    for group in result.groups:
        for traj in group.trajectories:
            for tr in traj.transitions:
                assert 1 <= len(tr.ac.tokens) <= 4
                assert (tr.ac.finish_reason == "stop") == (tr.ac.tokens[-1] == renderer.end_of_turn_token_id)
            row = trajectory_to_data(traj)
            multi_turn += len(traj.transitions) > 1
            seq = row.prompt_ids + row.completion_ids
            with torch.no_grad():
                logits = model(torch.tensor([seq])).logits[0].float()
            lp = torch.log_softmax(logits / temperature, dim=-1)
            for k, (tok, m, got) in enumerate(zip(row.completion_ids, row.mask, row.logprobs)):
                if m:
                    want = lp[len(row.prompt_ids) + k - 1, tok].item()
                    assert got == pytest.approx(want, abs=1e-4), (k, tok)
                else:
                    assert got == 0.0
    assert multi_turn > 0, "no episode lasted more than one turn; the test would not cover env tokens"
