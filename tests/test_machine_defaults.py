"""``EnvGRPOConfig`` / ``EnvDPOConfig`` built in Python choose ``use_cpu`` and ``bf16`` from the machine when left
unset (as the training scripts do), say so once, and keep what the user sets."""

from __future__ import annotations

import logging

import pytest
import torch

from trl_envs import EnvDPOConfig, EnvGRPOConfig
from trl_envs.trainers import machine_defaults


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(machine_defaults, "ANNOUNCED", set())


def test_configs_built_without_a_gpu_run_on_the_cpu_and_say_so_once(no_gpu, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=machine_defaults.__name__):
        grpo = EnvGRPOConfig(output_dir=str(tmp_path), num_generations=8, report_to="none")
        again = EnvGRPOConfig(output_dir=str(tmp_path), num_generations=8, report_to="none")
        dpo = EnvDPOConfig(output_dir=str(tmp_path), report_to="none")
    for config in (grpo, again, dpo):
        assert (config.use_cpu, config.bf16) == (True, False)
    said = [r.getMessage() for r in caplog.records if r.name == machine_defaults.__name__]
    assert said == [
        "EnvGRPOConfig: no CUDA GPU on this machine, so use_cpu=True, bf16=False (as the training scripts choose); "
        "set them to choose yourself"
    ]


def test_an_explicit_setting_wins(no_gpu, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=machine_defaults.__name__):
        config = EnvGRPOConfig(output_dir=str(tmp_path), num_generations=8, use_cpu=False, bf16=False)
    assert (config.use_cpu, config.bf16) == (False, False)
    assert not [r for r in caplog.records if r.name == machine_defaults.__name__]  # nothing chosen, nothing said
    with pytest.raises(ValueError, match="bf16"):  # transformers' own check, as before, for what the user asked
        EnvDPOConfig(output_dir=str(tmp_path), use_cpu=False, bf16=True)
