"""One rank of the lock-step / vLLM-batching checks of tests/test_lockstep.py, on a real gloo process group.

    torchrun --nproc_per_node 2 tests/lockstep_worker.py --out DIR

(tests/test_distributed.py runs the same checks inside its DDP launch: ``distributed_worker.py --lockstep_checks``.)

No model is involved: samplers are fakes whose calls are collectives, like ZeRO-3 / FSDP generation (an
``all_reduce`` per call) and TRL's vLLM server mode (``VLLMGeneration.generate`` itself, TRL's real code, with a fake
vLLM client on rank 0). Each rank writes ``DIR/rank<k>.json`` with what it observed, per check.
"""

from __future__ import annotations

import argparse
import json
import os
import types

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

EOS = 999_999


class CollectiveSampler:
    """A sampler whose every call is a collective (an all_reduce of the batch size), like ZeRO-3's gather."""

    def __init__(self):
        self.batch_sizes: list[int] = []

    def sample(self, requests):
        from trl_envs.core.types import TokensWithLogprobs

        total = torch.tensor([len(requests)])
        dist.all_reduce(total)
        self.batch_sizes.append(len(requests))
        return [TokensWithLogprobs([7] * r.max_tokens, [-1.0] * r.max_tokens, "length") for r in requests]


def check_uneven_calls(rank: int) -> dict:
    """Rank 0 needs 1 generation round, rank 1 needs 4: both must make 4 calls (rank 0: 3 of them dummies)."""
    from trl_envs.samplers.base import SampleRequest
    from trl_envs.samplers.lockstep import LockstepSampler

    inner = CollectiveSampler()
    lock = LockstepSampler(inner, [0])
    rounds = 1 if rank == 0 else 4
    for _ in range(rounds):
        lock.sample([SampleRequest([1, 2], [], 3)])
    lock.drain()
    return {"num_calls": lock.num_calls, "num_dummy_calls": lock.num_dummy_calls, "batch_sizes": inner.batch_sizes}


def check_equal_batch_sizes(rank: int) -> dict:
    """Rank 0 sends 1 request, rank 1 sends 3: with equal_batch_sizes every call carries 3 on both ranks."""
    from trl_envs.samplers.base import SampleRequest
    from trl_envs.samplers.lockstep import LockstepSampler

    inner = CollectiveSampler()
    lock = LockstepSampler(inner, [0], equal_batch_sizes=True)
    n = 1 if rank == 0 else 3
    results = lock.sample([SampleRequest([rank + 1], [], 2) for _ in range(n)])
    if rank == 1:
        lock.sample([SampleRequest([5], [], 2)] * 2)  # rank 0 answers this one from drain()
    lock.drain()
    return {
        "returned": len(results),
        "batch_sizes": inner.batch_sizes,
        "padding": lock.num_padding_requests,
        "num_calls": lock.num_calls,
    }


class FakeVLLMClient:
    """Answers like TRL's VLLMClient.generate: for prompt [a, ...] the completion is 1000*a + 0, 1, 2, ... (up to the
    max_tokens it was sent, cut after a stop token id 1000*a + 2 when that id is in the stop list)."""

    def __init__(self):
        self.calls: list[dict] = []

    def generate(self, prompts, features=None, n=1, max_tokens=16, generation_kwargs=None, logprobs=0, **kwargs):
        stops = set((generation_kwargs or {}).get("stop_token_ids") or [])
        self.calls.append({"num_prompts": len(prompts), "max_tokens": max_tokens, "stop_token_ids": sorted(stops)})
        completions, lps, ids = [], [], []
        for p in prompts:
            for _ in range(n):
                tokens = []
                for j in range(max_tokens):
                    tokens.append(1000 * p[0] + j)
                    if tokens[-1] in stops:
                        break
                completions.append(tokens)
                # top-2 logprobs per position, the sampled token SECOND: the sampler must look it up by id
                lps.append([[-0.01, -0.5 - j] for j in range(len(tokens))])
                ids.append([[-1, t] for t in tokens])
        return {"prompt_ids": prompts, "completion_ids": completions, "logprobs": lps, "logprob_token_ids": ids}


def check_vllm_server_mode(rank: int, world_size: int) -> dict:
    """TRL's real server-mode ``VLLMGeneration.generate`` (gather to rank 0, rank 0's settings, broadcast, slice by
    ``process_index * len(prompts)``) under LockstepSampler + VLLMSampler, with uneven work: rank 0 has one request
    for one round with a 1-token budget and then drains; rank 1 has 2 requests per round for 3 rounds, 5 tokens each,
    with a stop token only it asks for."""
    from accelerate import PartialState
    from trl.generation.vllm_generation import VLLMGeneration

    from trl_envs.samplers.base import SampleRequest
    from trl_envs.samplers.lockstep import LockstepSampler
    from trl_envs.samplers.vllm import VLLMSampler

    state = PartialState()
    gen = object.__new__(VLLMGeneration)
    gen.mode, gen.accelerator, gen.enable_sleep_mode = "server", state, False
    gen.temperature, gen.top_p, gen.top_k, gen.min_p, gen.repetition_penalty = 1.0, 1.0, -1, None, 1.0
    gen.max_completion_length, gen.logprobs, gen.structured_outputs_regex, gen.generation_kwargs = 16, 0, None, {}
    client = FakeVLLMClient()
    gen.vllm_client = client if rank == 0 else None
    tokenizer = types.SimpleNamespace(eos_token_id=EOS, decode=lambda ids, **kw: "")
    sampler = VLLMSampler(gen, tokenizer)
    lock = LockstepSampler(sampler, [0], equal_batch_sizes=True)
    observed = []
    if rank == 0:
        reqs = [SampleRequest([10], [], 1)]
        observed.append(
            [(r.prompt[0], out.tokens, out.logprobs, out.finish_reason) for r, out in zip(reqs, lock.sample(reqs))]
        )
    else:
        for turn in range(3):
            reqs = [SampleRequest([20 + turn], [], 5), SampleRequest([30 + turn], [30_002 + 1000 * turn], 5)]
            observed.append(
                [(r.prompt[0], out.tokens, out.logprobs, out.finish_reason) for r, out in zip(reqs, lock.sample(reqs))]
            )
    lock.drain()
    return {
        "observed": observed,
        "num_calls": lock.num_calls,
        "num_dummy_calls": lock.num_dummy_calls,
        "client_calls": client.calls if rank == 0 else None,
        "max_completion_length_after": gen.max_completion_length,
    }


def run_checks(rank: int, world_size: int) -> dict:
    """All checks, in order, on the current (initialised) process group."""
    out = {"rank": rank, "world_size": world_size, "backend": dist.get_backend()}
    out["uneven_calls"] = check_uneven_calls(rank)
    out["equal_batch_sizes"] = check_equal_batch_sizes(rank)
    out["vllm_server"] = check_vllm_server_mode(rank, world_size)
    dist.barrier()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from accelerate import PartialState

    state = PartialState(cpu=True)  # gloo process group from torchrun's environment
    rank = state.process_index
    out = run_checks(rank, state.num_processes)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
