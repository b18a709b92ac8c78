"""One rank of a real multi-process ``EnvGRPOTrainer`` run, launched by tests/test_distributed.py, tests/test_gpu.py
(scripts/gpu_check.sh) and bench/scaling.py.

    accelerate launch --config_file accelerate_configs/cpu_2proc.yaml tests/distributed_worker.py --out DIR \
        --scenarios guess_number:group uneven:batch [--collective_generate] [--evaluate] [--lockstep_checks]

Each scenario (``ENV[:SCALE_REWARDS]``) trains the offline tiny model for ``--steps`` steps with a fresh trainer, in
the same processes. Each rank writes ``DIR/rank<k>.json``, per scenario:

* ``rollouts``: one record per generation round (train and eval): the row keys TRL gave this rank, every group's
  trajectory totals and numbers of turns, the advantages this rank trained on (TRL's), the rewards and advantages TRL
  gathered over all ranks, this rank's env-metric samples (sum and count per metric), and the generation calls made
  (``LockstepSampler.num_calls``, dummy calls included);
* ``log_history`` (and ``eval_metrics`` with ``--evaluate``), ``distributed_type``, ``zero_stage``, step times;
* ``finished``: written last, after every scenario returned.

Envs: ``guess_number``, ``arithmetic`` (built in), or ``uneven``: a test env whose groups last ``--short_turns`` turns
in the first half of each batch and ``--long_turns`` turns in the second half. With 2 ranks and a per-rank generation
batch of whole groups, rank 0 gets the short groups and rank 1 the long ones, so rank 0 finishes its episodes early.
``uneven_turns`` is ``uneven`` trained with one row per turn and per-turn credit: rank 1 then has 5 times as many
rows as rank 0 before padding.
``--collective_generate`` makes every generate call a collective even under DDP; ``--no_lockstep`` is the negative
control (then such runs hang). ``--lockstep_checks`` first runs tests/lockstep_worker.py's model-free checks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

for _key, _value in (
    ("HF_HUB_OFFLINE", "1"),
    ("HF_HUB_DISABLE_TELEMETRY", "1"),
    ("TRL_EXPERIMENTAL_SILENCE", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
):
    os.environ.setdefault(_key, _value)

import warnings  # noqa: E402

warnings.filterwarnings("ignore")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for rank<k>.json")
    p.add_argument(
        "--scenarios",
        nargs="+",
        default=["guess_number:group"],
        help="ENV[:SCALE_REWARDS] runs, one trainer each, in this order, in the same processes; ENV is "
        "guess_number, arithmetic or uneven; SCALE_REWARDS is group (default), batch or none; a third "
        "part asyncK trains with max_staleness=K (ENV:SCALE:asyncK)",
    )
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--num_generations", type=int, default=4)
    p.add_argument("--per_device_batch", type=int, default=8, help="per_device_train_batch_size (rows)")
    p.add_argument("--max_completion_length", type=int, default=6)
    p.add_argument("--max_turns", type=int, default=6)
    p.add_argument("--short_turns", type=int, default=1)
    p.add_argument("--long_turns", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model_path", default=None)
    p.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="cpu: use_cpu=True (gloo); cuda: the launcher's GPUs (nccl), as scripts/gpu_check.sh runs it",
    )
    p.add_argument(
        "--vllm_mode",
        default="none",
        choices=["none", "colocate", "server"],
        help="use_vllm with this vllm_mode (needs a GPU and vllm; server: a `trl vllm-serve` running)",
    )
    p.add_argument("--vllm_server_port", type=int, default=8000)
    p.add_argument("--vllm_gpu_memory_utilization", type=float, default=0.25)
    p.add_argument(
        "--collective_generate",
        action="store_true",
        help="make every generate call a collective (an all_reduce first, like ZeRO-3's parameter "
        "gather), so that unequal numbers of calls across ranks break the run even under plain DDP",
    )
    p.add_argument(
        "--no_lockstep",
        action="store_true",
        help="negative control: turn the lock-step off (ranks stop calling generate when their episodes "
        "end); with --collective_generate or ZeRO-3 the run then hangs or fails",
    )
    p.add_argument(
        "--evaluate",
        action="store_true",
        help="after training, run trainer.evaluate() on the env's test split (guess_number, arithmetic)",
    )
    p.add_argument(
        "--lockstep_checks",
        action="store_true",
        help="first run the model-free lock-step / vLLM-batching checks of tests/lockstep_worker.py on this "
        "process group (saves the tests a separate launch)",
    )
    p.add_argument("--max_staleness", type=int, default=0, help="EnvGRPOConfig.max_staleness (async rollouts)")
    p.add_argument(
        "--deepspeed_shm",
        action="store_true",
        help="let DeepSpeed JIT-compile its shared-memory CPU allreduce op (needs a C++ compiler, about a "
        "minute the first time); by default the worker skips it and DeepSpeed uses gloo directly",
    )
    return p.parse_args(argv)


# -- the test env with episodes of very different lengths ---------------------------------------------------------


def _uneven_dataset(
    renderer, group_size: int, groups_per_batch: int, short_turns: int, long_turns: int, num_batches: int
):
    from trl_envs import EnvGroupBuilder, MessageEnv, MessageStepResult, MessageTokenEnv, RLDataset

    class FixedTurnsEnv(MessageEnv):
        """Lasts exactly ``turns`` turns whatever the model says; rewards the last reply's length (some variance)."""

        def __init__(self, turns: int):
            self.turns, self.t = turns, 0

        async def initial_messages(self):
            return [{"role": "user", "content": f"Say {self.turns} numbers, one per turn."}]

        async def step(self, response):
            self.t += 1
            done = self.t >= self.turns
            reward = float(len(response.message["content"]) % 3) / 2 if done else 0.0
            return MessageStepResult(
                reward, done, [] if done else [{"role": "user", "content": "Next."}], {"turn_reached": float(self.t)}
            )

    class FixedTurnsGroup(EnvGroupBuilder):
        def __init__(self, turns: int):
            self.turns = turns

        async def make_envs(self):
            return [MessageTokenEnv(FixedTurnsEnv(self.turns), renderer) for _ in range(group_size)]

        def logging_tags(self):
            return [f"turns{self.turns}"]

    class UnevenDataset(RLDataset):
        def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
            half = groups_per_batch // 2
            return [FixedTurnsGroup(short_turns if k < half else long_turns) for k in range(groups_per_batch)]

        def __len__(self) -> int:
            return num_batches

    return UnevenDataset()


# -- instrumentation -----------------------------------------------------------------------------------------------


def _instrument(trainer, world_size: int, records: list[dict], lockstep: bool = True) -> None:
    """Record, per generation round, what this rank rolled out and trained on (see the module docstring)."""
    import trl_envs.trainers.rollouts as trainer_rollouts
    from trl_envs.rollout.metrics import rollout_metrics
    from trl_envs.samplers.lockstep import LockstepSampler

    made: list[LockstepSampler] = []

    class RecordingLockstep(LockstepSampler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

        def active(self) -> bool:
            return lockstep and super().active()

    trainer_rollouts.LockstepSampler = RecordingLockstep
    original = trainer.generation_batch  # what every generation batch of train() and evaluate() goes through
    latest = {}  # the batch's rollout: training ones are announced, evaluation ones come from rollouts.rollout
    trainer.rollouts.add_listener(lambda rollout: latest.update(rollout=rollout))
    roll = trainer.rollouts.rollout

    def rolled(builders):
        latest["rollout"] = roll(builders)
        return latest["rollout"]

    trainer.rollouts.rollout = rolled

    def recorded(keys):
        start = time.perf_counter()
        out = original(keys)
        result = latest["rollout"]
        group_size = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        row_keys = [str(k) for k in keys for _ in range(group_size)]
        n_global = len(row_keys) * world_size
        logged = trainer.logged_completions()
        metrics = rollout_metrics(result.groups, result.error_counts)
        records.append(
            {
                "mode": "train" if trainer.model.training else "eval",
                "global_step": trainer.state.global_step,
                "row_keys": row_keys,
                "groups": [
                    {"totals": g.get_total_rewards(), "turns": [len(t.transitions) for t in g.trajectories]}
                    for g in result.groups
                ],
                "advantages": row_advantages(trainer, out),
                "gathered_rewards": [float(x) for x in logged["rewards"]["env"][-n_global:]],
                "gathered_advantages": [float(x) for x in logged["advantages"][-n_global:]],
                "metric_sums": {k: [float(sum(v)), len(v)] for k, v in metrics.items()},
                "generate_calls": made[-1].num_calls if made else 0,  # none made by async rollouts (max_staleness)
                "dummy_calls": made[-1].num_dummy_calls if made else 0,
                "real_sampler_calls": result.num_sampler_calls,
                "seconds": time.perf_counter() - start,
            }
        )
        return out

    trainer.generation_batch = recorded


def row_advantages(trainer, out: dict) -> list[float]:
    """Each row's advantage. With asynchronous rollouts the trainer weights each trained token's advantage by the
    importance ratio of the policy over the sampler copy (per-token advantages): the row's advantage is then recovered
    with the ratio computed here from the policy's logprobs, so a weight applied to the wrong rows or ranks shows."""
    advantages = out["advantages"].float()
    if advantages.dim() == 1 or not trainer.args.max_staleness:  # per-turn credit: per-token advantages of its own
        return advantages.tolist()
    from trl_envs.trainers.off_policy import importance_ratio, trained_mask

    args, mask = trainer.args, trained_mask(out).float()
    policy = trainer.completion_logprobs(out)
    ratio = importance_ratio(
        policy,
        out["sampling_per_token_logps"],
        mask,
        args.async_importance_sampling,
        args.vllm_importance_sampling_clip_min,
        args.vllm_importance_sampling_clip_max,
    ).float()
    weights = (ratio * mask).sum(1)
    return [float(a / w) if w > 0 else 0.0 for a, w in zip((advantages * mask).sum(1).tolist(), weights.tolist())]


def _zero_stage(trainer) -> int | None:
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return None if plugin is None else int(plugin.zero_stage)


def _make_generate_collective() -> None:
    import torch
    import torch.distributed as dist

    import trl_envs.trainers.rollouts as trainer_rollouts
    from trl_envs.samplers.hf import HFSampler

    class CollectiveHFSampler(HFSampler):
        def sample(self, requests):
            if dist.is_initialized():
                dist.all_reduce(torch.ones(1))
            return super().sample(requests)

    trainer_rollouts.HFSampler = CollectiveHFSampler


def _step_clock():
    """A TrainerCallback recording wall and CPU time at the start of training and at the end of each optimizer step."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self.cpu_times: list[float] = []  # this process's CPU time (all its threads)

        def _tick(self):
            self.times.append(time.perf_counter())
            self.cpu_times.append(time.process_time())

        def on_train_begin(self, *args, **kwargs):
            self._tick()

        def on_step_end(self, *args, **kwargs):
            self._tick()

    return StepClock()


def run_scenario(spec: str, args, model_path: str, tokenizer, renderer) -> dict:
    from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, make_env_dataset

    env, _, scale = spec.partition(":")
    scale, _, asynchronous = scale.partition(":")  # ENV:SCALE:asyncK trains with max_staleness=K
    max_staleness = int(asynchronous.removeprefix("async")) if asynchronous else args.max_staleness
    name = spec.replace(":", "_")
    per_turn = {}
    if env == "uneven_turns":
        env, per_turn = "uneven", dict(training_rows="turn", credit_assignment="per_turn")
    vllm = {}
    if args.vllm_mode != "none":
        vllm = dict(
            use_vllm=True,
            vllm_mode=args.vllm_mode,
            vllm_server_port=args.vllm_server_port,
            vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
            vllm_max_model_length=1024,
        )
    config = EnvGRPOConfig(
        output_dir=os.path.join(args.out, "trainer", name),
        use_cpu=args.device == "cpu",
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.per_device_batch,
        per_device_eval_batch_size=args.per_device_batch,
        max_steps=args.steps,
        max_completion_length=args.max_completion_length,
        max_turns=args.max_turns,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        seed=args.seed,
        beta=0.0,
        scale_rewards=scale or "group",
        disable_tqdm=True,
        ddp_timeout=600,
        max_staleness=max_staleness,
        **vllm,
        **per_turn,
    )
    world_size = config.world_size
    groups_per_batch = args.per_device_batch * world_size // args.num_generations
    if env == "uneven":
        dataset = _uneven_dataset(
            renderer,
            args.num_generations,
            groups_per_batch,
            args.short_turns,
            args.long_turns,
            num_batches=args.steps + 2,
        )
    else:
        dataset = make_env_dataset(
            env, renderer, group_size=args.num_generations, batch_size=groups_per_batch, num_batches=args.steps + 2
        )
    clock = _step_clock()
    trainer = EnvGRPOTrainer(model_path, config, dataset, processing_class=tokenizer, callbacks=[clock])
    records: list[dict] = []
    _instrument(trainer, trainer.accelerator.num_processes, records, lockstep=not args.no_lockstep)
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start
    print(
        f"[rank {trainer.accelerator.process_index}] {name}: {args.steps} steps in {train_seconds:.1f}s",
        file=sys.stderr,
        flush=True,
    )
    eval_metrics = trainer.evaluate() if args.evaluate and env != "uneven" else None
    return {
        "env": env,
        "scale_rewards": config.scale_rewards,
        "rank": trainer.accelerator.process_index,
        "device": str(trainer.accelerator.device),
        "use_vllm": bool(config.use_vllm),
        "world_size": trainer.accelerator.num_processes,
        "distributed_type": str(trainer.accelerator.distributed_type).rsplit(".", 1)[-1],
        "zero_stage": _zero_stage(trainer),
        "num_generations": args.num_generations,
        "rollouts": records,
        "async_batches": getattr(trainer, "async_batches", []),
        "log_history": trainer.state.log_history,
        "eval_metrics": eval_metrics,
        "train_seconds": train_seconds,
        "step_seconds": [b - a for a, b in zip(clock.times, clock.times[1:])],
        "step_cpu_seconds": [b - a for a, b in zip(clock.cpu_times, clock.cpu_times[1:])],
        "episodes": sum(len(r["row_keys"]) for r in records if r["mode"] == "train"),
        "finished": True,
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(max(1, args.threads))
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true" and not args.deepspeed_shm:
        import importlib

        # (not `deepspeed.comm.torch.x = ...`: the package attribute `deepspeed.comm.torch` is PyTorch itself)
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    if args.collective_generate:
        _make_generate_collective()
    from transformers import AutoTokenizer

    from trl_envs import Renderer

    model_path = args.model_path
    if model_path is None:
        from trl_envs.tiny_model import build_tiny_model

        model_path = build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    renderer = Renderer(tokenizer)
    from accelerate import PartialState

    state = PartialState(cpu=args.device == "cpu")  # the process group the trainers below use too
    rank = state.process_index
    out: dict = {
        "rank": rank,
        "world_size": state.num_processes,
        "machine_rank": int(os.environ.get("GROUP_RANK", "0")),  # torchrun's node rank (--machine_rank)
        "local_rank": state.local_process_index,
    }
    if args.lockstep_checks:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import lockstep_worker

        out["lockstep"] = lockstep_worker.run_checks(rank, state.num_processes)
    out["scenarios"] = {}
    for spec in args.scenarios:
        out["scenarios"][spec.replace(":", "_")] = run_scenario(spec, args, model_path, tokenizer, renderer)
    out["finished"] = True
    os.makedirs(args.out, exist_ok=True)
    tmp = os.path.join(args.out, f"rank{rank}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, os.path.join(args.out, f"rank{rank}.json"))


if __name__ == "__main__":
    main()
