"""EnvDPOTrainer on the tiny model: offline DPO, env-driven rounds, env tokens out of the loss, errors, the script."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import transformers
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_envs import (
    EmptyPairsWarning,
    EnvDPOConfig,
    EnvDPOTrainer,
    ListRLDataset,
    ProblemEnv,
    ProblemGroupBuilder,
    make_env_dataset,
    make_preference_pairs,
)
from trl_envs.training_data.preference_data import (
    HELD_OUT_FRACTION,
    arithmetic_preference_rows,
    build_preference_dataset,
    load_preference_dataset,
)

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parent.parent


def config(tmp_path, **overrides) -> EnvDPOConfig:
    kwargs = dict(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        beta=0.1,
        num_train_epochs=1,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        num_rounds=1,
        max_tokens_per_turn=8,
        max_turns=6,
        eval_envs_each_round=False,
    )
    kwargs.update(overrides)
    return EnvDPOConfig(**kwargs)


def params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def train_logs(trainer) -> list[dict]:
    return [h for h in trainer.state.log_history if "rewards/margins" in h and "loss" in h]


# -- offline DPO -----------------------------------------------------------------------------------------------


def test_offline_dpo_loss_falls_and_margin_grows(tmp_path, tiny_model_path, tokenizer):
    # 16 pairs of the built-in dataset, one full batch per step: the setting where the trend is reliable.
    data = load_preference_dataset(build_preference_dataset(str(tmp_path / "prefs"), num_train=16, num_test=8))
    trainer = EnvDPOTrainer(
        tiny_model_path,
        args=config(tmp_path, per_device_train_batch_size=16, max_steps=10, lr_scheduler_type="constant"),
        train_dataset=data["train"],
        processing_class=tokenizer,
    )
    trainer.train()
    logs = train_logs(trainer)
    assert len(logs) == 10
    loss = [h["loss"] for h in logs]
    margin = [h["rewards/margins"] for h in logs]
    assert sum(loss[-3:]) / 3 < sum(loss[:3]) / 3 - 0.02, loss
    assert loss[-1] < loss[0] - 0.03, loss
    assert sum(margin[-3:]) / 3 > sum(margin[:3]) / 3 + 0.05, margin
    assert logs[-1]["rewards/accuracies"] > 0.5


def test_text_format_and_eval_dataset(tmp_path, tiny_model_path, tokenizer):
    rows = [{"prompt": f"{a} + {a} =", "chosen": f" {2 * a}", "rejected": f" {2 * a + 1}"} for a in range(8)]
    trainer = EnvDPOTrainer(
        tiny_model_path,
        args=config(tmp_path, max_steps=1),
        train_dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows[:4]),
        processing_class=tokenizer,
    )
    trainer.train()
    assert trainer.train_dataset[0]["chosen_ids"][-1] == tokenizer.eos_token_id  # TRL's text handling (EOS added)
    assert "eval_rewards/margins" in trainer.evaluate()


def test_pretokenized_pairs_pass_through_with_their_masks(tmp_path, tiny_model_path, tokenizer):
    row = {
        "prompt_ids": [1, 5, 6],
        "chosen_ids": [7, 8, 9],
        "rejected_ids": [10, 11],
        "chosen_mask": [1, 0, 1],
        "rejected_mask": [1, 1],
    }
    trainer = EnvDPOTrainer(
        tiny_model_path,
        args=config(tmp_path, max_steps=1),
        train_dataset=Dataset.from_list([row]),
        processing_class=tokenizer,
    )
    assert trainer.train_dataset[0] == row
    batch = trainer.data_collator([trainer.train_dataset[0]])
    assert batch["completion_mask"].tolist() == [[0, 0, 0, 1, 0, 1], [0, 0, 0, 1, 1, 0]]
    assert "chosen_mask" in trainer.get_train_dataloader().dataset.column_names  # not dropped as "unused"


def test_pretokenized_pairs_get_reference_logps_and_are_evaluated(tmp_path, tiny_model_path, tokenizer):
    rows = [
        {"prompt_ids": [1, 5, 6], "chosen_ids": [7, 8], "rejected_ids": [10], "chosen_mask": [1, 0]},
        {"prompt_ids": [2, 5], "chosen_ids": [9], "rejected_ids": [11, 12]},
    ]
    rows[1]["chosen_mask"] = [1]
    trainer = EnvDPOTrainer(
        tiny_model_path,
        args=config(tmp_path, max_steps=1, precompute_ref_log_probs=True),
        train_dataset=Dataset.from_list(rows),
        eval_dataset={"pairs": Dataset.from_list(rows), "text": Dataset.from_list(arithmetic_preference_rows(2))},
        processing_class=tokenizer,
    )
    batch = trainer.data_collator(rows)
    policy = trainer.model
    policy.eval()
    with torch.no_grad():
        logits = policy(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    token_logps = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    expected = (token_logps * batch["completion_mask"][:, 1:]).sum(1)  # the policy before training is the reference
    for dataset in (trainer.train_dataset, trainer.eval_dataset["pairs"]):
        assert dataset["ref_chosen_logps"] == pytest.approx(expected[:2].tolist(), abs=1e-4)
        assert dataset["ref_rejected_logps"] == pytest.approx(expected[2:].tolist(), abs=1e-4)
    assert "ref_chosen_logps" in trainer.eval_dataset["text"].column_names  # TRL's own precompute on raw text
    metrics = trainer.evaluate()
    assert {"eval_pairs_loss", "eval_text_loss"} <= set(metrics)
    assert "eval_loss" in trainer.evaluate(Dataset.from_list(rows))  # pre-tokenized pairs given to evaluate()


def test_in_memory_model_gets_a_frozen_reference(tmp_path, tiny_model_path, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model.config._name_or_path = ""  # built in memory: TRL could not reload a reference from a path
    rows = arithmetic_preference_rows(8)
    trainer = EnvDPOTrainer(
        model, args=config(tmp_path, max_steps=2), train_dataset=Dataset.from_list(rows), processing_class=tokenizer
    )
    ref_before = {n: p.detach().clone() for n, p in trainer.ref_model.named_parameters()}
    trainer.train()
    assert trainer.ref_model is not trainer.model
    assert all(torch.equal(p, ref_before[n]) for n, p in trainer.ref_model.named_parameters())
    assert train_logs(trainer)[-1]["rewards/margins"] != 0.0  # the policy moved away from the reference


def test_lora_trains_only_the_adapter_and_saves_it(tmp_path, tiny_model_path, tokenizer):
    from peft import LoraConfig

    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = EnvDPOTrainer(
        tiny_model_path,
        args=config(tmp_path, max_steps=2),
        train_dataset=Dataset.from_list(arithmetic_preference_rows(8)),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    assert trainer.ref_model is None  # the reference is the base model, adapter switched off
    base = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora" not in n}
    lora = params(trainer.model)
    trainer.train()
    assert all(torch.equal(p, base[n]) for n, p in trainer.model.named_parameters() if "lora" not in n)
    assert any(not torch.equal(p, lora[n]) for n, p in trainer.model.named_parameters() if n in lora)
    trainer.save_model(str(tmp_path / "adapter"))
    assert (tmp_path / "adapter" / "adapter_config.json").exists()


# -- env-driven DPO --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ["arithmetic", "guess_number"])
def test_one_round_of_env_driven_dpo(env, tmp_path, tiny_model_path, tokenizer, renderer):
    torch.manual_seed(0)
    builder = make_env_dataset(env, renderer, group_size=4, batch_size=8, num_batches=4)
    trainer = EnvDPOTrainer(tiny_model_path, args=config(tmp_path), env_dataset=builder, processing_class=tokenizer)
    before = params(trainer.model)
    out = trainer.train()
    (round_logs,) = trainer.round_history
    assert round_logs["round"] == 1.0
    assert 0 < round_logs["pairs/pairs"] <= 8 and round_logs["pairs/groups"] == 8
    assert round_logs["pairs/pairs"] + round_logs["pairs/ties"] + round_logs["pairs/identical"] == 8
    for key in (
        "env/all/reward/total",
        f"env/{env}/reward/total",
        "round/loss",
        "round/rewards/margins",
        "round/rewards/accuracies",
        "round/steps",
    ):
        assert key in round_logs, key
    totals = [t for g in trainer.last_rollout.groups for t in g.get_total_rewards()]
    assert round_logs["env/all/reward/total"] == pytest.approx(sum(totals) / len(totals))  # the policy's env reward
    assert any(not torch.equal(before[n], p) for n, p in params(trainer.model).items()), "no parameter moved"
    assert out.global_step == round_logs["round/steps"] >= 1
    assert any(h.get("round") == 1.0 for h in trainer.state.log_history)  # logged through the Trainer (report_to)
    if env == "guess_number":
        assert round_logs["env/all/turns"] > 1
        pairs, _ = make_preference_pairs(trainer.last_rollout.groups)
        assert any(0 in p.chosen_mask or 0 in p.rejected_mask for p in pairs)  # multi-turn: env tokens in pairs


def test_a_dataset_of_env_rows_is_grouped_by_the_config(tmp_path, tiny_model_path):
    from trl_envs import export_env_dataset

    rows = export_env_dataset("arithmetic", n=6, max_operand=3)  # a datasets.Dataset, one problem per row
    args = config(tmp_path, group_size=3, groups_per_round=2, num_rounds=2)
    trainer = EnvDPOTrainer(tiny_model_path, args=args, env_dataset=rows)  # the tokenizer comes from the model path
    trainer.train()
    assert [h["pairs/groups"] for h in trainer.round_history] == [2.0, 2.0]
    assert all(len(g.trajectories) == 3 for g in trainer.last_rollout.groups)
    questions = {
        t.logs.get("question") for g in trainer.last_rollout.groups for tr in g.trajectories for t in tr.transitions
    }
    assert len(questions) == 2  # round 2 played rows 2 and 3


def test_rounds_continue_steps_logs_and_learning_rate(tmp_path, tiny_model_path, tokenizer, renderer, monkeypatch):
    builder = make_env_dataset("arithmetic", renderer, group_size=4, batch_size=8, num_batches=4, num_test_batches=1)
    args = config(tmp_path, num_rounds=2, eval_envs_each_round=True, lr_scheduler_type="linear")
    trainer = EnvDPOTrainer(tiny_model_path, args=args, env_dataset=builder, processing_class=tokenizer)
    optimizer_types = []
    real_train = transformers.Trainer.train  # EnvDPOTrainer calls it once per round

    def spy(self, *a, **kw):
        result = real_train(self, *a, **kw)
        optimizer_types.append(type(self.optimizer.optimizer).__name__)  # wrapped once by accelerate, not twice
        return result

    monkeypatch.setattr(transformers.Trainer, "train", spy)
    trainer.train()
    assert optimizer_types == ["AdamW", "AdamW"]
    steps = [h["step"] for h in trainer.state.log_history if "loss" in h and "rewards/margins" in h]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)  # global_step keeps counting across rounds
    lrs = [h["learning_rate"] for h in trainer.state.log_history if "learning_rate" in h]
    assert lrs[-1] == pytest.approx(1e-3)  # the linear schedule restarted: round 2 starts at the full rate
    assert [h["round"] for h in trainer.state.log_history if "round" in h] == [0.0, 1.0, 2.0]
    assert "eval_env/all/reward/total" in trainer.round_history[-1]


def test_env_tokens_are_excluded_from_the_dpo_loss(tmp_path, tiny_model_path, tokenizer, renderer):
    """The log-probabilities DPO trains on (``logps/chosen``, ``logps/rejected``) are the sums over the tokens the model
    sampled, computed here independently; including the env's "Higher."/"Lower." tokens would change them."""
    torch.manual_seed(0)
    builder = make_env_dataset("guess_number", renderer, group_size=4, batch_size=8, num_batches=2)
    trainer = EnvDPOTrainer(tiny_model_path, args=config(tmp_path), env_dataset=builder, processing_class=tokenizer)
    rows, stats, _ = trainer.rounds.sample_pairs(0)
    rows = [r for r in rows if 0 in r["chosen_mask"] and 0 in r["rejected_mask"]][:4]
    assert rows, f"no multi-turn pair on both sides ({stats})"
    batch = trainer.data_collator(rows)
    model = trainer.model
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    token_logps = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    sampled = torch.zeros_like(batch["completion_mask"])
    all_completion = torch.zeros_like(batch["completion_mask"])
    for i, row in enumerate(rows + rows):
        side = "chosen" if i < len(rows) else "rejected"
        start = len(row["prompt_ids"])
        n = len(row[f"{side}_ids"])
        sampled[i, start : start + n] = torch.tensor(row[f"{side}_mask"])
        all_completion[i, start : start + n] = 1
    expected = (token_logps * sampled[:, 1:]).sum(1)
    with_env_tokens = (token_logps * all_completion[:, 1:]).sum(1)
    assert torch.all((expected - with_env_tokens).abs() > 0.1)  # the env tokens do weigh in if included

    model.train()
    loss = trainer.compute_loss(model, batch)
    trainer.log({})  # DPOTrainer logs the mean of what its loss computed since the last log: this batch only
    logged = trainer.state.log_history[-1]
    n = len(rows)
    assert logged["logps/chosen"] == pytest.approx(expected[:n].mean().item(), abs=1e-3)
    assert logged["logps/rejected"] == pytest.approx(expected[n:].mean().item(), abs=1e-3)
    loss.backward()  # and the loss is differentiable through exactly those tokens
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_a_round_without_pairs_warns_with_the_count(tmp_path, tiny_model_path, tokenizer, renderer):
    class AlwaysRight(ProblemEnv):  # every answer earns 1.0: every group is all ties
        def get_question(self):
            return "Say anything."

        def check_answer(self, text):
            return True

        def check_format(self, text):
            return True

        def get_reference_answer(self):
            return "anything"

    envs = ListRLDataset(
        [ProblemGroupBuilder(lambda: AlwaysRight(renderer, format_coef=0.0), 4, "ties") for _ in range(3)], batch_size=3
    )
    trainer = EnvDPOTrainer(
        tiny_model_path, args=config(tmp_path, num_rounds=2), env_dataset=envs, processing_class=tokenizer
    )
    with pytest.warns(EmptyPairsWarning, match=r"round 1 made no preference pair from 3 env groups \(3 all ties") as w:
        out = trainer.train()
    assert any("a reward that is constant within a group never pairs" in str(m.message) for m in w)
    assert out.global_step == 0
    assert [h["pairs/ties"] for h in trainer.round_history] == [3.0, 3.0]


def test_self_play_that_cannot_pair_is_refused_before_training(tmp_path, tiny_model_path, tokenizer, renderer):
    """tic_tac_toe's groups are games of two seats: no two trajectories share a prompt, so no round can ever pair."""
    envs = make_env_dataset("tic_tac_toe", renderer, group_size=4, groups_per_batch=2)
    trainer = EnvDPOTrainer(
        tiny_model_path,
        args=config(tmp_path, num_rounds=3, group_size=4, groups_per_round=2),
        env_dataset=envs,
        processing_class=tokenizer,
    )
    before = params(trainer.model)
    with pytest.raises(
        ValueError,
        match=r"in all 2 the trajectories began from different prompts.*"
        r"Train such envs with GRPO \(trl-envs grpo --env tic_tac_toe\)",
    ):
        trainer.train()
    assert trainer.state.global_step == 0 and all(torch.equal(before[n], p) for n, p in params(trainer.model).items())


# -- errors ----------------------------------------------------------------------------------------------------


def test_missing_column_names_the_columns_found(tmp_path, tiny_model_path, tokenizer):
    data = Dataset.from_dict({"prompt": ["1 + 1 ="], "chosen": [" 2"], "answer": [" 3"]})
    with pytest.raises(ValueError, match=r"no 'rejected' column.*Columns found: \['prompt', 'chosen', 'answer'\]"):
        EnvDPOTrainer(tiny_model_path, args=config(tmp_path), train_dataset=data, processing_class=tokenizer)


@pytest.mark.parametrize("column, value", [("chosen", " "), ("rejected", [{"role": "assistant", "content": ""}])])
def test_empty_answers_are_rejected(column, value, tmp_path, tiny_model_path, tokenizer):
    rows = arithmetic_preference_rows(3)
    if isinstance(value, str):
        rows = [{"prompt": "1 + 1 =", "chosen": " 2", "rejected": " 3"} for _ in range(3)]
    rows[1][column] = value
    with pytest.raises(ValueError, match=rf"row 1 of the train dataset has an empty '{column}' answer"):
        EnvDPOTrainer(
            tiny_model_path, args=config(tmp_path), train_dataset=Dataset.from_list(rows), processing_class=tokenizer
        )


def test_chat_data_needs_a_chat_template(tmp_path, tiny_model_path):
    bare = AutoTokenizer.from_pretrained(tiny_model_path)
    bare.chat_template = None
    with pytest.raises(ValueError, match="conversational.*no chat template"):
        EnvDPOTrainer(
            tiny_model_path,
            args=config(tmp_path),
            train_dataset=Dataset.from_list(arithmetic_preference_rows(2)),
            processing_class=bare,
        )


def test_exactly_one_kind_of_data(tmp_path, tiny_model_path, tokenizer, renderer):
    with pytest.raises(ValueError, match="exactly one of train_dataset"):
        EnvDPOTrainer(tiny_model_path, args=config(tmp_path), processing_class=tokenizer)
    with pytest.raises(ValueError, match="precompute_ref_log_probs"):
        EnvDPOTrainer(
            tiny_model_path,
            args=config(tmp_path, precompute_ref_log_probs=True),
            env_dataset=make_env_dataset("arithmetic", renderer),
            processing_class=tokenizer,
        )


# -- the script ------------------------------------------------------------------------------------------------


def run_script(monkeypatch, capsys, tmp_path, *args) -> str:
    """Run scripts/train_dpo.py's main() in this process (as `python scripts/train_dpo.py ARGS`, minus the imports)."""
    monkeypatch.setenv("TRL_ENVS_CACHE", str(tmp_path / "cache"))  # the built-in dataset is built there
    monkeypatch.setattr(sys, "argv", ["train_dpo.py", *args])
    spec = importlib.util.spec_from_file_location("train_dpo_script", REPO / "scripts" / "train_dpo.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    capsys.readouterr()
    module.main(*module.make_parser().parse_args_and_config())  # what `if __name__ == "__main__"` does
    return capsys.readouterr().out


def test_script_offline_default_and_env_yaml(tmp_path, tiny_model_path, monkeypatch, capsys):
    stdout = run_script(
        monkeypatch,
        capsys,
        tmp_path,
        "--model_name_or_path",
        tiny_model_path,
        "--max_steps",
        "2",
        "--logging_steps",
        "1",
        "--output_dir",
        str(tmp_path / "offline"),
    )
    assert "step    2 | loss" in stdout and "margin" in stdout, stdout
    assert (tmp_path / "offline" / "model.safetensors").exists()
    assert not (tmp_path / "cache" / "arithmetic-preferences-v2").exists()  # the shipped dataset: nothing built
    card_eval = json.loads((tmp_path / "offline" / "eval_results.json").read_text())
    assert card_eval["env"] == "arithmetic"  # scored on the questions the built-in data leaves out, not on seen ones
    assert card_eval["env_kwargs"] == {"max_operand": 9, "held_out_fraction": HELD_OUT_FRACTION}
    card = (tmp_path / "offline" / "README.md").read_text()
    assert "trained with DPO on the built-in arithmetic preference dataset `arithmetic-preferences-v2` (train " in card
    assert "split, 512 rows)" in card
    settings = card[card.index("| setting | value |") :]
    assert "`beta`" in settings and "`max_steps`" in settings
    for env_only in ("num_rounds", "max_turns", "max_tokens_per_turn", "temperature", "group_size", "num_generations"):
        assert f"`{env_only}`" not in settings, env_only  # offline DPO samples nothing: env settings did not act
    stdout = run_script(
        monkeypatch,
        capsys,
        tmp_path,
        "--config",
        str(REPO / "scripts" / "configs" / "dpo_env_guess_number.yaml"),
        "--model_name_or_path",
        tiny_model_path,
        "--num_rounds",
        "1",
        "--groups_per_round",
        "4",
        "--group_size",
        "4",
        "--output_dir",
        str(tmp_path / "env"),
    )
    assert "round  1/1 | env reward" in stdout, stdout
    assert (tmp_path / "env" / "log_history.json").exists()
    settings = (tmp_path / "env" / "README.md").read_text().split("| setting | value |")[1]
    for env_setting in ("num_rounds", "group_size", "groups_per_round", "max_turns", "temperature"):
        assert f"`{env_setting}`" in settings, env_setting
    assert "`num_generations`" not in settings and "`max_length`" not in settings


def test_script_loads_preference_data_from_files_and_disk(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("train_dpo_loaders", REPO / "scripts" / "train_dpo.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)
    spec.loader.exec_module(script)
    rows = [{"prompt": "1 + 1 =", "chosen": " 2", "rejected": " 3"}] * 4
    data = Dataset.from_list(rows)
    data.to_json(str(tmp_path / "p.jsonl"))
    data.to_csv(str(tmp_path / "p.csv"))
    data.to_parquet(str(tmp_path / "p.parquet"))
    data.train_test_split(test_size=2).save_to_disk(str(tmp_path / "saved"))
    args = script.ScriptArguments
    for kwargs in (
        {"data_files": [str(tmp_path / "p.jsonl")]},
        {"data_files": [str(tmp_path / "p.parquet")]},
        {"dataset_name": str(tmp_path / "p.csv")},
    ):
        train = script.pick_split(script.load_preference_splits(args(**kwargs)), "train", "training")
        assert train.column_names == ["prompt", "chosen", "rejected"] and len(train) == 4
    saved = script.load_preference_splits(args(dataset_name=str(tmp_path / "saved")))
    assert len(script.pick_split(saved, "test", "evaluation")) == 2
    with pytest.raises(ValueError, match=r"no 'validation' split.*splits found: \['train', 'test'\]"):
        script.pick_split(saved, "validation", "evaluation")
    with pytest.raises(ValueError, match="files of one kind"):
        script.load_preference_splits(args(data_files=[str(tmp_path / "p.jsonl"), str(tmp_path / "p.csv")]))


def test_a_question_column_trains_as_the_prompt(tmp_path, tiny_model_path, tokenizer):
    """The shape TRL would have trained on silently with prompts '' and '1': here the question is the prompt."""
    rows = [{"question": f"What is {a} + {a}?", "chosen": str(2 * a), "rejected": str(2 * a + 1)} for a in range(8)]
    with pytest.warns(UserWarning, match="its 'question' column is used as the prompt"):
        trainer = EnvDPOTrainer(
            tiny_model_path,
            args=config(tmp_path),
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
        )
    prompts = [tokenizer.decode(ids) for ids in trainer.train_dataset["prompt_ids"]]
    assert prompts[3].startswith("What is 3 + 3?")
    assert trainer.train().global_step == 1
