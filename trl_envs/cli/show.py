"""``trl-envs show OUTPUT_DIR``: read a run's rollout traces in the terminal and as one static HTML page.

The traces are the episodes :class:`~trl_envs.trainers.trace_callback.RolloutTraceCallback` wrote to
``OUTPUT_DIR/rollouts/`` during training. The terminal gets the last ``--steps`` logged steps (every message with its
role, each reply's reward, the group reward, the total and the row layout); the HTML page
(``OUTPUT_DIR/rollouts/index.html`` unless ``--html`` says otherwise) gets every step, newest first, and needs no
server or network: open it in a browser.
"""

from __future__ import annotations

import argparse
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..rollout.traces import TRACES_DIR, read_traces


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output_dir", help="a training run's output_dir (or its rollouts/ folder, or one .jsonl file)")
    p.add_argument(
        "--steps", type=positive_int, default=1, help="how many of the last logged steps to print, >= 1 (default: 1)"
    )
    p.add_argument(
        "--html",
        default=None,
        help="where to write the HTML page (default: OUTPUT_DIR/rollouts/index.html; '' for none)",
    )


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def show(args: argparse.Namespace) -> int:
    records = read_traces(args.output_dir)
    steps = sorted({r["step"] for r in records})
    shown = set(steps[-args.steps :])
    print(render_text([r for r in records if r["step"] in shown]))
    if args.html != "":
        path = Path(args.html) if args.html else _traces_dir(Path(args.output_dir)) / "index.html"
        path.write_text(render_html(records, title=f"Rollouts of {args.output_dir}"), encoding="utf-8")
        print(f"wrote {path} ({len(records)} episodes, {len(steps)} steps)")
    return 0


def _traces_dir(path: Path) -> Path:
    if path.is_file():
        return path.parent
    return path / TRACES_DIR if (path / TRACES_DIR).is_dir() else path


def _header(r: dict[str, Any]) -> str:
    return (
        f"step {r['step']} · {r['tag']} · group {r['group']} · episode {r['episode']} · total reward "
        f"{r['total_reward']:+.2f} (turns {', '.join(f'{x:+.2f}' for x in r['turn_rewards']) or '-'}; group "
        f"{r['group_reward']:+.2f}) · {r['stop_reason']} · rows: {r['row_layout']}"
    )


def render_text(records: Sequence[dict[str, Any]]) -> str:
    """The episodes as terminal text: a header line per episode, then ``  role │ text`` per message line."""
    out = []
    for r in records:
        out.append("─" * 100)
        out.append(_header(r))
        for m in r["messages"]:
            lines = m["content"].strip().splitlines() or [""]
            label = m["role"][:10].rjust(10)
            for i, line in enumerate(lines):
                out.append(f"  {label if i == 0 else ' ' * 10} │ {line}")
            if "reward" in m:
                out.append(
                    f"  {' ' * 10} │   → reward {m['reward']:+.2f}"
                    + (f" ({m['finish']})" if m.get("finish") == "length" else "")
                )
    return "\n".join(out)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;background:#fafafa;color:#222}
h1{font-size:1.4em} h2{font-size:1.1em;margin-top:2em;border-bottom:1px solid #ccc}
.episode{background:#fff;border:1px solid #ddd;border-radius:6px;margin:1em 0;padding:.6em 1em}
.meta{font-size:.85em;color:#555;margin-bottom:.5em}
.msg{display:flex;margin:.25em 0}
.role{flex:0 0 7em;font-weight:600;font-size:.85em;padding-top:.2em}
.content{white-space:pre-wrap;font-family:ui-monospace,monospace;padding:.2em .5em;border-radius:4px;flex:1}
.system .content{background:#f0f0f0}.user .content{background:#e8f0fe}.assistant .content{background:#e6f4ea}
.tool .content,.env .content,.observation .content{background:#fef7e0}
.reward{font-size:.8em;color:#333;margin-left:7.5em}
"""


def render_html(records: Sequence[dict[str, Any]], title: str = "Rollouts") -> str:
    """One self-contained HTML page of the episodes, newest step first."""
    esc = html.escape
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title><style>{_CSS}</style>"
        f"</head><body><h1>{esc(title)}</h1>"
    ]
    for step in sorted({r["step"] for r in records}, reverse=True):
        parts.append(f"<h2>step {step}</h2>")
        for r in (r for r in records if r["step"] == step):
            parts.append(f"<div class='episode'><div class='meta'>{esc(_header(r))}</div>")
            for m in r["messages"]:
                role = esc(m["role"])
                parts.append(
                    f"<div class='msg {role}'><div class='role'>{role}</div>"
                    f"<div class='content'>{esc(m['content'].strip())}</div></div>"
                )
                if "reward" in m:
                    parts.append(f"<div class='reward'>reward {m['reward']:+.2f}</div>")
            parts.append("</div>")
    parts.append("</body></html>\n")
    return "".join(parts)
