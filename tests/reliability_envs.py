"""Envs that misbehave on purpose, named as ``reliability_envs:<factory>`` (tests/ on the import path) by the
reliability tests, in this process or in a subprocess (scripts, ``trl-envs eval``).

``RELIABILITY_DIR``: where builders write ``started-<n>`` when they make envs and ``cleaned-<n>`` when cleaned up.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import time

from transformers import Qwen2ForCausalLM

from trl_envs import EnvGroupBuilder, ListRLDataset, RLDatasetBuilder, StepResult
from trl_envs.core.types import Env

_ids = itertools.count()


def _touch(kind: str) -> None:
    folder = os.environ.get("RELIABILITY_DIR")
    if folder:
        with open(os.path.join(folder, f"{kind}-{os.getpid()}-{next(_ids)}"), "w") as f:
            f.write(str(time.time()))


class Chat(Env):
    """One question; each step's reward is ``reward``; ``turns`` turns (``None``: never ends by itself); each step
    can sleep ``step_s`` or raise ``fail``."""

    def __init__(self, renderer, reward=0.0, turns=1, step_s=0.0, fail=None):
        self.renderer, self.reward, self.turns, self.step_s, self.fail = renderer, reward, turns, step_s, fail
        self.ob = renderer.build_generation_prompt([{"role": "user", "content": "say something"}])
        self.suffix = renderer.build_generation_prompt([{"role": "user", "content": "more"}])
        self.turn = 0

    async def initial_observation(self):
        return list(self.ob), self.renderer.get_stop_sequences()

    async def step(self, action, *, extra=None):
        if self.step_s:
            await asyncio.sleep(self.step_s)
        if self.fail is not None:
            raise self.fail
        self.turn += 1
        done = self.turns is not None and self.turn >= self.turns
        self.ob = self.ob + list(action) + ([] if done else self.suffix)
        return StepResult(self.reward, done, list(self.ob), self.renderer.get_stop_sequences())


class Group(EnvGroupBuilder):
    """``group_size`` envs made by ``make(i)``; records starts and cleanups in ``RELIABILITY_DIR``."""

    def __init__(self, make, group_size):
        self.make, self.group_size = make, group_size

    async def make_envs(self):
        _touch("started")
        return [self.make(i) for i in range(self.group_size)]

    async def cleanup(self):
        await asyncio.sleep(float(os.environ.get("RELIABILITY_CLEANUP_S", "0")))
        _touch("cleaned")


class Builder(RLDatasetBuilder):
    def __init__(self, make, group_size=2, batch_size=1, num_batches=4):
        self.make, self.group_size, self.batch_size, self.num_batches = make, group_size, batch_size, num_batches

    async def __call__(self):
        def split():
            return ListRLDataset(
                [Group(self.make, self.group_size) for _ in range(self.batch_size * self.num_batches)], self.batch_size
            )

        return split(), split()


def constant(renderer, reward=0.0, group_size=2, batch_size=1, num_batches=4):
    """Every episode earns ``reward``: no group ever has mixed rewards."""
    return Builder(lambda i: Chat(renderer, reward), group_size, batch_size, num_batches)


def spread(renderer, scale=1e30, group_size=2, batch_size=1, num_batches=4):
    """Env ``i`` of a group earns ``i * scale``: mixed rewards, huge for a large ``scale``."""
    return Builder(lambda i: Chat(renderer, i * scale), group_size, batch_size, num_batches)


def failing(renderer, group_size=2, batch_size=1, num_batches=4):
    """Every step raises ``RuntimeError``."""
    return Builder(
        lambda i: Chat(renderer, fail=RuntimeError("the env's server is down")), group_size, batch_size, num_batches
    )


def endless(renderer, group_size=2, batch_size=1, num_batches=1, num_test_batches=1, max_turns_cap=400):
    """Episodes that never end by themselves (a cap of ``max_turns_cap`` turns keeps a broken budget from hanging)."""
    return Builder(lambda i: Chat(renderer, 0.0, turns=max_turns_cap), group_size, batch_size, num_batches)


def sleepy(renderer, group_size=2, batch_size=2, num_batches=4, step_s=60.0):
    """Each step sleeps ``step_s`` seconds: a rollout to interrupt."""
    return Builder(lambda i: Chat(renderer, 1.0, step_s=step_s), group_size, batch_size, num_batches)


class SlowForwardLM(Qwen2ForCausalLM):
    """The tiny model's class, whose forward sleeps ``RELIABILITY_FORWARD_S`` seconds in a child process (a sampler
    process) after writing ``forward-<pid>-<n>`` into ``RELIABILITY_DIR``: a ``generate`` call still running when the
    run ends. Defined in a module, so the child can import it."""

    def forward(self, *args, **kwargs):
        if multiprocessing.parent_process() is not None:
            _touch("forward")
            time.sleep(float(os.environ.get("RELIABILITY_FORWARD_S", "0")))
        return super().forward(*args, **kwargs)


class _NumberedBuilder(Builder):
    """:class:`Builder` whose ``make(group, i)`` also gets the group's index in the dataset."""

    async def __call__(self):
        def split():
            groups = [
                Group(lambda i, g=g: self.make(g, i), self.group_size)
                for g in range(self.batch_size * self.num_batches)
            ]
            return ListRLDataset(groups, self.batch_size)

        return split(), split()


def failing_after(renderer, ok_groups=2, group_size=2, batch_size=1, num_batches=30):
    """The first ``ok_groups`` groups have mixed rewards; every step of the later ones raises ``RuntimeError``: an env
    server that went away for good."""

    def make(group, i):
        if group < ok_groups:
            return Chat(renderer, float(i))
        return Chat(renderer, fail=RuntimeError("the env's server is gone"))

    return _NumberedBuilder(make, group_size, batch_size, num_batches)


def failing_on_rank(renderer, rank=1, group_size=2, batch_size=1, num_batches=4):
    """Mixed rewards, except on process ``rank`` of a distributed launch (``RANK``), where every step raises."""
    here = int(os.environ.get("RANK", "0"))

    def make(i):
        if here == rank:
            return Chat(renderer, fail=RuntimeError("the env's server is down"))
        return Chat(renderer, float(i))

    return Builder(make, group_size, batch_size, num_batches)
