"""Rollout traces people can read: episodes as transcripts with their rewards, one JSON object per episode.

:func:`trace_records` turns the trajectory groups of a rollout into records (a sample per env tag):

* ``step``, ``tag`` (the group's first logging tag), ``group`` (index in the batch), ``episode`` (index in the group);
* ``messages``: the whole transcript, ``{"role", "content"}`` per message, in order: the prompt's messages, then per
  turn the model's reply (``role`` ``assistant``, with that turn's ``reward``, ``metrics`` and ``finish``: ``stop`` or
  ``length``) and the env's answer. Text is split into messages by the ChatML markers ``<|im_start|>role`` /
  ``<|im_end|>`` when the chat template uses them; otherwise a segment is one message with role ``prompt`` / ``env``.
  A turn whose observation starts a fresh context (an env whose observations do not extend) shows that context
  whole, role ``observation``;
* ``turn_rewards``, ``group_reward``, ``total_reward`` (their sum), ``stop_reason``;
* ``row_layout``: how the trainer lays the episode out, ``trajectory`` (one training row) or ``per_turn`` (a row per
  turn).

:func:`write_traces` appends them to ``<dir>/step_<N>.jsonl``; :func:`read_traces` reads a run's traces back.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.types import Trajectory, TrajectoryGroup

TRACES_DIR = "rollouts"
"""The folder of a run's traces, inside its ``output_dir``."""

_CHATML = re.compile(r"<\|im_start\|>([^\n<]*)\n(.*?)(?:<\|im_end\|>\n?|$)", re.S)


def trace_records(
    groups: Sequence[TrajectoryGroup | None], tokenizer, *, step: int, per_tag: int = 4, training_rows: str = "auto"
) -> list[dict[str, Any]]:
    """Up to ``per_tag`` episodes per env tag (from the first group of each tag, in batch order) as records (see
    the module docstring). ``training_rows`` is the trainer's setting (``auto`` / ``trajectory`` / ``turn``)."""
    records: list[dict[str, Any]] = []
    taken: dict[str, int] = {}
    for g, group in enumerate(groups):
        if group is None:
            continue
        tag = group.tags[0] if group.tags else "all"
        if taken.setdefault(tag, 0) >= per_tag:
            continue
        for e, (trajectory, group_reward) in enumerate(zip(group.trajectories, group.group_rewards)):
            if taken[tag] >= per_tag:
                break
            taken[tag] += 1
            per_turn = training_rows == "turn" or (training_rows == "auto" and not trajectory.observations_extend)
            records.append(
                {
                    "step": step,
                    "tag": tag,
                    "group": g,
                    "episode": e,
                    "messages": transcript(trajectory, tokenizer),
                    "turn_rewards": [t.reward for t in trajectory.transitions],
                    "group_reward": group_reward,
                    "total_reward": trajectory.step_reward + group_reward,
                    "stop_reason": trajectory.stop_reason,
                    "row_layout": "per_turn" if per_turn else "trajectory",
                }
            )
    return records


def transcript(trajectory: Trajectory, tokenizer) -> list[dict[str, Any]]:
    """The messages of one episode (see the module docstring)."""
    transitions = trajectory.transitions
    if not transitions:
        return _messages(tokenizer.decode(trajectory.final_ob, skip_special_tokens=False), "prompt")
    messages = _messages(tokenizer.decode(transitions[0].ob, skip_special_tokens=False), "prompt")
    for i, t in enumerate(transitions):
        messages.append(
            {
                "role": "assistant",
                "content": tokenizer.decode(t.ac.tokens, skip_special_tokens=True),
                "reward": t.reward,
                "metrics": dict(t.metrics),
                "finish": t.ac.finish_reason,
            }
        )
        following = transitions[i + 1].ob if i + 1 < len(transitions) else trajectory.final_ob
        seen = list(t.ob) + list(t.ac.tokens)
        if list(following[: len(seen)]) == seen:
            new = following[len(seen) :]
            if new:
                messages += [
                    m
                    for m in _messages(tokenizer.decode(new, skip_special_tokens=False), "env")
                    if m["content"] or m["role"] != "assistant"
                ]
        elif following:
            messages.append({"role": "observation", "content": tokenizer.decode(following, skip_special_tokens=False)})
    return messages


def _messages(text: str, fallback_role: str) -> list[dict[str, Any]]:
    """``text`` split into ChatML messages; without ChatML markers, one message of ``fallback_role``. A trailing
    empty generation prompt (``<|im_start|>assistant``) is dropped."""
    found = [{"role": m.group(1).strip(), "content": m.group(2)} for m in _CHATML.finditer(text)]
    if not found:
        return [{"role": fallback_role, "content": text}] if text.strip() else []
    if found[-1]["role"] == "assistant" and not found[-1]["content"]:
        found.pop()
    return found


def write_traces(directory: str | os.PathLike[str], records: Sequence[dict[str, Any]], step: int) -> str:
    """Append ``records`` to ``directory/step_<step>.jsonl`` (created with its folder); return the file's path."""
    path = Path(directory) / f"step_{step:06d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return str(path)


def read_traces(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a run: ``path`` is its ``output_dir`` (traces in ``rollouts/``), a traces folder or one
    ``.jsonl`` file. In step order.

    Raises:
        FileNotFoundError: no traces there (the message names the folder looked in).
    """
    path = Path(path)
    if path.is_dir() and (path / TRACES_DIR).is_dir():
        path = path / TRACES_DIR
    files = sorted(path.glob("step_*.jsonl")) if path.is_dir() else [path] if path.is_file() else []
    if not files:
        raise FileNotFoundError(
            f"no rollout traces in {path} (expected {TRACES_DIR}/step_*.jsonl files, written "
            "every logging_steps by EnvGRPOTrainer)"
        )
    records = []
    for file in files:
        with open(file, encoding="utf-8") as f:
            records += [json.loads(line) for line in f if line.strip()]
    return records


def table_rows(records: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of a tracker table (wandb / trackio): one row per episode, the transcript as text."""
    columns = [
        "step",
        "tag",
        "group",
        "episode",
        "transcript",
        "turn_rewards",
        "group_reward",
        "total_reward",
        "stop_reason",
        "row_layout",
    ]
    rows = [
        [
            r["step"],
            r["tag"],
            r["group"],
            r["episode"],
            format_transcript(r["messages"]),
            json.dumps(r["turn_rewards"]),
            r["group_reward"],
            r["total_reward"],
            r["stop_reason"],
            r["row_layout"],
        ]
        for r in records
    ]
    return columns, rows


def format_transcript(messages: Sequence[dict[str, Any]]) -> str:
    """A transcript as plain text: ``[role] content`` per message, a reply's reward after it."""
    lines = []
    for m in messages:
        reward = f"   (reward {m['reward']:+.2f})" if "reward" in m else ""
        lines.append(f"[{m['role']}] {m['content'].strip()}{reward}")
    return "\n".join(lines)
