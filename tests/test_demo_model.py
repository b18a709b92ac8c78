"""One demo model: every command that needs a model and none was given uses tiny-chat-v5, and says so."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_envs.cli.commands import build_parser
from trl_envs.model_names import DEMO_MODEL_NAME

ROOT = Path(__file__).resolve().parent.parent


def test_demo_model_is_v5():
    assert DEMO_MODEL_NAME == "tiny-chat-v5"


def test_commands_default_to_the_demo_model(monkeypatch):
    import trl_envs.tiny_model as tiny_model

    built = []
    monkeypatch.setattr(tiny_model, "build_tiny_model", lambda *a, **k: built.append(k.get("name")) or "/nowhere")
    args = build_parser().parse_args(["build-tiny-model"])
    assert args.name == DEMO_MODEL_NAME
    from trl_envs.cli import play

    with pytest.raises((OSError, ValueError)):  # the fake path does not load; we only check which model was asked for
        parsed = build_parser().parse_args(["eval"])
        parsed.run(parsed)  # the eval command's handler
    with pytest.raises((OSError, ValueError)):
        play.play(build_parser().parse_args(["play", "arithmetic"]))
    assert built == [DEMO_MODEL_NAME, DEMO_MODEL_NAME]


def test_tiny_model_module_command_builds_the_demo_model_by_default():
    from trl_envs.tiny_model import main

    with pytest.raises(SystemExit):
        main(["--help"])
    import trl_envs.tiny_model as tiny_model

    seen = {}
    original = tiny_model.build_tiny_model
    try:
        tiny_model.build_tiny_model = lambda *a, **k: seen.update(k) or "/nowhere"
        main([])
    finally:
        tiny_model.build_tiny_model = original
    assert seen["name"] == DEMO_MODEL_NAME


def test_model_card_build_hint_names_the_model():
    from trl_envs.hub.model_card import _base_model_text

    assert "`trl-envs build-tiny-model`" in _base_model_text(f"/cache/{DEMO_MODEL_NAME}")
    assert "`trl-envs build-tiny-model --name tiny-chat-v1`" in _base_model_text("/cache/tiny-chat-v1")


def test_cli_does_not_import_the_builder_at_start():
    code = (
        "import sys; import trl_envs.cli.commands as c; c.build_parser(); print('trl_envs.tiny_model' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_a_long_build_says_it_is_still_building(monkeypatch, tmp_path, capsys):
    import subprocess as sp

    import trl_envs.tiny_model as tiny_model

    class SlowChild:  # the build child: finishes after two heartbeat intervals
        returncode = 0

        def __init__(self, *args, **kwargs):
            self.waits = 0

        def wait(self, timeout=None):
            self.waits += 1
            if self.waits <= 2:
                raise sp.TimeoutExpired("build", timeout)
            (tmp_path / tiny_model.MARKER_FILE).write_text("{}")
            return 0

    monkeypatch.setattr(tiny_model.subprocess, "Popen", SlowChild)
    tiny_model._run_build_subprocess(tmp_path, 0, DEMO_MODEL_NAME)
    assert capsys.readouterr().err.count("still building (") == 2
