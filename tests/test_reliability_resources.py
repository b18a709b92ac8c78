"""Resources that run out, made to run out for real: a disk that fills while a checkpoint is written (a small tmpfs
mounted for the test), memory that runs out in generation or in the training step, an observation far beyond the
token budget. Each ends in one line naming the cause and what to change, a non-zero exit status and no traceback;
what was saved before stays usable. In-process runs of ``scripts/train_grpo.py`` on the tiny model.
"""

import contextlib
import subprocess
from pathlib import Path

import pytest
from test_reliability_cli import run_grpo


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


@contextlib.contextmanager
def small_disk(where: Path, size_bytes: int):
    """A tmpfs of ``size_bytes`` mounted at ``where`` (skips the test where mounting is not allowed); always
    unmounted."""
    where.mkdir()
    size = -(-size_bytes // 4096) * 4096
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def grpo_argv(model_path, out, *more) -> list[str]:
    return [
        "--model_name_or_path",
        model_path,
        "--env",
        "reliability_envs:spread",
        "--env_kwargs",
        '{"scale": 1.0}',
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--output_dir",
        str(out),
        *more,
    ]


def test_a_disk_that_fills_during_a_checkpoint_is_named_and_the_previous_one_resumes(capsys, tmp_path, tiny_model_path):
    probe = tmp_path / "probe"
    code, err = run_grpo(
        capsys, *grpo_argv(tiny_model_path, probe, "--max_steps", "1", "--save_strategy", "steps", "--save_steps", "1")
    )
    assert code == 0, err[-2000:]
    one_checkpoint = folder_bytes(probe / "checkpoint-1")

    # room for checkpoint-1 and half of checkpoint-2: the disk fills while checkpoint-2 is written
    with small_disk(tmp_path / "disk", int(one_checkpoint * 1.5)) as disk:
        out = disk / "out"
        code, err = run_grpo(
            capsys,
            *grpo_argv(tiny_model_path, out, "--max_steps", "3", "--save_strategy", "steps", "--save_steps", "1"),
        )
        assert code == 1, err[-3000:]
        assert "Traceback" not in err
        line = next(line for line in err.splitlines() if line.startswith("train_grpo.py: error:"))
        assert f"no space left on device while writing {out / 'checkpoint-2'}" in line, line
        assert f"the disk holding {out} has" in line and "free of" in line, line
        assert f"{out / 'checkpoint-1'} is complete" in line and "resume_from_checkpoint last" in line, line

        subprocess.run(["mount", "-o", f"remount,size={8 * one_checkpoint}", str(disk)], check=True)  # space freed
        printed: list[str] = []
        code, err = run_grpo(
            capsys,
            *grpo_argv(tiny_model_path, out, "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1"),
            "--resume_from_checkpoint",
            "last",
            out=printed,
        )
        assert code == 0, err[-3000:]
        said = printed[0] + err
        assert f"skipping {out / 'checkpoint-2'}: incomplete" in said, said[-3000:]
        assert f"resuming from {out / 'checkpoint-1'} (the newest complete checkpoint)" in said, said[-3000:]
        assert (out / "checkpoint-2" / "trl_envs_checkpoint.json").exists()  # written again, completely


def raise_out_of_memory_in(phase: str):
    """A ``Qwen2Model.forward`` (the tiny model's body, run by generation and by the loss alike) that raises
    ``torch.OutOfMemoryError`` (as CUDA's allocator does) when called inside ``generate`` (``phase="generation"``) or
    outside it (``"training"``), and runs normally otherwise."""
    import sys

    import torch
    from transformers import Qwen2Model

    forward = Qwen2Model.forward

    def patched(self, *args, **kwargs):
        frame, in_generate = sys._getframe(1), False
        while frame is not None and not in_generate:
            in_generate, frame = frame.f_code.co_name == "generate", frame.f_back
        if in_generate == (phase == "generation"):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        return forward(self, *args, **kwargs)

    return patched


@pytest.mark.parametrize(
    ("phase", "strategy", "named"),
    [
        ("generation", "fail_fast", "out of memory in generation at step 1"),
        ("generation", "retry", "out of memory in generation at step 1"),  # never retried as an env error
        ("training", "fail_fast", "out of memory in the training step at step 1"),
    ],
)
def test_out_of_memory_names_the_settings_that_lower_memory_for_its_phase(
    phase, strategy, named, capsys, tmp_path, tiny_model_path, monkeypatch
):
    from transformers import Qwen2Model

    monkeypatch.setattr(Qwen2Model, "forward", raise_out_of_memory_in(phase))
    out = tmp_path / "out"
    code, err = run_grpo(
        capsys,
        *grpo_argv(tiny_model_path, out, "--max_steps", "2", "--rollout_error_strategy", strategy),
    )
    assert code == 1, err[-3000:]
    assert "Traceback" not in err
    line = next(line for line in err.splitlines() if line.startswith("train_grpo.py: error:"))
    assert named in line, line
    for knob in ("per_device_train_batch_size", "max_completion_length", "num_generations", "max_staleness 0"):
        assert knob in line, (knob, line)
    assert ("gradient_checkpointing true" in line) == (phase == "training"), line
    assert "(torch: CUDA out of memory. Tried to allocate 2.00 GiB (simulated))" in line
    assert not (out / "README.md").exists()
