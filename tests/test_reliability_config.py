"""Issue 16, configs and data: every bad setting fails when it is given, naming what is wrong; no silent fallbacks.

* rollout fields of ``EnvGRPOConfig`` / ``EnvDPOConfig`` are checked when the config is built (no model loaded);
* built-in envs check their options, naming env and option; empty env data files and null env names are named;
* ``beta > 0`` with a model object: the reference is a frozen copy of the model as passed, never a reload from disk;
* trainer construction does not call ``get_batch`` per batch; a batch that does not fit the layout is named on use.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from trl_envs import EnvDPOConfig, EnvGRPOConfig, EnvGRPOTrainer
from trl_envs.core.types import RLDataset
from trl_envs.envs.arithmetic import ArithmeticDataset
from trl_envs.registry import EnvRowError, make_env_dataset
from trl_envs.registry.env_datasets import EnvRowDataset, load_env_dataset

CONFIGS = (EnvGRPOConfig, EnvDPOConfig)


def build(config_class, **fields):
    return config_class(output_dir="/tmp/trl_envs_unused", use_cpu=True, report_to="none", **fields)


# -- rollout fields, checked when the config is built ----------------------------------------------------------------


@pytest.mark.parametrize("config_class", CONFIGS)
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_turns", 0, "max_turns must be an integer >= 1 or None"),
        ("max_turns", -2, "max_turns must be an integer >= 1"),
        ("max_turns", 2.5, "max_turns must be an integer"),
        ("max_tokens_per_trajectory", 0, "max_tokens_per_trajectory must be an integer >= 1"),
        ("max_tokens_per_trajectory", -7, "max_tokens_per_trajectory must be an integer >= 1"),
        ("max_tokens_per_turn", 0, "max_tokens_per_turn must be an integer >= 1"),
        ("rollout_max_retries", -3, "rollout_max_retries must be an integer >= 0"),
        ("rollout_timeout", 0, "rollout_timeout must be a number of seconds > 0"),
        ("rollout_timeout", -1.5, "rollout_timeout must be a number of seconds > 0"),
        ("rollout_timeout", float("nan"), "rollout_timeout must be a number of seconds > 0"),
        ("sampler_max_wait_s", 0, "sampler_max_wait_s must be a number of seconds > 0"),
        ("group_stall_timeout_s", -1, "group_stall_timeout_s must be a number of seconds > 0"),
        ("rollout_error_strategy", "ignore", "rollout_error_strategy must be 'fail_fast' or 'retry'"),
    ],
)
def test_bad_rollout_field_is_refused_when_the_config_is_built(config_class, field, value, message):
    with pytest.raises(ValueError, match=f"{config_class.__name__}.{message}") as info:
        build(config_class, **{field: value})
    assert repr(value) in str(info.value)  # the value given is shown


@pytest.mark.parametrize("config_class", CONFIGS)
def test_rollout_timeout_with_fail_fast_warns_what_will_happen(config_class):
    with pytest.warns(
        UserWarning,
        match=r"rollout_timeout=3 with rollout_error_strategy='fail_fast': a rollout that "
        r"runs longer than 3 s stops training with an error",
    ):
        build(config_class, rollout_timeout=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no warning under retry
        assert build(config_class, rollout_timeout=3, rollout_error_strategy="retry").rollout_timeout == 3


@pytest.mark.parametrize("config_class", CONFIGS)
def test_output_dir_is_still_the_first_positional_field(config_class):
    config = config_class("some_out", use_cpu=True, report_to="none")
    assert config.output_dir == "some_out" and config.max_turns == 16


def test_script_parser_refuses_a_bad_rollout_field_before_loading_a_model():
    from trl import ModelConfig, TrlParser

    parser = TrlParser((EnvGRPOConfig, ModelConfig))
    with pytest.raises(ValueError, match=r"EnvGRPOConfig.max_turns must be an integer >= 1 .* got 0"):
        parser.parse_args_into_dataclasses(["--output_dir", "/tmp/x", "--use_cpu", "true", "--max_turns", "0"])


# -- built-in env options ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "options", "message"),
    [
        ("arithmetic", {"max_operand": -5}, "env 'arithmetic': option 'max_operand' must be an integer >= 0, got -5"),
        (
            "arithmetic",
            {"max_operand": "three"},
            "env 'arithmetic': option 'max_operand' must be an integer >= 0, got 'three'",
        ),
        ("arithmetic", {"max_operand": 2.5}, "option 'max_operand' must be an integer"),
        ("arithmetic", {"seed": "x"}, "env 'arithmetic': option 'seed' must be an integer"),
        (
            "judged_arithmetic",
            {"max_operand": -1},
            "env 'judged_arithmetic': option 'max_operand' must be an integer >= 0",
        ),
        ("guess_number", {"low": 9, "high": 3}, "env 'guess_number': option 'low' must be <= option 'high'"),
        ("guess_number", {"max_guesses": 0}, "env 'guess_number': option 'max_guesses' must be an integer >= 1"),
        ("guess_number", {"high": "ten"}, "env 'guess_number': option 'high' must be an integer"),
        ("tool_use", {"max_operand": 1}, "env 'tool_use': option 'max_operand' must be an integer >= 2"),
        ("tool_use", {"max_tool_calls": -1}, "env 'tool_use': option 'max_tool_calls' must be an integer >= 0"),
        ("tic_tac_toe", {"test_opponent": "grandmaster"}, "env 'tic_tac_toe': option 'test_opponent' must be one of"),
        ("tic_tac_toe", {"move_timeout": 0}, "env 'tic_tac_toe': option 'move_timeout' must be a finite number > 0"),
        ("cartpole", {"max_episode_steps": 0}, "env 'cartpole': option 'max_episode_steps' must be an integer >= 1"),
    ],
)
def test_builtin_env_option_is_checked_naming_env_and_option(env, options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        make_env_dataset(env, None, group_size=4, groups_per_batch=2, num_batches=3, **options)


@pytest.mark.parametrize("size", ["group_size", "groups_per_batch", "num_batches"])
def test_builtin_env_sizes_are_checked(size):
    sizes = {"group_size": 4, "groups_per_batch": 2, "num_batches": 3, size: 0}
    with pytest.raises(ValueError, match=r"env 'arithmetic': option '\w+' must be an integer >= 1, got 0"):
        make_env_dataset("arithmetic", None, **sizes)


# -- env data files and rows ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "content"), [("rows.jsonl", ""), ("rows.jsonl", "\n\n"), ("rows.csv", "env,a,b\n")])
def test_empty_env_data_file_says_it_has_no_rows(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=f"env dataset '{path}' has no rows"):
        load_env_dataset(str(path))


def test_row_with_null_env_says_the_env_name_is_null(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"env": "arithmetic", "a": 1, "b": 2}\n{"env": null, "a": 3, "b": 4}\n')
    with pytest.raises(EnvRowError, match=r"env row 1, field 'env': the env name is null"):
        EnvRowDataset(load_env_dataset(str(path)), None, group_size=2)


# -- beta > 0 with a model object: the reference is the model as passed ------------------------------------------------


def test_kl_reference_is_a_frozen_copy_of_the_model_as_passed(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)  # loaded from a path, then changed in memory
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    changed = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = EnvGRPOTrainer(
        model,
        cpu_grpo_config(beta=0.1),
        make_env_dataset("arithmetic", renderer, group_size=4, groups_per_batch=2, num_batches=4),
        processing_class=tokenizer,
    )
    reference = trainer.accelerator.unwrap_model(trainer.ref_model)
    assert reference is not model
    ref_state = reference.state_dict()
    for name, value in changed.items():  # the changed weights, not the ones saved on disk
        assert torch.equal(ref_state[name], value), name
    assert not any(p.requires_grad for p in reference.parameters())
    trainer.train()  # one step with the KL term; the reference does not move
    assert any(not torch.equal(p.detach(), changed[n]) for n, p in model.named_parameters())
    assert all(torch.equal(v, changed[k]) for k, v in reference.state_dict().items())


def test_kl_reference_works_for_a_model_built_in_memory(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model.config._name_or_path = ""  # nothing TRL could reload
    trainer = EnvGRPOTrainer(
        model,
        cpu_grpo_config(beta=0.1),
        make_env_dataset("arithmetic", renderer, group_size=4, groups_per_batch=2, num_batches=4),
        processing_class=tokenizer,
    )
    assert trainer.ref_model is not None
    trainer.train()
    assert any("kl" in entry for entry in trainer.state.log_history)


# -- trainer construction does not walk the dataset ----------------------------------------------------------------


class CountingDataset(RLDataset):
    """Arithmetic batches of ``sizes[i]`` groups; counts ``get_batch`` calls."""

    def __init__(self, renderer, sizes: list[int], group_size: int = 4):
        self.sizes, self.calls = sizes, 0
        self.inner = ArithmeticDataset(renderer, max(sizes), group_size, len(sizes))

    def get_batch(self, index):
        self.calls += 1
        return list(self.inner.get_batch(index))[: self.sizes[index]]

    def __len__(self):
        return len(self.sizes)


def test_trainer_construction_does_not_call_get_batch_per_batch(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    dataset = CountingDataset(renderer, [2] * 99_999 + [1])
    trainer = EnvGRPOTrainer(tiny_model_path, cpu_grpo_config(), dataset, processing_class=tokenizer)
    assert dataset.calls <= 3  # first and last batch (cached), not 100,000
    assert len(trainer.train_dataset) == 2 * 99_999 + 1
    assert trainer.train_dataset[0]["prompt"] == "train/0/0"
    assert trainer.train_dataset[-1]["prompt"] == "train/99999/0"
    assert trainer.train_dataset[3]["prompt"] == "train/1/1"


def test_batch_that_does_not_fit_the_layout_is_named_when_first_used(
    cpu_grpo_config, tiny_model_path, tokenizer, renderer
):
    dataset = CountingDataset(renderer, [1, 1, 2, 1])  # batch 2 has more groups than batch 0
    trainer = EnvGRPOTrainer(
        tiny_model_path, cpu_grpo_config(per_device_train_batch_size=4), dataset, processing_class=tokenizer
    )
    assert trainer.env_group("train/1/0") is not None
    with pytest.raises(
        ValueError,
        match=r"batch 2 of the train RLDataset \(CountingDataset\) has 2 env groups, "
        r"expected 1 \(batch 0 has 1\)",
    ):
        trainer.env_group("train/2/0")


def test_last_batch_larger_than_the_first_is_refused_at_construction(
    cpu_grpo_config, tiny_model_path, tokenizer, renderer
):
    with pytest.raises(
        ValueError,
        match=r"the last batch \(2\) of the train RLDataset .* has 2 env groups but "
        r"batch 0 has 1",
    ):
        EnvGRPOTrainer(
            tiny_model_path, cpu_grpo_config(), CountingDataset(renderer, [1, 1, 2]), processing_class=tokenizer
        )
