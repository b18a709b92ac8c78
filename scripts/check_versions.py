# Copyright the trl_envs authors. Apache-2.0.
"""Install trl_envs in a fresh virtual environment at the lowest (or newest) versions pyproject.toml admits, then run
the quick tests and one short training run there, and print what passed.

    python scripts/check_versions.py --lowest      # every dependency at its floor (pyproject's >= bound)
    python scripts/check_versions.py --newest      # every dependency at the newest version the index serves
    python scripts/check_versions.py --lowest --pin transformers==5.4.0 --tests none   # try one candidate floor
    python scripts/check_versions.py --newest --venv /tmp/newest --keep              # keep the venv for a look

``--lowest`` pins each dependency of ``[project] dependencies`` that has a lower bound to exactly that bound
(``trl>=1.16,<1.17`` -> ``trl==1.16``); one with no bound (``pyyaml``) takes the newest. ``--newest`` installs the
ranges as declared with ``--upgrade``: pip picks the newest version each range admits. ``--pin NAME==VERSION``
replaces one package's pin (to bisect a floor, or to try a release the ranges do not admit yet: the run then sets
``TRL_ENVS_SKIP_VERSION_CHECK=1`` so the code itself is tried). torch is installed first and alone (``--torch``; see
docs/versions.md for why), so that nothing after it pulls another build of torch.

Each step's result (pass / fail, seconds, the last lines of a failure) goes in a table on stdout and, with
``--json PATH``, in a JSON file with the versions installed (bench/results/versions_*.json). The exit status is 0
when every step passed. docs/versions.md has the table of floors and newest versions tested.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TESTS = '-m "not slow"'
"""The quick tests: every test not marked slow (tests/conftest.py marks the ones that train or launch processes)."""
DEFAULT_MAX_STEPS = 8
TEST_RUNNER = ["pytest>=8", "pytest-timeout>=2.3"]
"""What the tests need beyond the project (tests of optional libraries skip when these are absent)."""
TAIL_LINES = 15
NOISE = re.compile(r"WARNING: Location .* is ignored")
"""Lines of pip's output left out of a failure's tail (an index folder of this machine that lacks a package)."""


def declared_dependencies(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """``[project] dependencies`` of ``pyproject``."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    with open(pyproject, "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def split_requirement(line: str) -> tuple[str, str]:
    """``"trl>=1.16,<1.17"`` -> ``("trl", ">=1.16,<1.17")``."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)", line)
    if match is None:
        raise ValueError(f"pyproject.toml: cannot read the dependency {line!r}")
    return match.group(1).lower(), match.group(2).strip()


def floor_of(spec: str) -> str | None:
    """The version a range's ``>=`` or ``==`` bound names, or ``None`` (no lower bound)."""
    match = re.search(r"(?:>=|==)\s*([0-9][^,;\s]*)", spec)
    return match.group(1) if match else None


def requirements_for(end: str, dependencies: list[str], pins: dict[str, str]) -> dict[str, str]:
    """Package -> the pip requirement to install at ``end`` (``"lowest"`` / ``"newest"``); ``pins`` (package ->
    ``"==VERSION"`` or any range) override."""
    out = {}
    for line in dependencies:
        name, spec = split_requirement(line)
        floor = floor_of(spec)
        out[name] = f"{name}=={floor}" if end == "lowest" and floor else f"{name}{spec}"
    for name, spec in pins.items():
        out[name] = f"{name}{spec}"
    return out


def out_of_range(pins: dict[str, str], dependencies: list[str]) -> list[str]:
    """The ``--pin`` versions that the declared ranges do not admit (the run then skips trl_envs' version check)."""
    from packaging.specifiers import SpecifierSet

    declared = dict(split_requirement(line) for line in dependencies)
    out = []
    for name, spec in pins.items():
        version = spec.removeprefix("==")
        if spec.startswith("==") and name in declared and version not in SpecifierSet(declared[name]):
            out.append(f"{name}=={version}")
    return out


class Steps:
    """Runs the steps in the venv and records each: name, command, status, seconds, the tail of a failure."""

    def __init__(self, env: dict[str, str], log: Path):
        self.env = env
        self.log = log
        self.results: list[dict] = []

    def run(self, name: str, command: list[str], cwd: Path = REPO, timeout: float | None = None) -> bool:
        print(f"[check_versions] {name}: {shlex.join(command)}", flush=True)
        start = time.monotonic()
        with open(self.log, "a") as log:
            log.write(f"\n===== {name}: {shlex.join(command)}\n")
            log.flush()
            process = subprocess.Popen(
                command, cwd=cwd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True,
            )  # fmt: skip
            # at the timeout, the step's whole process group (pytest's children too)
            timer = threading.Timer(timeout, os.killpg, (process.pid, signal.SIGKILL)) if timeout else None
            if timer:
                timer.start()
            output_lines = []
            for line in process.stdout:  # to the log as it comes: `tail -f` the log to follow a long step
                output_lines.append(line)
                log.write(line)
                log.flush()
            status = process.wait()
            if timer:
                timer.cancel()
                if status < 0:
                    output_lines.append(f"(killed after {timeout:g} s)\n")
                    status = 124
            output = "".join(output_lines)
        seconds = round(time.monotonic() - start, 1)
        lines = [line for line in output.splitlines() if line.strip() and not NOISE.match(line)]
        result = {"step": name, "command": command, "status": status, "ok": status == 0, "seconds": seconds}
        if status != 0:
            result["tail"] = lines[-TAIL_LINES:]
        if name == "quick tests":
            summary = [line for line in lines if re.search(r"\d+ (passed|failed|error)", line)]
            result["summary"] = summary[-1].strip("= ") if summary else None
        self.results.append(result)
        print(f"[check_versions] {name}: {'ok' if status == 0 else f'FAILED (exit {status})'} in {seconds:g} s")
        return status == 0


def installed_versions(python: Path, packages: list[str]) -> dict[str, str | None]:
    """Package -> the version installed in the venv of ``python`` (``None``: not installed)."""
    code = (
        "import json, sys\nfrom importlib import metadata\nout = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n        out[name] = metadata.version(name)\n"
        "    except metadata.PackageNotFoundError:\n        out[name] = None\n"
        "print(json.dumps(out))"
    )
    done = subprocess.run([str(python), "-c", code, *packages], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    end = parser.add_mutually_exclusive_group(required=True)
    end.add_argument("--lowest", action="store_true", help="every dependency at pyproject's lower bound")
    end.add_argument("--newest", action="store_true", help="every dependency at the newest version served")
    parser.add_argument("--pin", action="append", default=[], metavar="NAME==VERSION", help="override one pin")
    parser.add_argument(
        "--torch", default=None, help="torch version, installed first (default: the --pin or the end's pick of torch)"
    )
    parser.add_argument("--venv", type=Path, default=None, help="the venv folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the venv (a --venv folder that exists is reused)")
    parser.add_argument(
        "--tests",
        default=DEFAULT_TESTS,
        help=f"pytest arguments of the quick tests, or 'none' (default: {DEFAULT_TESTS})",
    )
    parser.add_argument("--max_steps", type=int, default=DEFAULT_MAX_STEPS, help="steps of the training run (0: none)")
    parser.add_argument("--test_timeout", type=float, default=3600, help="seconds the quick tests may take")
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    for pin in args.pin:
        if not re.match(r"^[A-Za-z0-9._-]+\s*(==|>=|<=|<|>|~=|!=)", pin):
            parser.error(f"--pin {pin!r}: expected NAME==VERSION (or NAME and a range)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    end = "lowest" if args.lowest else "newest"
    dependencies = declared_dependencies()
    pins = dict(split_requirement(pin) for pin in args.pin)
    if args.torch:
        pins["torch"] = f"=={args.torch}"
    requirements = requirements_for(end, dependencies, pins)
    beyond = out_of_range(pins, dependencies)

    venv = args.venv or Path(tempfile.mkdtemp(prefix=f"trl_envs_{end}_"))
    if venv.exists() and not (venv / "bin" / "python").exists() and any(venv.iterdir()):
        print(f"check_versions.py: error: --venv {venv} exists and is not a venv", file=sys.stderr)
        return 2
    python = venv / "bin" / "python"
    work = Path(tempfile.mkdtemp(prefix="trl_envs_check_"))
    log = work / "log.txt"
    print(f"[check_versions] {end} versions in {venv}; log: {log}", flush=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    if beyond:
        env["TRL_ENVS_SKIP_VERSION_CHECK"] = "1"
    steps = Steps(env, log)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    upgrade = ["--upgrade"] if end == "newest" else []
    start = time.monotonic()
    try:
        ok = python.exists() or steps.run("venv", [sys.executable, "-m", "venv", str(venv)])
        # torch alone first: with it installed, nothing after it asks pip for another build of torch.
        ok = ok and steps.run("torch", pip + [requirements["torch"]])
        torch = f"torch=={installed_versions(python, ['torch']).get('torch')}" if ok else ""  # kept as installed
        others = [req for name, req in requirements.items() if name != "torch"]
        if beyond:  # pyproject's ranges would refuse the pins: the pins first, then trl_envs without its requirements
            ok = ok and steps.run("install", pip + upgrade + [*others, *TEST_RUNNER, torch])
            ok = ok and steps.run("install trl_envs", pip + ["--no-deps", str(REPO)])
        else:
            ok = ok and steps.run("install", pip + upgrade + [str(REPO), *others, *TEST_RUNNER, torch])
        versions = installed_versions(python, list(requirements)) if ok else {}
        if ok and args.tests.strip().lower() != "none":
            test_args = shlex.split(args.tests)
            command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *test_args]
            steps.run("quick tests", command, timeout=args.test_timeout)
        if ok and args.max_steps > 0:
            out = work / "train_grpo"
            command = [str(python), "scripts/train_grpo.py", "--max_steps", str(args.max_steps)]
            command += ["--output_dir", str(out), "--card_eval", "false", "--report_to", "none"]
            steps.run("train_grpo", command)
    finally:
        if not args.keep:
            shutil.rmtree(venv, ignore_errors=True)

    result = {
        "end": end,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "requested": [requirements[name] for name in requirements],
        "pins": [f"{name}{spec}" for name, spec in pins.items()],
        "version_check_skipped_for": beyond,
        "installed": versions,
        "tests": args.tests,
        "max_steps": args.max_steps,
        "steps": steps.results,
        "ok": all(step["ok"] for step in steps.results),
        "seconds": round(time.monotonic() - start, 1),
        "log": str(log),
    }
    print_table(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"[check_versions] results: {args.json}")
    return 0 if result["ok"] else 1


def print_table(result: dict) -> None:
    """The versions installed, then each step's result (and the tail of a failure)."""
    print(f"\n{result['end']} versions (Python {result['python']}, {result['platform']}):")
    for line in result["requested"]:
        name = split_requirement(line)[0]
        print(f"  {name:<14} {result['installed'].get(name) or '-':<14} requested {line}")
    print(f"{'step':<18} {'result':<10} {'seconds':>8}  detail")
    for step in result["steps"]:
        detail = step.get("summary") or ""
        print(f"{step['step']:<18} {'ok' if step['ok'] else 'FAILED':<10} {step['seconds']:>8g}  {detail}")
        for line in step.get("tail", []):
            print(f"    | {line}")
    print(f"{'all' if result['ok'] else 'NOT all'} steps passed; full log: {result['log']}")


if __name__ == "__main__":
    sys.exit(main())
