"""Input mistakes as a user meets them in the training scripts and ``trl-envs`` commands: one line naming the flag
and the value, exit status 2, no traceback, no usage dump, before the model loads wherever the mistake can be seen
then; a run stopped by the training-health watchdog exits 1 without a model card. In-process, on the tiny model.
"""

import sys
from pathlib import Path

import pytest

from trl_envs.cli.scripts import run_training_script

REPO = Path(__file__).resolve().parents[1]


# -- plain input mistakes: one line, exit 2, before the model loads where they can be seen then -------------------


def grpo_parser():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import train_grpo
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return train_grpo


def run_grpo(capsys, *argv, out: list | None = None) -> tuple[int, str]:
    script = grpo_parser()
    capsys.readouterr()
    code = run_training_script(
        "train_grpo.py", lambda a: script.parse_args(a, report=False)[1:], script.main, list(argv)
    )
    captured = capsys.readouterr()
    if out is not None:
        out.append(captured.out)
    return code, captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env", "guess_numbr"], "unknown env 'guess_numbr'; did you mean 'guess_number'?"),
        (["--env_kwargs", "{bad"], "--env_kwargs: invalid JSON"),
        (["--model_name_or_path", "./no-such-model"], "--model_name_or_path './no-such-model': no such folder"),
        (
            ["--num_generations", "3", "--per_device_train_batch_size", "8"],
            "--per_device_train_batch_size 8 × --gradient_accumulation_steps 1 = 8 rows per step is not a multiple of "
            "--num_generations 3",
        ),
        (["--temperature", "-1"], "--temperature -1.0: must be >= 0"),
        (["--num_env_batches", "0"], "--num_env_batches 0: must be an integer >= 1"),
        (["--max_turns", "0"], "max_turns must be an integer >= 1"),
        (["--push_to_hub", "true"], "--push_to_hub: huggingface_hub is in offline mode"),
        (["--resume_from_checkpoint", "last"], "holds no checkpoint-\\* folder"),
    ],
)
def test_script_mistakes_seen_before_the_model_loads_print_one_line(argv, message, capsys, monkeypatch, tmp_path):
    import re

    import transformers

    monkeypatch.setattr(
        transformers.AutoTokenizer,
        "from_pretrained",
        lambda *a, **k: pytest.fail("a tokenizer was loaded before the mistake was reported"),
    )
    stdout: list[str] = []
    code, err = run_grpo(capsys, *argv, "--output_dir", str(tmp_path / "out"), out=stdout)
    assert code == 2
    if "--push_to_hub" not in argv:  # the Hub is checked when the run starts, after the settings table
        assert "[trl_envs] settings" not in stdout[0]  # the table comes only once the checks passed
    lines = [line for line in err.splitlines() if line.startswith("train_grpo.py: error:")]
    assert len(lines) == 1 and re.search(message if "\\" in message else re.escape(message), lines[0]), err
    assert "Traceback" not in err and "usage:" not in err


def test_script_mistakes_found_with_the_model_print_one_short_line(capsys, tmp_path, tiny_model_path):
    import json
    import shutil

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"env": "arithmetic", "a": "x" * 1_000_000, "b": 3}) + "\n")
    no_template = tmp_path / "no-template"
    shutil.copytree(tiny_model_path, no_template)
    config = json.loads((no_template / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (no_template / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in no_template.glob("chat_template.*"):
        extra.unlink()
    common = ["--max_steps", "1", "--card_eval", "false", "--output_dir", str(tmp_path / "out")]
    for argv, message in [
        (["--env_dataset", str(rows), "--model_name_or_path", tiny_model_path], "expects int, got 'xxxx"),
        (["--model_name_or_path", str(no_template)], "has no chat template"),
        (
            ["--env_kwargs", '{"group_size": 3}', "--model_name_or_path", tiny_model_path],
            "made 3 envs but the group size (num_generations) is 8",
        ),
        (
            ["--env_kwargs", '{"max_operandd": 3}', "--model_name_or_path", tiny_model_path],
            "env 'arithmetic' (builtin) takes no option 'max_operandd'",
        ),
    ]:
        code, err = run_grpo(capsys, *argv, *common)
        assert code == 2 and "Traceback" not in err, err[-2000:]
        assert message in err and len(err) < 5000, err[-2000:]  # the 1 MB field is not echoed


def test_dpo_script_mistakes_are_refused_before_the_model_loads(tmp_path, capsys, monkeypatch):
    import json

    import transformers

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import train_dpo
    finally:
        sys.path.remove(str(REPO / "scripts"))
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"prompt": "p", "chosen": "a"}) + "\n")
    monkeypatch.setattr(
        transformers.AutoTokenizer,
        "from_pretrained",
        lambda *a, **k: pytest.fail("a tokenizer was loaded before the mistake was reported"),
    )
    for argv, message in [
        (["--data_files", str(data)], "no 'rejected' column"),
        (["--env", "arithmetic", "--temperature", "-1"], "--temperature -1.0: must be >= 0"),
    ]:
        code = run_training_script(
            "train_dpo.py",
            lambda a: train_dpo.parse_args(a, report=False)[1:],
            train_dpo.main,
            [*argv, "--output_dir", str(tmp_path / "out")],
        )
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err, err


def test_a_run_stopped_by_the_health_watchdog_exits_1_without_a_model_card(capsys, tmp_path, tiny_model_path):
    out = tmp_path / "out"
    code, err = run_grpo(
        capsys,
        "--model_name_or_path",
        tiny_model_path,
        "--env",
        "reliability_envs:failing",
        "--rollout_error_strategy",
        "retry",
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--max_steps",
        "4",
        "--health_patience",
        "2",
        "--output_dir",
        str(out),
    )
    assert code == 1, err[-2000:]
    assert "train_grpo.py: error: stopped at step 2" in err and "every group was skipped" in err
    assert not (out / "README.md").exists() and not (out / "model.safetensors").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "--num_problems", "0"], "--num_problems 0: must be an integer >= 1"),
        (["eval", "--samples_per_problem", "1", "--pass_k", "8"], "--pass_k 8: pass@k needs"),
        (["eval", "--temperature", "-1"], "--temperature -1.0: must be >= 0"),
        (["eval", "--model", str(REPO / "README.md")], "is a file; give a model folder"),
        (["eval", "--env", "guess_numbr"], "did you mean 'guess_number'?"),
    ],
)
def test_trl_envs_mistakes_print_one_line(argv, message, capsys, tiny_model_path, tmp_path, monkeypatch):
    from trl_envs.cli.commands import main
    from trl_envs.hub import model_loading

    monkeypatch.setattr(model_loading, "load_policy", lambda *a, **k: pytest.fail("the model was loaded first"))
    if "--model" not in argv:
        argv = [*argv, "--model", tiny_model_path]
    code = main([*argv, "--output", ""])
    err = capsys.readouterr().err
    assert code == 2 and "trl-envs eval: error: " in err and message in err and "Traceback" not in err


COOKBOOK_ARITHMETIC = "tinker_cookbook.recipes.math_rl.arithmetic_env:ArithmeticDatasetBuilder"


def cookbook_arithmetic_options(model_path: str, n_batches: int) -> dict:
    """``--env_kwargs`` of the cookbook's arithmetic builder on the tiny model: batches of 2 problems, no few-shot."""
    return {
        "model_name_for_tokenizer": model_path,
        "renderer_name": "qwen3_instruct",
        "n_batches": n_batches,
        "batch_size": 2,
        "include_fewshot": False,
    }


def test_cookbook_builder_mistakes_print_one_line(capsys, tmp_path, tiny_model_path):
    import json

    pytest.importorskip("tinker_cookbook")
    fields = cookbook_arithmetic_options(tiny_model_path, n_batches=2)
    for options, message in [
        ({**fields, "batch_sizee": 2}, "takes no option 'batch_sizee'"),
        ({**fields, "group_size": 3}, "made 3 envs but the group size (num_generations) is 8"),
    ]:
        code, err = run_grpo(
            capsys,
            "--env",
            COOKBOOK_ARITHMETIC,
            "--env_kwargs",
            json.dumps(options),
            "--model_name_or_path",
            tiny_model_path,
            "--max_steps",
            "1",
            "--output_dir",
            str(tmp_path / "out"),
        )
        assert code == 2 and message in err and "Traceback" not in err, err[-2000:]


def test_a_cookbook_env_without_test_split_trains_and_writes_a_card_without_evaluation(
    capsys, tmp_path, tiny_model_path
):
    """A builder whose test split is None trains; the card says it has no evaluation table instead of failing the run
    after training."""
    import json

    pytest.importorskip("tinker_cookbook")
    fields = cookbook_arithmetic_options(tiny_model_path, n_batches=1)
    out = tmp_path / "out"
    stdout: list[str] = []
    code, err = run_grpo(
        capsys,
        "--env",
        COOKBOOK_ARITHMETIC,
        "--env_kwargs",
        json.dumps(fields),
        "--num_generations",
        "4",
        "--per_device_train_batch_size",
        "8",
        "--model_name_or_path",
        tiny_model_path,
        "--max_steps",
        "1",
        "--output_dir",
        str(out),
        out=stdout,
    )
    printed = "".join(stdout)
    assert code == 0, err[-2000:]
    assert "has no test split, so the card has no evaluation table" in printed + err
    assert (out / "README.md").exists() and (out / "model.safetensors").exists()


@pytest.mark.parametrize("patience", ["50", "None"])
def test_a_run_that_mostly_trained_on_nothing_exits_1_whatever_health_patience_is(
    patience, capsys, tmp_path, tiny_model_path
):
    """Every group fails after the second step (an env server gone for good), skipped after its retries; patience
    above the run's length (or None) never stops it, but the end of the run does: more than half of the steps
    trained on nothing."""
    out = tmp_path / "out"
    code, err = run_grpo(
        capsys,
        "--model_name_or_path",
        tiny_model_path,
        "--env",
        "reliability_envs:failing_after",
        "--env_kwargs",
        '{"ok_groups": 4}',
        "--rollout_error_strategy",
        "retry",
        "--rollout_max_retries",
        "0",
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--max_steps",
        "6",
        "--health_patience",
        patience,
        "--output_dir",
        str(out),
    )
    assert code == 1, err[-2000:]
    assert "train_grpo.py: error: training on" in err and "ended at step 6" in err, err[-2000:]
    assert "in 4 of its 6 logged steps every group was skipped" in err, err[-2000:]
    assert "Traceback" not in err
    assert not (out / "README.md").exists() and not (out / "model.safetensors").exists()


def test_an_env_row_missing_a_field_is_one_line_naming_row_and_field_before_training(capsys, tmp_path, tiny_model_path):
    import json

    rows = tmp_path / "rows.jsonl"
    good = {"env": "arithmetic", "a": 1, "b": 2}
    rows.write_text("\n".join(json.dumps(r) for r in [good, good, good, {"env": "arithmetic", "a": 4}, good]) + "\n")
    out = tmp_path / "out"
    printed: list[str] = []
    code, err = run_grpo(
        capsys,
        "--env_dataset",
        str(rows),
        "--model_name_or_path",
        tiny_model_path,
        "--max_steps",
        "1",
        "--output_dir",
        str(out),
        out=printed,
    )
    assert code == 2 and "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "env row 3, field 'b': missing required field 'b'" in lines[0], err[-2000:]
    assert "'loss'" not in printed[0] and not (out / "model.safetensors").exists()  # stopped before training
