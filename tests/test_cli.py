"""The ``trl-envs`` command: list, play (scripted stdin), eval (numbers equal a direct computation), help; pass@k."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trl_envs.cli.commands import main
from trl_envs.core.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from trl_envs.rollout.evaluation import pass_at_k, summarize_groups

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """``python -m trl_envs ARGS`` from this checkout, as the ``trl-envs`` console script runs ``cli.main``."""
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return subprocess.run(
        [sys.executable, "-m", "trl_envs", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
    )


def test_console_script_is_declared():
    text = (ROOT / "pyproject.toml").read_text()
    scripts = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]  # tomllib needs Python 3.11
    assert 'trl-envs = "trl_envs.cli.commands:main"' in scripts.splitlines()
    assert 'trl-envs-build-tiny-model = "trl_envs.tiny_model:main"' in scripts.splitlines()


def test_list_shows_every_env_with_a_description(capsys):
    from trl_envs.envs import BUILTIN_ENVS

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # the built-in envs, then the names of each ecosystem library installed (reasoning_gym/..., docs/ecosystem.md)
    assert [line.split()[0] for line in lines if "/" not in line.split()[0]] == sorted(BUILTIN_ENVS)
    assert all(len(line.split()) > 2 for line in lines), lines  # a description follows each name
    assert main(["list", "--json"]) == 0
    assert sorted(n for n in json.loads(capsys.readouterr().out) if "/" not in n) == sorted(BUILTIN_ENVS)


@pytest.mark.parametrize(
    "command,expected",
    [
        (None, ["list", "play", "eval", "build-tiny-model"]),
        ("list", ["--json"]),
        ("play", ["--show_tokens", "--max_tokens", "env"]),
        ("eval", ["--model", "--env", "--samples_per_problem", "--pass_k", "--num_problems", "--output", "--seed"]),
        ("build-tiny-model", ["--output_dir", "--force"]),
    ],
)
def test_help_of_each_command(command, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(([command] if command else []) + ["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    entries = {line.split()[0] for line in out.splitlines() if line.strip()}  # what each help line starts with
    for word in expected:  # a help entry, not a word in some description ("play" is in the top-level one)
        assert word in entries, f"{word!r} missing from the help of {command or 'trl-envs'}:\n{out}"


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["eval", "play"])
def test_bad_env_kwargs_name_the_option(command, capsys):
    for text, expected in (("{bad", "invalid JSON '{bad'"), ("[1]", "expected a JSON object")):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--env_kwargs", text])
        assert exit_info.value.code == 2
        assert f"argument --env_kwargs: {expected}" in capsys.readouterr().err


def test_play_guess_number_from_scripted_stdin(tiny_model_path):
    proc = run_cli("play", "guess_number", "--model_name_or_path", tiny_model_path, stdin="8\n4\n6\n5\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert out.count("<|im_start|>assistant") == 4  # four turns, each observation shown as the model sees it
    assert "Lower.<|im_end|>" in out and "Higher.<|im_end|>" in out  # the env's replies
    assert "turn 3: reward +1.00" in out and "'win': 1.0" in out
    assert out.rstrip().endswith("total reward +0.70")  # 3 wrong guesses (-0.1 each) then the right one (+1)


def test_play_arithmetic_wrong_and_malformed_answers(tiny_model_path):
    wrong = run_cli("play", "arithmetic", "--model_name_or_path", tiny_model_path, stdin="11\n")
    assert wrong.returncode == 0, wrong.stderr[-3000:]
    assert "What is 5 + 5?" in wrong.stdout and "total reward +0.00" in wrong.stdout
    malformed = run_cli("play", "--model_name_or_path", tiny_model_path, "--show_tokens", stdin="ten\n")
    assert "total reward -0.10" in malformed.stdout and "[action: [" in malformed.stdout


def test_play_ends_the_episode_at_the_end_of_piped_input_with_the_reward_so_far(tiny_model_path):
    """The help's own example: two guesses piped in, the game unfinished; the turns played are reported, exit 0."""
    proc = run_cli("play", "guess_number", "--model_name_or_path", tiny_model_path, stdin="8\n4\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "--- end of input: the episode stops after 2 turns, unfinished" in out
    assert "turn 0: reward -0.10" in out and "turn 1: reward -0.10" in out
    assert out.rstrip().endswith("total reward -0.20") and "Traceback" not in proc.stderr
    help_text = run_cli("play", "--help").stdout
    assert "printf '8\\n4\\n' | trl-envs play guess_number" in help_text


def test_play_unknown_env_names_the_known_ones(tiny_model_path):
    proc = run_cli("play", "chess", "--model_name_or_path", tiny_model_path)
    assert proc.returncode != 0
    assert "unknown env 'chess'" in proc.stderr and "arithmetic" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_eval_numbers_equal_a_direct_computation_on_the_same_seeds(tmp_path, tiny_model_path, capsys):
    """``trl-envs eval`` against the rollouts computed here by hand: same problems, same seed, same sampler."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

    from trl_envs import HFSampler, Renderer, RolloutBudget, make_env_dataset, run_rollout_batch
    from trl_envs.rollout.event_loop import run_sync

    out = tmp_path / "eval.json"
    args = [
        "eval",
        "--model",
        tiny_model_path,
        "--env",
        "arithmetic",
        "--env_kwargs",
        '{"max_operand": 3}',
        "--num_problems",
        "3",
        "--samples_per_problem",
        "4",
        "--pass_k",
        "1",
        "2",
        "4",
        "--seed",
        "7",
        "--max_tokens",
        "8",
        "--device",
        "cpu",
        "--no_progress",
        "--output",
        str(out),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())

    # Direct: the env's test split with groups of 4, the same seed, an HFSampler at temperature 1.
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    builder = make_env_dataset(
        "arithmetic", Renderer(tokenizer), group_size=4, batch_size=3, num_test_batches=1, max_operand=3
    )
    _, test = run_sync(builder)
    set_seed(7)
    with torch.no_grad():
        result = run_rollout_batch(
            test.get_batch(0)[:3],
            HFSampler(model, tokenizer, temperature=1.0),
            RolloutBudget(max_turns=16, max_tokens_per_turn=8),
        )
    totals = [[t.step_reward + g for t, g in zip(group.trajectories, group.group_rewards)] for group in result.groups]
    flat = np.array([r for group in totals for r in group])
    solved = [[r > 0 for r in group] for group in totals]

    def brute_pass_at(k):  # the definition: share of k-subsets of a problem's samples holding a solved one
        return np.mean(
            [np.mean([any(s[i] for i in subset) for subset in itertools.combinations(range(4), k)]) for s in solved]
        )

    assert report["episode_rewards"] == pytest.approx(flat.tolist())
    assert report["num_episodes"] == 12 and report["num_problems"] == 3
    assert report["mean_reward"] == pytest.approx(flat.mean())
    assert report["std_reward"] == pytest.approx(flat.std())  # population std, as SB3's evaluate_policy (np.std)
    for k in (1, 2, 4):
        assert report["pass_at_k"][str(k)] == pytest.approx(brute_pass_at(k)), k
    assert report["per_tag"]["arithmetic"]["mean_reward"] == pytest.approx(flat.mean())
    assert report["per_tag"]["all"]["num_episodes"] == 12
    assert report["settings"]["seed"] == 7 and report["settings"]["env"] == "arithmetic"
    assert f"{flat.mean():.3f} ± {flat.std():.3f}" in printed and "pass@4" in printed


def test_eval_is_reproducible_and_the_seed_matters(tiny_model_path):
    from trl_envs.hub.model_eval import evaluate_model

    def run(seed):
        return evaluate_model(
            tiny_model_path, "arithmetic", num_problems=4, samples_per_problem=4, seed=seed, max_tokens=8, device="cpu"
        ).episode_rewards

    first = run(1)
    assert run(1) == first
    assert any(run(seed) != first for seed in (2, 3))


def test_eval_writes_its_json_in_the_models_folder_not_the_current_directory(
    tmp_path, tiny_model_path, monkeypatch, capsys
):
    import shutil

    from trl_envs.cli.commands import main

    model = tmp_path / "my-run"
    shutil.copytree(tiny_model_path, model)
    (model / "eval_results.json").write_text("{}")  # the training run's own evaluation: kept as it is
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    argv = ["eval", "--model", str(model), "--env", "arithmetic", "--num_problems", "1", "--samples_per_problem", "2"]
    argv += ["--max_tokens", "8", "--device", "cpu", "--no_progress"]
    assert main(argv) == 0
    written = model / "evals" / "arithmetic-test.json"
    assert json.loads(written.read_text())["settings"]["model"] == str(model)
    assert f"wrote {written}" in capsys.readouterr().out
    assert list(cwd.iterdir()) == [] and (model / "eval_results.json").read_text() == "{}"


def test_eval_refuses_more_problems_than_the_split_holds(tiny_model_path):
    from transformers import AutoTokenizer

    from trl_envs import HFSampler, Renderer, evaluate, make_env_dataset
    from trl_envs.rollout.event_loop import run_sync

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    _, test = run_sync(make_env_dataset("arithmetic", Renderer(tokenizer)))
    with pytest.raises(ValueError, match="asked for 99 problems but the dataset"):
        evaluate(HFSampler(None, tokenizer), test, num_problems=99)
    with pytest.raises(ValueError, match="num_problems must be >= 1, got 0"):
        evaluate(HFSampler(None, tokenizer), test, num_problems=0)


def _group(totals: list[float], tags: list[str]) -> TrajectoryGroup:
    trajectories = [
        Trajectory([Transition([1], TokensWithLogprobs([2], None, "stop"), r, True)], [1, 2]) for r in totals
    ]
    return TrajectoryGroup(trajectories, [0.0] * len(totals), [{}] * len(totals), tags=tags)


def test_per_tag_stats_and_pass_at_k_of_played_groups():
    groups = [
        _group([1.0, 0.0, 0.0], ["easy"]),
        _group([0.0, 0.0, -0.1], ["hard"]),
        None,
        _group([1.0, 1.0, 0.5], ["easy"]),
    ]
    result = summarize_groups(groups, {"ValueError": 1}, ks=[1, 3])
    rewards = [1.0, 0.0, 0.0, 0.0, 0.0, -0.1, 1.0, 1.0, 0.5]
    assert result.num_episodes == 9 and result.num_problems == 3
    assert result.mean_reward == pytest.approx(np.mean(rewards)) and result.std_reward == pytest.approx(np.std(rewards))
    assert result.pass_at_k[1] == pytest.approx((1 / 3 + 0 + 1) / 3)
    assert result.pass_at_k[3] == pytest.approx(2 / 3)
    assert list(result.per_tag) == ["all", "easy", "hard"]
    easy = result.per_tag["easy"]
    assert (easy.num_episodes, easy.num_problems, easy.pass_at_k[3]) == (6, 2, 1.0)
    assert easy.mean_reward == pytest.approx(3.5 / 6)
    assert result.per_tag["hard"].pass_at_k == {1: 0.0, 3: 0.0}
    assert result.metrics["env/all/skipped_groups"] == pytest.approx(0.25)
    table = result.format_table()
    assert table.splitlines()[0].split()[-2:] == ["pass@1", "pass@3"] and "hard" in table
    assert json.loads(json.dumps(result.to_dict()))["pass_at_k"] == {"1": result.pass_at_k[1], "3": 2 / 3}
    with pytest.raises(ValueError, match="smallest group has 3 envs"):
        summarize_groups(groups, ks=[4])
    with pytest.raises(RuntimeError, match=r"all 2 groups were skipped .*\{'ValueError': 2\}"):
        summarize_groups([None, None], {"ValueError": 2})
    thresholded = summarize_groups(groups, ks=[1], success_threshold=0.6)
    assert thresholded.pass_at_k[1] == pytest.approx((1 / 3 + 0 + 2 / 3) / 3)


@pytest.mark.parametrize("n,c,k", [(5, 0, 1), (5, 2, 1), (5, 2, 2), (5, 2, 4), (5, 5, 3), (6, 1, 6), (7, 3, 2)])
def test_pass_at_k_is_the_share_of_k_subsets_with_a_solved_sample(n, c, k):
    solved = [True] * c + [False] * (n - c)
    brute = np.mean([any(solved[i] for i in s) for s in itertools.combinations(range(n), k)])
    assert pass_at_k(n, c, k) == pytest.approx(brute)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="n=3, c=4, k=1"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="k=4"):
        pass_at_k(3, 1, 4)


def test_list_filters_by_text_and_kind(capsys):
    assert main(["list", "--kind", "builtin"]) == 0
    builtin = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert "arithmetic" in builtin and "tic_tac_toe" in builtin and all("/" not in n for n in builtin)
    assert main(["list", "guess_NUMBER", "--kind", "builtin"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["guess_number"]
    if importlib.util.find_spec("textarena") is not None:  # the family is listed only where it is installed
        assert main(["list", "textarena"]) == 0
        names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
        assert names and all(n.startswith("textarena/") for n in names)
    assert main(["list", "no-such-env-anywhere"]) == 1
    assert "no env matches 'no-such-env-anywhere'" in capsys.readouterr().err


def test_show_steps_must_be_at_least_one(tmp_path):
    proc = run_cli("show", str(tmp_path), "--steps", "0")
    assert proc.returncode == 2 and "argument --steps: must be >= 1, got 0" in proc.stderr


def test_output_into_a_closed_pipe_ends_quietly():
    """``trl-envs show ... | head``: the reader goes away; the command stops without a Broken pipe error."""
    code = (
        "import sys\nfrom trl_envs.cli.errors import run_command\n"
        "def body():\n    for i in range(10**6):\n        print('line', i)\n"
        "sys.exit(run_command('trl-envs show', body))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT
    )
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()  # as head does after its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == "", err


@pytest.mark.parametrize("command", ["grpo", "dpo"])
def test_training_help_opens_with_what_it_does_and_examples(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: trl-envs {command} [--config FILE.yaml] [OPTIONS]\n\nTrain a language model with")
    head = out[: out.index("options:")]
    examples = [line for line in head.splitlines() if line.startswith(f"  trl-envs {command}")]
    assert 3 <= len(examples) <= 5, head
    assert "--learning_rate" in out[out.index("options:") :]  # the full list of flags follows


def test_training_errors_name_the_command_as_typed(capsys):
    assert main(["dpo", "--no_such_flag", "1"]) == 2
    err = capsys.readouterr().err
    assert "trl-envs dpo: error: unknown flag --no_such_flag" in err and "train_dpo.py" not in err
