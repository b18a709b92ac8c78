"""Rollout traces: written every logging step, logged to trackio and wandb (offline), rendered by ``trl-envs show``."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from trl_envs.cli.commands import main as cli_main
from trl_envs.rollout.traces import read_traces

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def traced_run(tiny_model_path, tmp_path_factory):
    """Two GRPO steps of guess_number (multi-turn) with report_to trackio and wandb, both offline."""
    pytest.importorskip("trackio")
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("traced")
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        TRACKIO_DIR=str(root / "trackio"),
        WANDB_MODE="offline",
        WANDB_DIR=str(root),
        WANDB_SILENT="true",
        TOKENIZERS_PARALLELISM="false",
    )
    out = root / "run"
    (root / "trackers.yaml").write_text("report_to: [trackio, wandb]\n")  # a list: a YAML config takes one
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "train_grpo.py"),
            "--model_name_or_path",
            tiny_model_path,
            "--env",
            "guess_number",
            "--output_dir",
            str(out),
            "--max_steps",
            "2",
            "--num_generations",
            "4",
            "--per_device_train_batch_size",
            "8",
            "--max_completion_length",
            "4",
            "--max_turns",
            "3",
            "--rollout_traces",
            "3",
            "--config",
            str(root / "trackers.yaml"),
            "--card_eval",
            "false",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return root, out


def test_traces_are_written_every_logging_step(traced_run):
    _, out = traced_run
    files = sorted(p.name for p in (out / "rollouts").glob("*.jsonl"))
    assert files == ["step_000001.jsonl", "step_000002.jsonl"]
    records = read_traces(out)
    assert len(records) == 6  # 3 episodes of the one env tag, twice
    for r in records:
        roles = [m["role"] for m in r["messages"]]
        assert roles[0] == "user" and "Guess" in r["messages"][0]["content"]
        replies = [m for m in r["messages"] if m["role"] == "assistant"]
        assert len(replies) == len(r["turn_rewards"]) >= 1
        assert [m["reward"] for m in replies] == r["turn_rewards"]
        assert r["total_reward"] == pytest.approx(sum(r["turn_rewards"]) + r["group_reward"])
        assert r["row_layout"] == "trajectory" and r["tag"] == "guess_number"
    multi = [r for r in records if len(r["turn_rewards"]) > 1]
    assert multi and any(m["content"] in ("Higher.", "Lower.") for r in multi for m in r["messages"])


def test_traces_reach_trackio_and_wandb(traced_run):
    root, _ = traced_run
    databases = list((root / "trackio").glob("*.db"))
    assert databases, list((root / "trackio").iterdir())
    text = "".join(str(row) for db in databases for row in sqlite3.connect(db).execute("SELECT * FROM metrics"))
    assert "rollouts" in text and "[assistant]" in text
    tables = list(root.glob("wandb/offline-run-*/files/media/table/rollouts_*.table.json"))
    assert tables, sorted(str(p) for p in root.glob("wandb/**/*"))[:50]
    table = json.loads(tables[0].read_text())
    assert "transcript" in table["columns"] and "[assistant]" in json.dumps(table["data"])


def test_show_renders_terminal_and_html(traced_run, capsys):
    _, out = traced_run
    assert cli_main(["show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "step 2 · guess_number · group 0 · episode 0 · total reward" in text
    assert "assistant │" in text and "user │" in text and "rows: trajectory" in text
    page = (out / "rollouts" / "index.html").read_text()
    assert page.count("class='episode'") == 6 and "<h2>step 1</h2>" in page


def test_show_without_traces_says_where_it_looked(tmp_path, capsys):
    assert cli_main(["show", str(tmp_path)]) == 2
    assert "no rollout traces in" in capsys.readouterr().err


def test_html_page_renders_in_a_browser(traced_run, tmp_path):
    """Headless Chromium loads the page and paints the transcript (the replies' green message boxes)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no chromium (apt-get install -y chromium)")
    from PIL import Image

    _, out = traced_run
    shot = tmp_path / "page.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1200,1000",
            (out / "rollouts" / "index.html").as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    assert shot.exists()
    pixels = Image.open(shot).convert("RGB").getdata()
    assistant = sum(p == (0xE6, 0xF4, 0xEA) for p in pixels)  # .assistant .content background
    user = sum(p == (0xE8, 0xF0, 0xFE) for p in pixels)  # .user .content background
    assert assistant > 1000 and user > 1000, (assistant, user)


def test_a_fresh_context_each_turn_is_shown_whole_and_laid_out_per_turn(tokenizer):
    from trl_envs.core.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
    from trl_envs.rollout.traces import trace_records

    def chat(*messages):
        return tokenizer.apply_chat_template(
            [{"role": r, "content": c} for r, c in messages], add_generation_prompt=True, tokenize=False
        )

    def ids(text):
        return tokenizer.encode(text, add_special_tokens=False)

    first, second = ids(chat(("user", "state 1"))), ids(chat(("user", "state 2")))
    reply = ids("0<|im_end|>")
    episode = Trajectory(
        [
            Transition(first, TokensWithLogprobs(reply), 1.0, False),
            Transition(second, TokensWithLogprobs(reply), 1.0, True),
        ],
        final_ob=second + reply,
        observations_extend=False,
    )
    group = TrajectoryGroup([episode], [0.5], [{}], tags=["cartpole"])
    (record,) = trace_records([group], tokenizer, step=3)
    assert [(m["role"], m["content"]) for m in record["messages"]][:2] == [("user", "state 1"), ("assistant", "0")]
    assert record["messages"][2]["role"] == "observation" and "state 2" in record["messages"][2]["content"]
    assert record["row_layout"] == "per_turn" and record["total_reward"] == 2.5 and record["tag"] == "cartpole"
