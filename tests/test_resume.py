"""Resuming from the scripts (issue 16): ``--resume_from_checkpoint`` continues a run exactly.

* ``scripts/train_grpo.py`` on 2 processes (gloo), killed after its step-2 checkpoint was written, then resumed from
  that checkpoint: the resumed run logs exactly the steps 3..4 of an uninterrupted run (rewards, loss, every logged
  value but timings, so the same batches were sampled and trained) and ends with identical weights.
* ``scripts/train_dpo.py`` in env mode (env-driven DPO rounds, checkpointed at round ends), resumed after round 1:
  rounds 2 and 3 log the same values and the final weights are identical.
* a checkpoint that does not exist, or "last" with no checkpoint, is a clear error before any model is loaded.

CI time: two 2-process launches run side by side, then one more; then a few seconds in-process.
"""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mp_launch import CONFIGS, REPO, free_port, kill_tree, launch_env, run_with_timeout
from safetensors.torch import load_file

pytestmark = pytest.mark.timeout(400)

LAUNCH_TIMEOUT_S = 240
TIMING_KEYS = ("runtime", "per_second", "seconds", "step_time", "total_flos")
MAX_STEPS = 12  # the run is killed right after checkpoint-2: the 10 steps left must outlast the kill, however fast


def grpo_command(model_path: str, output_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(CONFIGS / "cpu_2proc.yaml"),
        "--main_process_port",
        str(free_port()),
        str(REPO / "scripts" / "train_grpo.py"),
        "--model_name_or_path",
        model_path,
        "--use_cpu",
        "true",
        "--output_dir",
        str(output_dir),
        "--max_steps",
        str(MAX_STEPS),
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
        "--per_device_train_batch_size",
        "8",
        "--num_generations",
        "4",
        "--groups_per_batch",
        "4",
        "--num_env_batches",
        "20",
        "--max_completion_length",
        "8",
        "--max_turns",
        "2",
        "--card_eval",
        "false",
        *extra,
    ]


def checkpoint_complete(folder: Path, world_size: int = 2) -> bool:
    return (folder / "trainer_state.json").exists() and all(
        (folder / f"rng_state_{r}.pth").exists() for r in range(world_size)
    )


def step_logs(checkpoint: Path) -> dict[int, dict]:
    """Each step's logged values (timings left out), from a checkpoint's trainer_state.json."""
    history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    return {h["step"]: {k: v for k, v in h.items() if not any(t in k for t in TIMING_KEYS)} for h in history}


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys()
    different = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert not different, f"weights differ after resuming: {different[:5]}"


def test_grpo_script_resumes_a_killed_two_process_run_exactly(tmp_path, tiny_model_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    # the uninterrupted run and the run to be killed start together (the imports dominate a launch's time)
    logs = [open(tmp_path / "full.log", "w"), open(tmp_path / "cut.log", "w")]
    runs = [
        subprocess.Popen(
            grpo_command(tiny_model_path, out),
            cwd=REPO,
            env=launch_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for out, log in zip((full, cut), logs)
    ]
    try:
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        while not checkpoint_complete(cut / "checkpoint-2") and runs[1].poll() is None:
            assert time.monotonic() < deadline, "the run to interrupt wrote no checkpoint-2 in time"
            time.sleep(0.05)
        time.sleep(0.3)  # let the checkpoint's last files land
        kill_tree(runs[1])
        rc = runs[0].wait(timeout=max(deadline - time.monotonic(), 1))
        assert rc == 0, f"the uninterrupted run failed:\n{(tmp_path / 'full.log').read_text()[-4000:]}"
    finally:
        for run in runs:
            kill_tree(run)
        for log in logs:
            log.close()
    assert checkpoint_complete(cut / "checkpoint-2")
    assert not (cut / "model.safetensors").exists(), "the run finished before it could be interrupted"

    resumed = run_with_timeout(
        grpo_command(tiny_model_path, cut, "--resume_from_checkpoint", str(cut / "checkpoint-2")),
        LAUNCH_TIMEOUT_S,
        tmp_path / "resumed.log",
    )
    steps = [int(s) for s in re.findall(r"\[trl_envs\] step +(\d+)", resumed)]
    assert steps == list(range(3, MAX_STEPS + 1))  # continues at step 3: steps 1-2 are not replayed
    last = f"checkpoint-{MAX_STEPS}"
    expected, got = step_logs(full / last), step_logs(cut / last)
    assert got == expected  # the same values logged at every step (rewards: same batches, same samples)
    assert_same_weights(full, cut)


def run_script(script: str, monkeypatch, *args: str) -> None:
    """``python scripts/<script> ARGS`` in this process."""
    monkeypatch.setattr(sys, "argv", [script, *args])
    runpy.run_path(str(REPO / "scripts" / script), run_name="__main__")


def dpo_args(model_path: str, output_dir: Path, *extra: str) -> list[str]:
    return [
        "--env",
        "arithmetic",
        "--model_name_or_path",
        model_path,
        "--use_cpu",
        "true",
        "--output_dir",
        str(output_dir),
        "--num_rounds",
        "3",
        "--group_size",
        "4",
        "--groups_per_round",
        "4",
        "--num_env_batches",
        "10",
        "--max_tokens_per_turn",
        "8",
        "--max_turns",
        "2",
        "--per_device_train_batch_size",
        "8",
        "--logging_steps",
        "1",
        "--eval_envs_each_round",
        "false",
        "--save_strategy",
        "epoch",
        "--card_eval",
        "false",
        *extra,
    ]


def round_lines(out: str) -> list[str]:
    return [re.sub(r" \| [\d.]+ s$", "", line) for line in out.splitlines() if line.startswith("[trl_envs] round")]


def test_dpo_script_resumes_env_rounds_exactly(tmp_path, tiny_model_path, monkeypatch, capsys):
    full, cut = tmp_path / "full", tmp_path / "cut"
    run_script("train_dpo.py", monkeypatch, *dpo_args(tiny_model_path, full))
    full_rounds = round_lines(capsys.readouterr().out)
    checkpoints = sorted(full.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert len(checkpoints) == 3 and (checkpoints[0] / "env_dpo_rounds.json").exists()  # one per round
    assert json.loads((checkpoints[0] / "env_dpo_rounds.json").read_text())["rounds_done"] == 1

    run_script(
        "train_dpo.py", monkeypatch, *dpo_args(tiny_model_path, cut, "--resume_from_checkpoint", str(checkpoints[0]))
    )
    cut_rounds = round_lines(capsys.readouterr().out)
    assert len(full_rounds) == 3 and cut_rounds == full_rounds[1:]  # rounds 2, 3: same pairs, rewards, loss
    assert_same_weights(full, cut)
    assert all((c / "trl_envs_checkpoint.json").exists() for c in checkpoints)  # complete: `last` resumes from them
    for key in ("num_tokens", "round", "loss"):  # the log history goes on as in the uninterrupted run
        assert last_logged(cut, key) == pytest.approx(last_logged(full, key)), key


def last_logged(output_dir: Path, key: str) -> list[float]:
    """The values of ``key`` in the log history of ``output_dir``'s newest checkpoint."""
    last = max(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return [h[key] for h in json.loads((last / "trainer_state.json").read_text())["log_history"] if key in h]


@pytest.mark.parametrize("script", ["train_grpo.py", "train_dpo.py"])
@pytest.mark.parametrize(
    ("value", "message"),
    [("/does/not/exist", "'/does/not/exist': no such checkpoint folder"), ("last", "holds no checkpoint-\\* folder")],
)
def test_scripts_refuse_a_missing_checkpoint_before_loading_a_model(
    script, value, message, tmp_path, monkeypatch, capsys
):
    import transformers

    def no_loading(*args, **kwargs):
        raise AssertionError("a model or tokenizer was loaded before the checkpoint was checked")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_loading)
    with pytest.raises(SystemExit) as exit_info:
        run_script(script, monkeypatch, "--output_dir", str(tmp_path / "empty"), "--resume_from_checkpoint", value)
    code = exit_info.value.code
    assert code not in (0, None)
    said = capsys.readouterr().err + (code if isinstance(code, str) else "")  # parser.error, or SystemExit(message)
    assert re.search(f"--resume_from_checkpoint.*{message}", said)


def test_env_dpo_refuses_a_checkpoint_that_is_not_a_round_checkpoint(tmp_path, tiny_model_path, tokenizer, renderer):
    from trl_envs import EnvDPOConfig, EnvDPOTrainer, make_env_dataset

    args = EnvDPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        save_strategy="no",
        num_rounds=1,
    )
    trainer = EnvDPOTrainer(
        tiny_model_path,
        args=args,
        processing_class=tokenizer,
        env_dataset=make_env_dataset("arithmetic", renderer, group_size=4, batch_size=2, num_batches=2),
    )
    foreign = tmp_path / "checkpoint-3"
    foreign.mkdir()
    (foreign / "trainer_state.json").write_text("{}")
    with pytest.raises(ValueError, match=r"is not a checkpoint of env-driven DPO \(it has no env_dpo_rounds.json\)"):
        trainer.train(resume_from_checkpoint=str(foreign))
