"""Shared fixtures: offline settings and the tiny chat model (it ships with the package: nothing is built)."""

import functools
import os
import signal

# A suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, and so would
# every process a test starts: the tests that press Ctrl-C on a training run could not. Handled here (not ignored), it
# is reset to the default in each started process, as it is under a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

# Modules (or module::test prefixes) whose tests train a model or launch processes: marked `slow`, so that
# `pytest -m "not slow"` gives a quick local pass. CI runs every test (the README's test line has no -m).
SLOW = (
    "test_distributed.py",
    "test_docs.py::test_doc_code_blocks_run",
    "test_async_rollouts.py",
    "test_resume.py",
    "test_dpo.py",
    "test_tiny_model.py::test_a_rebuild",
    "test_real_model_configs.py",
    "test_train_commands.py",
    "test_benches.py",
    "test_reliability_signals.py",
    "test_tinker_training.py",
    "test_hub.py",
    "test_training_consistency.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.nodeid.rsplit("/", 1)[-1]
        if name.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    from trl_envs.tiny_model import tiny_model_path

    return tiny_model_path()


@pytest.fixture(scope="session")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture(scope="session")
def renderer(tokenizer):
    from trl_envs import Renderer

    return Renderer(tokenizer)


@pytest.fixture
def cpu_grpo_config(tmp_path):
    """A factory of the tests' CPU ``EnvGRPOConfig`` (:func:`cpu_configs.cpu_grpo_config`) under ``tmp_path``;
    keywords override its defaults."""
    from cpu_configs import cpu_grpo_config

    return functools.partial(cpu_grpo_config, tmp_path)
