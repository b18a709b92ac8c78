"""The stages of ``scripts/gpu_check.sh``: each runs, prints PASS / FAIL / SKIP with its time, and the summary is
written to ``OUT/summary.json`` and ``OUT/summary.txt``.

    python scripts/gpu_check.py                      # on a GPU machine (gpu_check.sh installs the bundle first)
    python scripts/gpu_check.py --cpu                # the same stages on the CPU, small (what the tests run)
    python scripts/gpu_check.py --stages versions async_exit --out /tmp/check

Stages, in order (GPU / ``--cpu``):

* ``versions``: torch, CUDA, the GPU's name, transformers, trl, accelerate, deepspeed, peft, and the settings that
  matter offline (``USE_HUB_KERNELS``, ``HF_HUB_OFFLINE``); a missing package fails it (deepspeed only when ``zero2``
  or ``zero3`` runs);
* ``zero2``, ``zero3``, ``fsdp2``: tests/test_gpu.py's runs of accelerate_configs/zero2.yaml (with a
  ``max_staleness 1`` run, its sampler process on the GPU), zero3.yaml and fsdp2.yaml on one GPU; on the CPU the
  2-process ZeRO-2 / ZeRO-3 tests of tests/test_distributed.py (DeepSpeed's CPU accelerator) and no FSDP2
  (accelerate runs it as plain DDP on a CPU);
* ``async_exit``: ``scripts/train_grpo.py --max_staleness 1`` on the demo model: the run exits 0 and leaves no child
  process behind (its sampler process ends with it); reports the seconds from the model-card line to the exit;
* ``recipe_0.5b``: ``scripts/configs/qwen2.5-0.5b/arithmetic.yaml`` for 4 steps on a full-size, randomly initialised
  Qwen2.5-0.5B (24 layers) with the demo tokenizer: per-step time and peak GPU memory (``--cpu``: one layer, one
  small step, peak resident memory);
* ``gpu_rollouts``: ``bench/gpu_rollouts.py`` (the samplers' speed), skipped when the tree has no such file;
* opt-in (``--stages``): ``vllm_colocate``, ``ddp`` (2 GPUs), ``vllm_server`` (3 GPUs): tests/test_gpu.py's other runs.

Exit status: 0 when no stage failed, 1 when one did, 2 when no CUDA GPU is visible (without ``--cpu``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ["versions", "zero2", "zero3", "fsdp2", "async_exit", "recipe_0.5b", "gpu_rollouts"]
OPT_IN = ["vllm_colocate", "ddp", "vllm_server"]  # need vllm (not carried: far too large) or 2-3 GPUs
RECIPE = "scripts/configs/qwen2.5-0.5b/arithmetic.yaml"
RECIPE_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
PACKAGES = ["torch", "transformers", "trl", "accelerate", "deepspeed", "peft", "datasets", "huggingface_hub"]
# Packages of PACKAGES that only some stages use (an optional extra): missing, they fail the versions stage only when
# one of those stages runs.
NEEDED_BY = {"deepspeed": ("zero2", "zero3")}

# pytest node ids per stage: (GPU, CPU); None: not on that device (the reason is the SKIP line)
TESTS = {
    "zero2": ("tests/test_gpu.py::test_gpu_zero2", "tests/test_distributed.py::test_zero2_two_processes_guess_number"),
    "zero3": (
        "tests/test_gpu.py::test_gpu_zero3",
        "tests/test_distributed.py::test_zero3_rank_finishing_early_does_not_hang",
    ),
    "fsdp2": ("tests/test_gpu.py::test_gpu_fsdp2", None),
    "vllm_colocate": ("tests/test_gpu.py::test_gpu_vllm_colocate_multi_turn", None),
    "ddp": ("tests/test_gpu.py::test_gpu_ddp_multi_gpu", None),
    "vllm_server": ("tests/test_gpu.py::test_gpu_vllm_server_two_ranks", None),
}
# Packages the bundle carries, whose requirements the versions stage checks against what is installed.
CARRIED = [
    "trl",
    "transformers",
    "accelerate",
    "peft",
    "datasets",
    "huggingface_hub",
    "httpx2",
    "deepspeed",
    "pydantic",
]
# Declared requirements that are not needed for these runs: transformers' Hub kernels (off: USE_HUB_KERNELS=NO).
OPTIONAL_AT_RUNTIME = {"kernels"}
EXIT_GRACE_S = 10  # how long after the run's exit its children may take to end

CPU_SKIPS = {
    "fsdp2": "accelerate runs fsdp2.yaml as plain DDP on a CPU: checked on a GPU only",
    "vllm_colocate": "vLLM needs a GPU",
    "ddp": "the CPU's 2-process DDP runs are tests/test_distributed.py",
    "vllm_server": "vLLM needs a GPU",
}


@dataclass
class Stage:
    name: str
    verdict: str = "SKIP"  # PASS, FAIL or SKIP
    seconds: float = 0.0
    note: str = ""
    details: dict = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.name:<13} {self.verdict:<4} {self.seconds:7.1f}s  {self.note}"


class Check:
    def __init__(self, out: Path, cpu: bool, stage_timeout: float, stages: list[str] | None = None):
        self.out, self.cpu, self.stage_timeout = out, cpu, stage_timeout
        self.stages = STAGES + OPT_IN if stages is None else stages

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            HF_HUB_OFFLINE="1",
            HF_HUB_DISABLE_TELEMETRY="1",
            USE_HUB_KERNELS=os.environ.get("USE_HUB_KERNELS", "NO"),
            TRL_EXPERIMENTAL_SILENCE="1",
            TOKENIZERS_PARALLELISM="false",
            PYTHONUNBUFFERED="1",
        )
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        return env

    def run(self, cmd: list[str], log: Path, timeout: float | None = None) -> tuple[int | None, str]:
        """Run ``cmd`` with its output in ``log``; (exit code or None when it ran past the timeout, output)."""
        with open(log, "w") as f:
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=self.env(), stdout=f, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                code = proc.wait(timeout=timeout or self.stage_timeout)
            except subprocess.TimeoutExpired:
                _kill_tree(proc.pid)
                proc.wait()
                code = None
        return code, log.read_text(errors="replace")

    # -- the stages ---------------------------------------------------------------------------------------------

    def versions(self, stage: Stage) -> None:
        import torch

        found = {}
        for name in PACKAGES:
            try:
                found[name] = importlib.import_module(name).__version__
            except Exception as e:  # noqa: BLE001 - a missing package is reported, the stages using it fail
                found[name] = f"not available ({type(e).__name__}: {str(e)[:120]})"
        cuda = torch.cuda.is_available()
        stage.details = dict(
            python=sys.version.split()[0],
            packages=found,
            cuda=torch.version.cuda,
            gpu=torch.cuda.get_device_name(0) if cuda else None,
            gpus=torch.cuda.device_count() if cuda else 0,
            USE_HUB_KERNELS=self.env()["USE_HUB_KERNELS"],
            HF_HUB_OFFLINE=self.env()["HF_HUB_OFFLINE"],
        )
        for key, value in {**stage.details.pop("packages"), **stage.details}.items():
            print(f"  {key}: {value}")
        stage.details["packages"] = found
        absent = [n for n, v in found.items() if v.startswith("not available")]
        unused = [n for n in absent if n in NEEDED_BY and not set(NEEDED_BY[n]) & set(self.stages)]
        missing = [n for n in absent if n not in unused]
        unmet = unmet_requirements(CARRIED)
        stage.details["unmet_requirements"] = unmet
        for line in unmet:
            print(f"  unmet: {line}")
        stage.verdict = "FAIL" if missing else "PASS"  # an unmet pin alone is reported: it may not matter here
        problems = [f"missing: {', '.join(missing)}"] if missing else []
        problems += [f"no {n} (only {', '.join(NEEDED_BY[n])} need it; not run)" for n in unused]
        if unmet:
            names = " ".join(sorted({re.match(r"\S+ needs ([\w.-]+)", u).group(1) for u in unmet}))
            problems.append(
                f"unmet requirements: {'; '.join(unmet)} (carry: python scripts/gpu_bundle.py --add {names})"
            )
        stage.note = " | ".join(problems) or (stage.details["gpu"] or "CPU")

    def pytest_stage(self, stage: Stage) -> None:
        test = TESTS[stage.name][1 if self.cpu else 0]
        if test is None:
            stage.verdict, stage.note = "SKIP", CPU_SKIPS[stage.name]
            return
        log = self.out / f"{stage.name}.log"
        cmd = [sys.executable, "-m", "pytest", test, "-q", "-s", "-rs", "-p", "no:cacheprovider"]
        code, output = self.run(cmd, log)
        tail = output.strip().splitlines()[-1] if output.strip() else ""
        if code is None:
            stage.verdict, stage.note = "FAIL", f"timed out after {self.stage_timeout:.0f}s (hang?), see {log.name}"
        elif code == 0 and re.search(r"\b1 passed\b", tail):
            stage.verdict, stage.note = "PASS", test
        elif code == 0:
            reason = re.search(r"SKIPPED \[\d+\] [^:]+:\d+: (.*)", output)
            stage.verdict, stage.note = "SKIP", reason.group(1) if reason else tail
        else:
            stage.verdict, stage.note = "FAIL", f"exit {code}, see {log.name}: {tail}"

    def async_exit(self, stage: Stage) -> None:
        """scripts/train_grpo.py --max_staleness 1: exits 0, leaving no child process; seconds from card to exit."""
        import psutil

        out_dir = self.out / "async_run"
        shutil.rmtree(out_dir, ignore_errors=True)  # a fresh run each time
        cmd = [sys.executable, "scripts/train_grpo.py", "--max_staleness", "1", "--max_steps", "3"]
        cmd += ["--output_dir", str(out_dir), "--card_eval", "false"]
        if self.cpu:
            cmd += ["--use_cpu", "true"]
        log = self.out / "async_exit.log"
        seen: dict[int, tuple[float, str]] = {}  # every descendant seen while it ran: pid -> (create_time, command)
        card_at = None
        with open(log, "w") as f:
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=self.env(), stdout=f, stderr=subprocess.STDOUT, start_new_session=True
            )
            deadline = time.monotonic() + self.stage_timeout
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    for child in psutil.Process(proc.pid).children(recursive=True):
                        if child.pid not in seen:
                            seen[child.pid] = (child.create_time(), " ".join(child.cmdline())[:200])
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
                if card_at is None and "wrote the model card" in log.read_text(errors="replace"):
                    card_at = time.monotonic()
                time.sleep(0.2)
            code = proc.poll()
            exited_at = time.monotonic()
            if code is None:
                _kill_tree(proc.pid)
                proc.wait()
        grace = time.monotonic() + EXIT_GRACE_S  # a child may take a moment to see its parent gone
        while (
            left := [pid for pid, (created, _) in seen.items() if _alive(pid, created)]
        ) and time.monotonic() < grace:
            time.sleep(0.2)
        for pid in left:  # ours: started by this stage's run
            _kill_pid(pid)
        stage.details = dict(
            children_seen=[cmd for _, cmd in seen.values()],
            children_left=[seen[pid][1] for pid in left],
            exit_code=code,
        )
        if card_at is not None:
            stage.details["card_to_exit_s"] = round(exited_at - card_at, 1)
        if code is None:
            stage.verdict = "FAIL"
            stage.note = f"did not exit within {self.stage_timeout:.0f}s" + (
                " (after its card line)" if card_at else ""
            )
        elif code != 0:
            stage.verdict, stage.note = "FAIL", f"exit {code}, see {log.name}"
        elif left:
            still = "; ".join(seen[pid][1] for pid in left)
            stage.verdict = "FAIL"
            stage.note = f"{len(left)} child process(es) still running {EXIT_GRACE_S}s after the exit: {still}"
        elif not seen:
            stage.verdict, stage.note = "FAIL", "no sampler process was started: max_staleness 1 did not run async"
        else:
            stage.verdict = "PASS"
            stage.note = f"exit 0, {len(seen)} child process(es) ended with it"
            if card_at is not None:
                stage.note += f", {stage.details['card_to_exit_s']}s from card to exit"

    def recipe(self, stage: Stage) -> None:
        """The 0.5B arithmetic recipe on a full-size random Qwen2.5-0.5B: step times and peak memory."""
        model_dir = self.out / "random-qwen2.5-0.5b"
        result = self.out / "recipe_0.5b.json"
        for old in (model_dir, self.out / "recipe_run"):
            shutil.rmtree(old, ignore_errors=True)
        result.unlink(missing_ok=True)
        cmd = [sys.executable, __file__, "_recipe", str(model_dir), str(result), "--layers", "1" if self.cpu else "0"]
        cmd += ["--", "--config", RECIPE, "--output_dir", str(self.out / "recipe_run"), "--card_eval", "false"]
        cmd += ["--report_to", "none"]
        if self.cpu:  # as tests/test_real_model_configs.py shrinks a recipe to seconds on a CPU
            cmd += ["--max_steps", "1", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1"]
            cmd += ["--num_generations", "2", "--max_completion_length", "4", "--use_cpu", "true", "--bf16", "false"]
            cmd += ["--dtype", "float32", "--activation_checkpointing", "false"]
        else:
            cmd += ["--max_steps", "4"]
        code, output = self.run(cmd, self.out / "recipe_0.5b.log")
        if code != 0 or not result.exists():
            tail = output.strip().splitlines()[-1] if output.strip() else ""
            stage.verdict = "FAIL"
            stage.note = "timed out" if code is None else f"exit {code}, see recipe_0.5b.log: {tail}"
            return
        stage.details = json.loads(result.read_text())
        steps = stage.details["step_seconds"]
        steady = steps[1:] or steps
        stage.verdict = "PASS"
        stage.note = (
            f"{stage.details['layers']} decoder layer(s), {len(steps)} step(s): first {steps[0]:.1f}s, then "
            f"{min(steady):.1f}-{max(steady):.1f}s; peak {stage.details['peak_memory_gb']:.1f} GB "
            f"({stage.details['peak_memory_kind']})"
        )

    def gpu_rollouts(self, stage: Stage) -> None:
        bench = REPO / "bench" / "gpu_rollouts.py"
        if not bench.exists():
            stage.verdict, stage.note = "SKIP", "bench/gpu_rollouts.py is not in this tree"
            return
        result = self.out / "gpu_rollouts.json"
        cmd = [sys.executable, str(bench), "--out", str(result)] + (["--cpu"] if self.cpu else [])
        code, output = self.run(cmd, self.out / "gpu_rollouts.log")
        tail = output.strip().splitlines()[-1] if output.strip() else ""
        if code == 0 and result.exists():
            stage.verdict, stage.note = "PASS", f"wrote {result.name}: {tail[:160]}"
        else:
            stage.verdict = "FAIL"
            stage.note = "timed out" if code is None else f"exit {code}, see gpu_rollouts.log: {tail[:160]}"


def unmet_requirements(packages: list[str]) -> list[str]:
    """The installed ``packages``' own requirements (no extras) that the installed versions do not meet, e.g.
    ``pydantic needs typing-extensions>=4.16.0, found 4.12.2``: what a GPU image may hold too old for the bundle."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    unmet = []
    for package in packages:
        try:
            requires = md.requires(package) or []
        except md.PackageNotFoundError:
            continue  # reported as missing by the import check
        for text in requires:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                found = md.version(req.name)
            except md.PackageNotFoundError:
                if req.name.lower() not in OPTIONAL_AT_RUNTIME:
                    unmet.append(f"{package} needs {req.name}{req.specifier}, found none")
                continue
            if req.specifier and not req.specifier.contains(found, prereleases=True):
                unmet.append(f"{package} needs {req.name}{req.specifier}, found {found}")
    return unmet


def _alive(pid: int, created: float) -> bool:
    import psutil

    try:
        p = psutil.Process(pid)
        return p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_pid(pid: int) -> None:
    import psutil

    try:
        psutil.Process(pid).kill()
    except psutil.NoSuchProcess:
        pass


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


# -- the recipe stage's child process --------------------------------------------------------------------------------


def build_random_qwen(model_id: str, layers: int, tokenizer_path: str, out: Path) -> str:
    """A randomly initialised ``Qwen2ForCausalLM`` of ``model_id``'s published architecture with ``layers`` decoder
    layers (0: all of them) and the tokenizer at ``tokenizer_path`` (bench/recipe_estimates.py's
    ``save_random_qwen``)."""
    from transformers import AutoTokenizer

    sys.path.insert(0, str(REPO / "bench"))
    from recipe_estimates import save_random_qwen

    return save_random_qwen(model_id, AutoTokenizer.from_pretrained(tokenizer_path), out, layers=layers)


def recipe_child(argv: list[str]) -> None:
    """``_recipe MODEL_DIR RESULT_JSON [--layers N] -- TRAIN_GRPO_ARGS``: build the model, run scripts/train_grpo.py's
    ``main`` on it with a step clock, write step times and peak memory to RESULT_JSON."""
    import resource

    import torch

    from trl_envs.model_names import DEMO_MODEL_NAME
    from trl_envs.tiny_model import build_tiny_model

    parser = argparse.ArgumentParser(prog="gpu_check.py _recipe")
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--layers", type=int, default=0)
    split = argv.index("--")
    args, train_args = parser.parse_args(argv[:split]), argv[split + 1 :]
    start = time.perf_counter()
    path = build_random_qwen(RECIPE_MODEL, args.layers, build_tiny_model(name=DEMO_MODEL_NAME), args.model_dir)
    build_s = time.perf_counter() - start

    sys.path.insert(0, str(REPO / "scripts"))
    import train_grpo

    times: list[float] = []

    class ClockedProgress(train_grpo.RewardProgressCallback):  # the script's own callback, plus a step clock
        def on_train_begin(self, *a, **k):
            times.append(time.perf_counter())
            return super().on_train_begin(*a, **k)

        def on_step_end(self, *a, **k):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times.append(time.perf_counter())
            return super().on_step_end(*a, **k)

    train_grpo.RewardProgressCallback = ClockedProgress
    parsed = train_grpo.parse_args(["--model_name_or_path", path, *train_args], report=False)[1]
    train_grpo.main(*parsed)
    cuda = torch.cuda.is_available() and not parsed[1].use_cpu
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    args.result.write_text(
        json.dumps(
            dict(
                recipe=RECIPE,
                model=f"random {RECIPE_MODEL} architecture",
                layers=args.layers or 24,
                device=torch.cuda.get_device_name(0) if cuda else "cpu",
                build_seconds=round(build_s, 1),
                step_seconds=[round(b - a, 2) for a, b in zip(times, times[1:])],
                peak_memory_gb=round(peak / 1e9, 2),
                peak_memory_kind="torch.cuda.max_memory_allocated" if cuda else "peak resident memory of the process",
                command=" ".join(["scripts/train_grpo.py", "--model_name_or_path", "<built>", *train_args]),
            ),
            indent=1,
        )
    )


def write_summary(out: Path, device: str, argv: list[str], seconds: float, done: list[Stage]) -> str:
    """``summary.json`` and ``summary.txt`` of the stages run so far (rewritten after each, so that a check stopped
    from outside still leaves what it found); returns the text."""
    summary = dict(
        device=device,
        command=" ".join(["python", "scripts/gpu_check.py", *argv]),
        total_seconds=round(seconds, 1),
        stages=[asdict(s) for s in done],
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = "\n".join(s.line() for s in done) + f"\ntotal {seconds:.1f}s on {device}\n"
    (out / "summary.txt").write_text(text)
    return text


# -- main -----------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_recipe"]:
        recipe_child(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run the stages on the CPU, small (no GPU needed)")
    parser.add_argument(
        "--stages", nargs="+", default=STAGES, metavar="STAGE", help=f"among: {' '.join(STAGES + OPT_IN)}"
    )
    parser.add_argument("--out", type=Path, default=REPO / "gpu_check_out", help="logs and summary.json go here")
    parser.add_argument("--stage_timeout", type=float, default=300, help="seconds before a stage is stopped (FAIL)")
    args = parser.parse_args(argv)
    unknown = [s for s in args.stages if s not in STAGES + OPT_IN]
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(STAGES + OPT_IN)}")
    if args.stage_timeout <= 0:
        parser.error(f"--stage_timeout must be positive, got {args.stage_timeout:g}")

    import torch

    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU visible; run with --cpu for the CPU version of the stages", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out, args.cpu, args.stage_timeout, args.stages)
    runners = dict(
        versions=check.versions,
        zero2=check.pytest_stage,
        zero3=check.pytest_stage,
        fsdp2=check.pytest_stage,
        **{name: check.pytest_stage for name in OPT_IN},
        async_exit=check.async_exit,
        gpu_rollouts=check.gpu_rollouts,
    )
    runners["recipe_0.5b"] = check.recipe
    done: list[Stage] = []
    started = time.perf_counter()
    device = "cpu" if args.cpu else torch.cuda.get_device_name(0)
    for name in [s for s in STAGES + OPT_IN if s in args.stages]:
        stage = Stage(name)
        print(f"--- {name}", flush=True)
        t0 = time.perf_counter()
        try:
            runners[name](stage)
        except Exception as e:  # noqa: BLE001 - one stage's crash is its FAIL, the others still run
            stage.verdict, stage.note = "FAIL", f"{type(e).__name__}: {e}"
        stage.seconds = round(time.perf_counter() - t0, 1)
        print(stage.line(), flush=True)
        done.append(stage)
        text = write_summary(args.out, device, argv, time.perf_counter() - started, done)  # after each stage
    print(f"\n{text}summary: {args.out / 'summary.json'}")
    return 1 if any(s.verdict == "FAIL" for s in done) else 0


if __name__ == "__main__":
    sys.exit(main())
