"""Print the README's install line or test line, as CI runs them (.ci/run): ``python3 .ci/readme_lines.py install``.

The README marks the two blocks with an HTML comment on the line before them (invisible on GitHub):
``<!-- ci: install -->`` before the Quickstart command, whose leading ``pip install`` commands are the install line
(what follows them, the training run, is the Quickstart's, not CI's), and ``<!-- ci: test -->`` before the test
command, taken whole. So CI runs the README's own lines and cannot drift from them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^<!--\s*ci:\s*(\w+)\s*-->\n```(?:bash|sh)\n(.*?)^```", re.S | re.M)


def readme_lines(text: str) -> dict[str, str]:
    """``{"install": ..., "test": ...}``: the command lines CI runs, read from the README's marked blocks."""
    blocks = {name: " ".join(code.split()) for name, code in BLOCK.findall(text)}
    missing = {"install", "test"} - set(blocks)
    if missing:
        raise SystemExit(f"README.md: no block marked <!-- ci: {' / '.join(sorted(missing))} -->")
    commands = [part.strip() for part in blocks["install"].split("&&")]
    install = []
    for command in commands:
        if not command.startswith("pip install"):
            break
        install.append(command)
    if not install:
        raise SystemExit("README.md: the block marked <!-- ci: install --> does not start with `pip install`")
    return {"install": " && ".join(install), "test": blocks["test"]}


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("install", "test"):
        raise SystemExit("usage: python3 .ci/readme_lines.py install|test")
    print(readme_lines(README.read_text(encoding="utf-8"))[sys.argv[1]])
