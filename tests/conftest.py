"""Shared fixtures: offline settings and the tiny chat model (built once per machine, then cached)."""

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


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    from trl_envs.tiny_model import build_tiny_model

    return build_tiny_model()


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
    """A factory of ``EnvGRPOConfig`` s that train the tiny model on a CPU in seconds; keywords override the
    defaults (one training step, groups of 4, 8 rows per device, no KL, output under ``tmp_path``)."""

    def make(**overrides):
        from trl_envs import EnvGRPOConfig

        defaults = dict(
            output_dir=str(tmp_path / "out"),
            use_cpu=True,
            bf16=False,
            report_to="none",
            gradient_checkpointing=False,
            num_generations=4,
            per_device_train_batch_size=8,
            max_steps=1,
            max_completion_length=8,
            max_turns=4,
            learning_rate=1e-3,
            logging_steps=1,
            save_strategy="no",
            seed=0,
            beta=0.0,
        )
        return EnvGRPOConfig(**{**defaults, **overrides})

    return make
