"""Shared fixtures: offline settings and the tiny chat model (it ships with the package: nothing is built)."""

import functools
import os
import signal
import sys

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
    "test_tiny_model.py::test_the_recipe_still_makes",
    "test_real_model_configs.py",
    "test_train_commands.py",
    "test_benches.py",
    "test_reliability_signals.py",
    "test_tinker_training.py",
    "test_hub.py",
    "test_training_consistency.py",
    "test_ecosystem_games.py::test_a_game_without_a_move_list_trains_one_step_by_name",
    "test_multi_node.py",
)

# The modules that take longest (wall seconds on 2 CPU cores under `-n 2`, from ~160 s down to ~20 s), longest first:
# under pytest-xdist they are handed out first (pytest_xdist_make_scheduler). The rest take under 20 s each.
HEAVY_FIRST = (
    "test_docs.py",
    "test_benches.py",
    "test_verifiers_env.py",
    "test_async_rollouts.py",
    "test_distributed.py",
    "test_reliability_processes.py",
    "test_run_safety.py",
    "test_openenv.py",
    "test_reliability_signals.py",
    "test_ecosystem_games.py",
    "test_real_model_configs.py",
    "test_resume.py",
    "test_tiny_model.py",
    "test_train_commands.py",
    "test_gpu_check.py",
    "test_sampler_process.py",
    "test_tinker_adapter.py",
    "test_fast_sampler_training.py",
    "test_agents_endpoint.py",
    "test_cli.py",
    "test_versions.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if f"{item.path.name}::{item.name}".startswith(SLOW):  # not the node id's last "/": a parameter may hold one
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the longest modules first (pytest_xdist_make_scheduler)
        items.sort(
            key=lambda item: HEAVY_FIRST.index(item.path.name) if item.path.name in HEAVY_FIRST else len(HEAVY_FIRST)
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``-n 2``, the README's test line) each module runs whole on one worker, as with
    ``--dist loadfile``: a module-scoped fixture (a launch, a built model its tests read) is made once, and a module's
    tests keep their order. The modules go out in collection order with the longest first (HEAVY_FIRST), so that the
    workers finish together rather than one waiting on the other's last long module. A ``--dist`` other than the
    default ``load`` is used as given."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False  # keep the order above, not the scheduler's "most tests first"
    return LoadFileScheduling(config, log)


@pytest.fixture(autouse=True)
def _env_registrations_stay_in_their_test():
    """What a test (or a doc block it runs) adds with ``register_env`` is gone after it: the envs a later test on the
    same worker lists are the ones it registered itself, whichever order the workers run the modules in."""
    names = sys.modules.get("trl_envs.registry.names")
    before = dict(names._REGISTERED) if names else {}
    yield
    names = sys.modules.get("trl_envs.registry.names")
    if names is not None:
        names._REGISTERED.clear()
        names._REGISTERED.update(before)


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
