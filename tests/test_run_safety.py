"""What a user meets after the Quickstart, run as they run it (the script, ``trl-envs``, ``accelerate launch``):

* a second run (another env) never lands in the first run's folder, and one told to is refused in one line naming
  both; its traces never mix with the first run's (``--overwrite_output_dir`` replaces them);
* names that are folders are folders; a bare name or an uncached Hub id offline is one line;
* the model card's "Reproduce it" command runs as printed, from where the run was started;
* flags compose with the demo recipe (``--num_generations 16`` keeps its batch of 128); unknown flags, YAML keys and an
  ``--output_dir`` that is a file are one line with a did-you-mean;
* the default run prints its settings, progress, metrics and summary, and next to nothing else;
* the step counter with its ETA shows on a terminal under ``accelerate launch`` (stderr piped, stdout the terminal).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shlex
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from trl_envs.cli.commands import main as trl_envs_main
from trl_envs.cli.run_folder import RUN_RECORD, RunIdentity, claim_output_dir

REPO = Path(__file__).resolve().parents[1]
GRPO = REPO / "scripts" / "train_grpo.py"
RUN_DIR = "outputs/grpo-arithmetic"  # the Quickstart's folder: the default run's default output_dir
SHORT_CARD_EVAL = ["--card_eval_problems", "4", "--card_eval_samples", "2"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRL_ENVS_TRACEBACK": ""}


def _run(argv: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The README's default run, shortened to 2 steps and a small card evaluation, in a fresh folder."""
    cwd = tmp_path_factory.mktemp("user")
    done = _run([sys.executable, str(GRPO), "--max_steps", "2", *SHORT_CARD_EVAL], cwd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return cwd, done


# --- quiet by default -----------------------------------------------------------------------------------------------

EXPECTED_LINE = re.compile(
    r"^(\[trl_envs\] |  \S+\s+.*\((command line|demo recipe|script default.*|TRL default|trl_envs default|"
    r"this machine)\)$|saved to |tag\s+episodes|-{4,}|all\s+\d|arithmetic\s+\d)"
)
"""Settings table, progress and metric lines, the evaluation tables, the summary lines."""


def test_the_default_run_prints_next_to_nothing_but_settings_progress_metrics_and_summary(default_run):
    _, done = default_run
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    other = [line for line in lines if not EXPECTED_LINE.match(line)]
    assert len(other) <= 1, "lines that are not settings, progress, metrics or the summary:\n" + "\n".join(other)
    assert any(line.startswith("[trl_envs] step    2 |") for line in lines)


def test_each_warning_is_one_line():
    code = (
        "import warnings; from trl_envs.cli.quiet import quiet_run; quiet_run(); "
        "warnings.warn('two\\nlines', UserWarning); "
        "warnings.warn('`is_gradient_checkpointing` is deprecated and will be removed', FutureWarning)"
    )
    done = _run([sys.executable, "-c", code], REPO)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == ["<string>:1: UserWarning: two lines"], done.stderr


# --- runs never overwrite each other --------------------------------------------------------------------------------


def test_a_run_of_another_env_gets_its_own_folder(default_run):
    from trl_envs.cli.training_script import default_output_dir

    assert default_output_dir("grpo", "arithmetic", "tiny-chat-v5") == RUN_DIR
    assert default_output_dir("grpo", "guess_number", None) == "outputs/grpo-guess-number"
    assert default_output_dir("grpo", "guess_number", "Qwen/Qwen2.5-0.5B-Instruct") == (
        "outputs/grpo-guess-number-Qwen2.5-0.5B-Instruct"
    )
    assert default_output_dir("dpo", "preferences", "tiny-chat-v1") == "outputs/dpo-preferences-tiny-chat-v1"
    cwd, _ = default_run
    record = json.loads((cwd / RUN_DIR / RUN_RECORD).read_text())
    assert record == {"algorithm": "grpo", "env": "arithmetic", "model": "tiny-chat-v5"}


def test_a_run_into_another_runs_folder_is_refused_naming_both(default_run, capsys, monkeypatch):
    cwd, _ = default_run
    monkeypatch.chdir(cwd)
    model = cwd / RUN_DIR / "model.safetensors"
    before = (model.stat().st_mtime_ns, model.read_bytes())
    status = trl_envs_main(["grpo", "--env", "guess_number", "--output_dir", RUN_DIR, "--max_steps", "1"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.strip().count("\n") == 0, err
    assert "grpo on arithmetic with tiny-chat-v5" in err and "grpo on guess_number with tiny-chat-v5" in err, err
    assert "--overwrite_output_dir" in err
    assert (model.stat().st_mtime_ns, model.read_bytes()) == before


def test_overwrite_replaces_the_run_and_its_traces(default_run, tmp_path):
    cwd, _ = default_run
    shutil.copytree(cwd / "outputs", tmp_path / "outputs")
    (tmp_path / RUN_DIR / "checkpoint-2").mkdir()
    argv = ["--env", "guess_number", "--output_dir", RUN_DIR, "--overwrite_output_dir", "true", "--max_steps", "1"]
    argv += ["--per_device_train_batch_size", "16", "--card_eval", "false"]
    done = _run([sys.executable, str(GRPO), *argv], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / RUN_DIR
    assert not (folder / "checkpoint-2").exists()
    assert sorted(p.name for p in (folder / "rollouts").glob("step_*.jsonl")) == ["step_000001.jsonl"]
    shown = _run([sys.executable, "-m", "trl_envs", "show", RUN_DIR, "--html", ""], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "step 1 · guess_number" in shown.stdout and "arithmetic" not in shown.stdout
    assert json.loads((folder / RUN_RECORD).read_text())["env"] == "guess_number"


def _traced_folder(path: Path, identity: RunIdentity, steps: int) -> Path:
    (path / "rollouts").mkdir(parents=True)
    for step in range(1, steps + 1):
        (path / "rollouts" / f"step_{step:06d}.jsonl").write_text("{}\n")
    (path / RUN_RECORD).write_text(json.dumps(identity.__dict__))
    (path / "config.json").write_text("{}")
    return path


def test_traces_of_one_run_never_mix_with_anothers(tmp_path):
    run = RunIdentity("grpo", "arithmetic", "tiny-chat-v5")
    again = _traced_folder(tmp_path / "again", run, 3)
    claim_output_dir(str(again), run)  # the same run again, afresh: the old traces go
    assert list((again / "rollouts").glob("step_*")) == []
    resumed = _traced_folder(tmp_path / "resumed", run, 3)
    (resumed / "checkpoint-2").mkdir()
    claim_output_dir(str(resumed), run, resume_from=str(resumed / "checkpoint-2"))  # steps after 2 are traced again
    assert sorted(p.name for p in (resumed / "rollouts").glob("step_*")) == ["step_000001.jsonl", "step_000002.jsonl"]
    unrecorded = tmp_path / "unrecorded"
    unrecorded.mkdir()
    (unrecorded / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match="holds a model \\(adapter_config.json\\) of another run"):
        claim_output_dir(str(unrecorded), run)


# --- names that are folders are folders; the card's command runs -----------------------------------------------------


def test_the_cards_reproduce_command_runs_as_printed(default_run):
    cwd, _ = default_run
    card = (cwd / RUN_DIR / "README.md").read_text()
    command = re.search(r"Reproduce it.*?```bash\n(.+?)\n```", card, re.S).group(1)
    assert command.startswith(f"trl-envs eval --model {RUN_DIR} "), command
    argv = shlex.split(command)
    done = _run([sys.executable, "-m", "trl_envs", *argv[1:]], cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    after = json.loads((cwd / RUN_DIR / "eval_results.json").read_text())["after"]
    row = next(line for line in done.stdout.splitlines() if line.startswith("all "))
    assert f"{after['mean_reward']:.3f}" in row, (row, after)


def test_a_bare_name_that_is_a_folder_is_used_as_one(default_run, monkeypatch, capsys):
    cwd, _ = default_run
    monkeypatch.chdir(cwd / "outputs")
    argv = ["--env", "arithmetic", "--num_problems", "2", "--samples_per_problem", "1", "--max_tokens", "16"]
    assert trl_envs_main(["eval", "--model", "grpo-arithmetic", *argv, "--no_progress"]) == 0
    assert "grpo-arithmetic on arithmetic" in capsys.readouterr().out
    monkeypatch.chdir(cwd)
    assert trl_envs_main(["eval", "--model", "grpo-arithmetic", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a Hub id (org/name); did you mean outputs/grpo-arithmetic?" in err, err


def test_an_uncached_hub_id_offline_is_one_line_at_once(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status = trl_envs_main(["grpo", "--model_name_or_path", "someone/not-cached-anywhere", "--max_steps", "1"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.count("\n") == 0, err
    assert "not in the local Hugging Face cache" in err and "HF_HUB_OFFLINE=1" in err, err


# --- flags that compose; one-line errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--learnign_rate", "1e-3"], "unknown flag --learnign_rate (did you mean --learning_rate?)"),
        (["--output_dir", "a_file"], "--output_dir 'a_file' is a file; give a folder"),
        (["--config", "bad.yaml"], "--config bad.yaml: unknown key 'learnign_rate' (did you mean learning_rate?)"),
        (["--num_generations", "3"], "--per_device_train_batch_size 128 × --gradient_accumulation_steps 1 = 128 rows"),
    ],
)
def test_mistakes_are_one_line_in_the_users_words(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("")
    (tmp_path / "bad.yaml").write_text("learnign_rate: 0.001\n")
    assert trl_envs_main(["grpo", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert "dataclass" not in err and "HfArgumentParser" not in err


def test_a_misspelled_flag_is_one_line_from_the_script(tmp_path):
    done = _run([sys.executable, str(GRPO), "--learnign_rate", "1e-3"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "train_grpo.py: error: unknown flag --learnign_rate (did you mean --learning_rate?); --help lists the flags "
        "(each is also a YAML key of --config)"
    ]


def test_num_generations_keeps_the_demo_recipes_batch(capsys):
    import runpy

    script = runpy.run_path(str(GRPO), run_name="train_grpo_flags")
    _, (_, args, _, _), settings = script["parse_args"](["--num_generations", "16", "--eval_strategy", "steps"])
    table = capsys.readouterr().out
    assert (args.num_generations, args.per_device_train_batch_size) == (16, 128)
    assert args.per_device_eval_batch_size % 16 == 0
    assert re.search(r"per_device_train_batch_size\s+128\s+\(demo recipe\)", table), table


# --- progress under accelerate launch -------------------------------------------------------------------------------


def _read_all(fd: int, process: subprocess.Popen, timeout: float) -> str:
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            break
        try:
            data = os.read(fd, 65536)
        except OSError:  # the terminal closed: every process holding it exited
            break
        if not data:
            break
        chunks.append(data)
    process.wait(timeout=60)
    return b"".join(chunks).decode(errors="replace")


def test_the_step_counter_shows_on_a_terminal_under_accelerate_launch(tmp_path):
    accelerate = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or shutil.which("accelerate")
    if accelerate is None:
        pytest.skip("accelerate's launcher is not installed")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal's size, as a window has
    argv = [accelerate, "launch", "--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no"]
    argv += ["--dynamo_backend", "no", "--cpu", str(GRPO), "--tiny_model", "tiny-chat-v1", "--max_steps", "2"]
    argv += ["--per_device_train_batch_size", "16", "--card_eval", "false", "--output_dir", str(tmp_path / "run")]
    process = subprocess.Popen(argv, cwd=tmp_path, env=_env(), stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    try:
        out = _read_all(master, process, timeout=600)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, out[-3000:]
    assert re.search(r"step 2/2 · \S+ elapsed · ETA", out), out[-3000:]


def test_the_configs_use_the_checkpointing_name_transformers_expects(tmp_path):
    import warnings

    from trl_envs import EnvDPOConfig, EnvGRPOConfig
    from trl_envs.trainers.activation_checkpointing import transformers_has_activation_checkpointing

    new_name = transformers_has_activation_checkpointing()  # transformers 5.23 and later
    common = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False)
    for config in (EnvGRPOConfig, EnvDPOConfig):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)  # no deprecation warning when the user names neither
            assert config(**common).activation_checkpointing is True  # TRL's default: on
            if not new_name:  # an older transformers reads only the old name: the default is on there
                assert config(**common).gradient_checkpointing is True
            assert config(**common, activation_checkpointing=False).gradient_checkpointing is False
        if not new_name:  # the old name is the one this transformers knows: nothing to warn about
            assert config(**common, gradient_checkpointing=False).gradient_checkpointing is False
            continue
        with pytest.warns(FutureWarning, match="activation_checkpointing"):
            old = config(**common, gradient_checkpointing=False)  # the old name still works, and says the new one
        assert (old.activation_checkpointing, old.gradient_checkpointing) == (False, False)


def test_before_transformers_named_activation_checkpointing_the_setting_goes_under_the_old_name(tmp_path, monkeypatch):
    import warnings

    from trl_envs import EnvGRPOConfig
    from trl_envs.trainers import activation_checkpointing

    monkeypatch.setattr(activation_checkpointing, "transformers_has_activation_checkpointing", lambda: False)
    common = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # this transformers knows the new name and warns on the old
        assert EnvGRPOConfig(**common).gradient_checkpointing is True  # TRL's default, where transformers reads it
        assert EnvGRPOConfig(**common, activation_checkpointing=False).gradient_checkpointing is False
