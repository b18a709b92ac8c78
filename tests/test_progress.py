"""Progress a user sees: steps with elapsed time and ETA, a notice and a bar for the card's evaluations."""

import importlib.util
import io
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from trl_envs.trainers.progress import StepProgressCallback

REPO = Path(__file__).resolve().parents[1]


def _state(step: int, max_steps: int = 3):
    return SimpleNamespace(is_world_process_zero=True, max_steps=max_steps, global_step=step)


def test_step_counter_when_asked():
    out = io.StringIO()  # not a terminal
    callback = StepProgressCallback(enabled=True, file=out)
    callback.on_train_begin(None, _state(0), None)
    for step in (1, 2, 3):
        callback.on_step_end(None, _state(step), None)
    callback.on_train_end(None, _state(3), None)
    text = out.getvalue()
    assert re.search(r"step 1/3 · \d\d:\d\d elapsed · ETA \d\d:\d\d", text), text
    assert "step 3/3 · " in text


def test_step_counter_is_off_when_not_a_terminal():
    out = io.StringIO()
    callback = StepProgressCallback(file=out)
    callback.on_train_begin(None, _state(0), None)
    callback.on_step_end(None, _state(1), None)
    callback.on_train_end(None, _state(1), None)
    assert out.getvalue() == ""


def test_script_shows_steps_and_the_card_evaluations(tiny_model_path, tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("train_grpo_progress", REPO / "scripts" / "train_grpo.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)
    spec.loader.exec_module(script)
    _, parsed, _ = script.parse_args(
        [
            "--model_name_or_path",
            tiny_model_path,
            "--output_dir",
            str(tmp_path / "run"),
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "8",
            "--num_generations",
            "4",
            "--max_completion_length",
            "4",
            "--card_eval_problems",
            "2",
            "--card_eval_samples",
            "2",
            "--progress",
            "true",
        ]
    )
    script.main(*parsed)
    captured = capsys.readouterr()
    assert re.search(r"step 2/2 · \d\d:\d\d elapsed · ETA", captured.err), captured.err[-2000:]
    assert (
        "evaluating the model before training on arithmetic (2 test problems x 2 samples = 4 episodes" in captured.out
    )
    assert "evaluating the model after training" in captured.out
    assert re.search(r"evaluate: 100%.*2/2", captured.err), captured.err[-2000:]  # the evaluations' bar


def test_step_counter_draws_on_stdout_when_stderr_is_piped(monkeypatch):
    """``accelerate launch`` pipes the script's stderr through itself; stdout is still the user's terminal."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal's size, as a window has
    with os.fdopen(slave, "w", encoding="utf-8") as terminal:
        monkeypatch.setattr(sys, "stdout", terminal)
        monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe: not a terminal
        callback = StepProgressCallback()
        callback.on_train_begin(None, _state(0), None)
        callback.on_step_end(None, _state(1), None)
        callback.on_train_end(None, _state(1), None)
        terminal.flush()
        chunks = []
        while select.select([master], [], [], 1.0)[0]:
            chunks.append(os.read(master, 65536))
        text = b"".join(chunks).decode()
    os.close(master)
    assert sys.stderr.getvalue() == ""
    assert re.search(r"step 1/3 · \d\d:\d\d elapsed · ETA", text), text
