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

    asked = []
    monkeypatch.setattr(tiny_model, "tiny_model_path", lambda name="?": asked.append(name) or "/nowhere")
    args = build_parser().parse_args(["build-tiny-model"])
    assert args.name == DEMO_MODEL_NAME
    from trl_envs.cli import play

    with pytest.raises((OSError, ValueError)):  # the fake path does not load; we only check which model was asked for
        parsed = build_parser().parse_args(["eval"])
        parsed.run(parsed)  # the eval command's handler
    with pytest.raises((OSError, ValueError)):
        play.play(build_parser().parse_args(["play", "arithmetic"]))
    assert asked == [DEMO_MODEL_NAME, DEMO_MODEL_NAME]


def test_build_tiny_model_command_prints_the_shipped_demo_model(capsys):
    from trl_envs.tiny_model import main

    main([])
    path = Path(capsys.readouterr().out.strip())
    assert path.name == DEMO_MODEL_NAME and (path / "model.safetensors").is_file()
    assert path.is_relative_to(Path(__import__("trl_envs").__file__).parent)  # package data, not a cache


def test_model_card_build_hint_names_the_model():
    from trl_envs.hub.model_card import _base_model_text

    assert "ships with trl_envs; `trl-envs build-tiny-model` prints its path" in _base_model_text(
        f"/cache/{DEMO_MODEL_NAME}"
    )
    assert "`trl-envs build-tiny-model --name tiny-chat-v1`" in _base_model_text("/cache/tiny-chat-v1")


def test_cli_does_not_import_the_builder_at_start():
    code = (
        "import sys; import trl_envs.cli.commands as c; c.build_parser(); print('trl_envs.tiny_model' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert out.stdout.strip() == "False"
