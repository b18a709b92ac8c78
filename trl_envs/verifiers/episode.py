"""One verifiers episode as an agent program of :mod:`trl_envs.agents`: ``agent(base_url, api_key, task)``.

:class:`VerifiersAgent` runs the environment's own ``env.run_episode(task, ctx)`` (its ``setup``/``run``/``finalize``,
its harness, tools, judges and rubric) with the policy's endpoint as the model: ``ctx`` points a verifiers eval client
at ``base_url`` with this episode's ``api_key``, so every call the environment's agents make, relayed by verifiers'
interception server, is one turn of this episode, sampled and recorded token by token by the trainer. The episode's
reward is the summed reward of its trainable traces; their reward components and metrics are returned as metrics.
An episode the trainer's budget cuts (``max_turns``, token budgets) is stopped and scored as verifiers' own limits
stop and score one (:meth:`VerifiersAgent.stop_episode`), and marked ``truncated``.

The environment's serving resources (its interception server and taskset-wide tool servers, ``env.serving()``) are
shared by all episodes of one event loop: started by the first, stopped when the last ends (:func:`serving`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import weakref
from collections.abc import Mapping
from typing import Any

from ..agents import AgentError


class _Serving:
    """``env.serving()`` held open in a task of its own (entered and left in the same task, as its servers need),
    counted by users."""

    def __init__(self, env: Any):
        self.env, self.users = env, 0
        self.ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self.done = asyncio.Event()
        self.task = asyncio.ensure_future(self._hold())

    async def _hold(self) -> None:
        try:
            async with self.env.serving():
                if not self.ready.done():
                    self.ready.set_result(None)
                await self.done.wait()
        except BaseException as e:
            if not self.ready.done():
                self.ready.set_exception(e)
            raise


_SERVING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> {id(env): _Serving}


@contextlib.asynccontextmanager
async def serving(env: Any):
    """``env.serving()`` shared by the episodes of the running event loop: started by the first to enter, stopped
    when the last leaves."""
    loop = asyncio.get_running_loop()
    held = _SERVING.setdefault(loop, {})
    entry = held.get(id(env))
    if entry is None:
        entry = held[id(env)] = _Serving(env)
    entry.users += 1
    try:
        await asyncio.shield(entry.ready)
        yield
    finally:
        entry.users -= 1
        if entry.users == 0:
            if held.get(id(env)) is entry:
                del held[id(env)]
            entry.done.set()
            await asyncio.gather(entry.task, return_exceptions=True)


VERIFIERS_STOP_CONDITIONS = {"max_turns": "max_turns", "max_tokens": "max_total_tokens"}
"""The verifiers stop condition (``RolloutLimits``) a trace gets when the trainer's budget (a trajectory's stop
reason) cuts its episode; both count as truncated in verifiers (``Trace.is_truncated``)."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def episode_result(episode: Any, env_name: str) -> dict[str, Any]:
    """``{"reward": ..., "metrics": ...}`` of a finished verifiers episode, or :class:`AgentError` naming why it
    failed (an error of the env's hooks, of an agent run, or of its scoring)."""
    errors = list(episode.errors) + [e for trace in episode.traces for e in trace.errors]
    if errors or not episode.ok:
        error = errors[-1] if errors else None
        what = f"{error.type}: {error.message}" if error is not None else "it did not complete"
        raise AgentError(f"verifiers env {env_name!r}: episode of task {_task_name(episode)} failed: {what}")
    trained = [t for t in episode.traces if t.agent.trainable] or list(episode.traces)
    metrics: dict[str, float] = {}
    for trace in trained:
        for name, reward in trace.rewards.items():
            score = None if reward is None else _number(reward.score)
            if score is not None:
                metrics[name] = metrics.get(name, 0.0) + score
        for name, value in trace.metrics.items():
            number = _number(value)
            if number is not None and name not in metrics:
                metrics[name] = number
    metrics["num_turns"] = float(sum(t.num_turns for t in trained))
    # verifiers' own notion: a framework limit (its own or the trainer's budget, see VerifiersAgent.stop_episode) or
    # a reply cut at its length; the episode is scored by its rubric either way
    metrics["truncated"] = float(any(t.is_truncated for t in trained))
    return {"reward": float(sum(t.reward for t in trained)), "metrics": metrics}


def _task_name(episode: Any) -> str:
    data = episode.task.data
    return repr(data.name or data.id or data.idx)


class VerifiersAgent:
    """The agent program of a verifiers environment: ``await agent(base_url, api_key, task)`` plays one episode of
    ``task`` (a ``vf.Task`` of the env's taskset) against the endpoint and returns its reward and metrics.

    Args:
        source: the environment (:class:`~trl_envs.verifiers.source.VerifiersSource`).
        model: the model name the environment's requests carry (the endpoint serves the policy under any name).
    """

    def __init__(self, source: Any, model: str = "policy"):
        self.source, self.model = source, model
        self.__name__ = f"verifiers/{source.name}"
        self._traces: dict[str, list[Any]] = {}  # api key -> the traces its episode minted so far

    def stop_episode(self, api_key: str, reason: str) -> bool:
        """The trainer's budget (``reason``: ``"max_turns"`` or ``"max_tokens"``) cut the episode of ``api_key``:
        stop its live agent run as verifiers' own limits do (its next model call is refused, the run ends, the
        env's ``run()`` goes on, and the trace is finalized and scored by the rubric with the stop condition
        ``max_turns`` / ``max_total_tokens``). Returns False when no run of that episode is live."""
        live = [t for t in self._traces.get(api_key, ()) if not t.is_completed]
        for trace in live:
            trace.stop(VERIFIERS_STOP_CONDITIONS.get(reason, reason))
        return bool(live)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_traces": {}}  # live traces stay in the process that runs them

    async def __call__(self, base_url: str, api_key: str, task: Any) -> Mapping[str, Any]:
        import verifiers.v1 as vf

        env = self.source.env()
        # verifiers' eval client reads its key from the environment variable it is told; one per episode, so each
        # episode's calls carry its own key. "API_KEY" in the name keeps it out of the env's subprocesses.
        variable = f"TRL_ENVS_VERIFIERS_API_KEY_{secrets.token_hex(8)}"
        os.environ[variable] = api_key
        try:
            ctx = vf.ModelContext(
                model=self.model,
                client=vf.EvalClientConfig(base_url=base_url, api_key_var=variable),
                sampling=vf.SamplingConfig(),
            )
            traces = self._traces[api_key] = []
            async with serving(env):
                episode = await env.run_episode(task, ctx, on_trace=traces.append)
        finally:
            os.environ.pop(variable, None)
            self._traces.pop(api_key, None)
        return episode_result(episode, self.source.name)
