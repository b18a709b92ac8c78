"""Gather, on a machine with the network, what a GPU machine without one needs to run ``scripts/gpu_check.sh``.

    python scripts/gpu_bundle.py             # downloads into .gpu_bundle/ (ignored by git) and prints its size
    python scripts/gpu_bundle.py --list      # only prints what it would gather (no network)
    python scripts/gpu_bundle.py --add regex # also carry a package the GPU image has too old
    bash scripts/gpu_check.sh                # then, on the GPU machine (the repository with .gpu_bundle/ beside it)

A GPU image with PyTorch usually has transformers, accelerate and peft but not the rest of trl_envs' stack. The
bundle holds:

* ``wheels/``: Python 3.12 manylinux x86_64 wheels of TRL, datasets, the Hugging Face Hub client 2.x (with its HTTP
  packages ``httpx2``, ``httpcore2``, ``truststore``), and transformers / accelerate / peft at the versions installed
  here, so the GPU check runs the versions the CPU tests ran; DeepSpeed's dependencies; every one pinned to the version
  installed in the Python that runs this script (the environment the CPU tests pass in);
* ``sdist/``: DeepSpeed's source archive (it publishes no wheel; ``gpu_check.sh`` installs it with ``DS_BUILD_OPS=0``,
  its CUDA ops compiled on first use).

trl_envs itself is not copied: the check runs from the repository (``PYTHONPATH``), and so do the tiny chat models,
which ship in it (``trl_envs/assets/``): nothing is built on the GPU machine. Packages a PyTorch GPU image has
(torch, numpy, pyarrow, pandas, xxhash, fsspec, aiohttp, requests, psutil, pytest, ...) are not carried; pyarrow alone
would be 40 MB.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DEST = REPO / ".gpu_bundle"
SIZE_LIMIT_MB = 50  # the GPU machine takes the working tree and this folder: 64 MB in all

# Wheels: (package, why the GPU machine needs it). Versions: those installed here.
WHEELS = [
    ("trl", "trl_envs' trainers subclass TRL's"),
    ("transformers", "the version the CPU tests ran (the image's may be older)"),
    ("accelerate", "the version the CPU tests ran"),
    ("peft", "the version the CPU tests ran"),
    ("huggingface_hub", "2.x, as transformers 5 needs"),
    ("httpx2", "huggingface_hub 2.x's HTTP client"),
    ("httpcore2", "needed by httpx2"),
    ("truststore", "needed by httpx2"),
    ("datasets", "TRL imports it"),
    ("dill", "needed by datasets"),
    ("multiprocess", "needed by datasets"),
    ("hjson", "needed by deepspeed"),
    ("pydantic", "needed by deepspeed"),
    ("pydantic_core", "needed by pydantic"),
    ("annotated-types", "needed by pydantic"),
    ("typing-inspection", "needed by pydantic"),
    ("typing_extensions", "pydantic needs a recent one (>= 4.16)"),
]
SDISTS = [("deepspeed", "ZeRO-2 / ZeRO-3 stages; no wheel is published")]

PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
PLATFORMS += ["manylinux1_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_24_x86_64"]


class BundleError(Exception):
    """A plain problem (a package not installed here, a download that failed): one line for the user."""


def installed_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        raise BundleError(
            f"gpu_bundle: {package} is not installed in {sys.executable}; the bundle pins the versions installed "
            "here: install the project's test extras first (pip install -e '.[test]')"
        ) from None


def plan(extra: list[str] = ()) -> list[dict]:
    """What the bundle holds: one entry per package (kind wheel / sdist, pinned version, reason); ``extra``: more
    packages to carry as wheels, at their versions here (what ``gpu_check.sh``'s versions stage found missing). The
    tiny models are not carried: they ship in the repository (``trl_envs/assets/``)."""
    wheels = [*WHEELS, *((name, "asked for (--add)") for name in extra)]
    entries = [dict(kind="wheel", name=n, version=installed_version(n), why=why) for n, why in wheels]
    entries += [dict(kind="sdist", name=n, version=installed_version(n), why=why) for n, why in SDISTS]
    return entries


def download_command(entry: dict, dest: Path) -> list[str]:
    """The ``pip download`` line of one package (wheels: for CPython 3.12 on manylinux x86_64, no dependencies)."""
    spec = f"{entry['name']}=={entry['version']}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d"]
    if entry["kind"] == "sdist":
        return [*cmd, str(dest / "sdist"), "--no-binary=:all:", spec]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    return [*cmd, str(dest / "wheels"), "--only-binary=:all:", "--python-version", "3.12"] + [
        "--implementation",
        "cp",
        *platforms,
        spec,
    ]


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def gather(dest: Path, extra: list[str] = ()) -> None:
    entries = plan(extra)
    for kind in ("wheels", "sdist"):
        if (dest / kind).exists():
            shutil.rmtree(dest / kind)  # one version of each package: two stop the offline install
        (dest / kind).mkdir(parents=True)
    for entry in entries:
        label = f"{entry['name']}=={entry['version']}"
        print(f"{entry['kind']:<6} {label}", flush=True)
        done = subprocess.run(download_command(entry, dest), capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise BundleError(f"gpu_bundle: pip could not download {label} ({entry['kind']}): {last}")
    print(f"\n{dest}:")
    for path in sorted(p for p in dest.rglob("*") if p.is_file() and p.parent.name in ("wheels", "sdist")):
        print(f"  {path.relative_to(dest)}  {path.stat().st_size / 2**20:.1f} MB")
    total = folder_mb(dest)
    print(f"total: {total:.1f} MB")
    if total > SIZE_LIMIT_MB:
        raise BundleError(f"gpu_bundle: {dest} is {total:.1f} MB, over the {SIZE_LIMIT_MB} MB that can travel")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="the bundle folder (default: .gpu_bundle)")
    parser.add_argument(
        "--list", action="store_true", help="print what would be gathered and the pip lines; no network"
    )
    parser.add_argument(
        "--add", nargs="+", default=[], metavar="PACKAGE", help="also carry these packages (at their versions here)"
    )
    args = parser.parse_args(argv)
    try:
        if args.list:
            for entry in plan(args.add):
                print(f"{entry['kind']:<6} {entry['name']}=={entry['version']:<12} {entry['why']}")
                print("       " + " ".join(download_command(entry, args.dest)[1:]))
            return 0
        gather(args.dest, args.add)
    except BundleError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
