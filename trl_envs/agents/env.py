"""Agent programs as token-level envs: each chat-completions call of the agent is one turn.

An *agent* is a program that owns its loop and talks to a model through an OpenAI-compatible API::

    async def agent(base_url: str, api_key: str, task) -> float | Any

It gets the endpoint's ``base_url`` (``http://127.0.0.1:<port>/v1``), its episode's ``api_key`` and one task (a row
of the task dataset), calls ``POST {base_url}/chat/completions`` as often as it likes, and returns its reward (a
number), or anything else that ``reward_fn(task, result)`` scores (e.g. its final messages). A plain (non-async)
function runs in a worker thread (it cannot be cancelled there; prefer async agents).

:class:`AgentEnv` plays one agent run as an :class:`~trl_envs.core.types.Env`: ``initial_observation`` starts the
agent and returns its first call's prompt; ``step(action)`` answers that call with the sampled reply and returns the
next call's prompt, or ends the episode with the reward when the agent returns. Observations extend each other
token-exactly while the agent appends to its conversation (:mod:`trl_envs.agents.prompts`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from ..core.renderer import Renderer
from ..core.types import (
    Action,
    Env,
    EnvContractError,
    EnvGroupBuilder,
    Metrics,
    Observation,
    StepResult,
    StopCondition,
    Trajectory,
)
from .endpoint import AgentEndpoint, Call, Session, acquire_endpoint, ended_error
from .openai_format import APIError, assistant_reply, completion_body, finish_reason, stream_body
from .prompts import PromptBuilder, Turn

logger = logging.getLogger(__name__)

FINISH_TIMEOUT = 60.0
"""Seconds :meth:`AgentEnv.finish_truncated` waits for a cut episode's agent to finish and score it."""

AgentFn = Callable[[str, str, Any], Any]
RewardFn = Callable[[Any, Any], Any]


class AgentError(RuntimeError):
    """An agent run failed: it raised, or returned without ever calling the model. Error strategies treat it like
    any rollout error (``FailFast`` raises it, ``RetryOnFailure`` retries the episode); the agent's own exception
    is its ``__cause__``."""


class AgentEnv(Env):
    """One run of ``agent`` on ``task``, served through the rollout's :class:`~trl_envs.agents.endpoint.AgentEndpoint`.

    Args:
        agent: ``agent(base_url, api_key, task)``, async or plain (see the module docstring).
        task: handed to the agent (and to ``reward_fn``) as is.
        renderer: renders the agent's messages with the tokenizer's chat template (or a shared
            :class:`~trl_envs.agents.prompts.PromptBuilder`).
        reward_fn: ``reward_fn(task, result)`` → the reward (may be async); ``None``: the agent returns its reward.
        name: how errors name the agent (default: its ``__name__``).

    Each call's ``max_tokens`` / ``max_completion_tokens`` caps that turn (:attr:`max_tokens_next_turn`), under the
    rollout's own budget. Calls made after the episode ended get HTTP 409. Use :meth:`aclose` (the builders do)
    when an episode may end early (a rollout budget, a timeout): it cancels the agent and answers its pending call.

    Metrics (on the last step): ``agent_calls`` and ``history_rewrites`` (calls that did not extend the previous
    context, so the episode trained one row per call).
    """

    def __init__(
        self,
        agent: AgentFn,
        task: Any,
        renderer: Renderer | PromptBuilder,
        *,
        reward_fn: RewardFn | None = None,
        name: str | None = None,
    ):
        if not callable(agent):
            raise TypeError(f"AgentEnv: agent must be callable as agent(base_url, api_key, task), got {agent!r}")
        self.agent, self.task, self.reward_fn = agent, task, reward_fn
        self.prompts = renderer if isinstance(renderer, PromptBuilder) else PromptBuilder(renderer)
        self.name = name or getattr(agent, "__name__", type(agent).__name__)
        self.observations_extend = True  # instance attributes, read by the rollout engine
        self.runs = f"agent function {self.name!r}"  # what timeouts and stall reports name, not AgentEnv.step
        self.max_tokens_next_turn: int | None = None
        self._endpoint: AgentEndpoint | None = None
        self._session: Session | None = None
        self._run: asyncio.Future | None = None
        self._call: Call | None = None
        self._ob: list[int] = []
        self._previous: Turn | None = None
        self._rewrites = 0

    @property
    def stop(self) -> StopCondition:
        return self.prompts.renderer.get_stop_sequences()

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        if self._run is not None:
            raise RuntimeError(f"AgentEnv({self.name}): initial_observation() called twice (an env is single-use)")
        self._endpoint = await acquire_endpoint()
        self._session = self._endpoint.open_session()
        self._run = asyncio.ensure_future(self._run_agent(self._endpoint.base_url, self._session.key))
        self._run.add_done_callback(lambda _: self._session.wake())
        try:
            ob = await self._next_observation()
            if ob is None:
                raise AgentError(
                    f"agent {self.name!r} returned without calling the model (task {_short(self.task)}); "
                    "there is nothing to train on"
                )
            return ob, self.stop
        except BaseException:
            await self.aclose("the episode failed")
            raise

    async def step(self, action: Action, *, extra: dict[str, Any] | None = None) -> StepResult:
        call, self._call = self._call, None
        if call is None:
            raise RuntimeError(f"AgentEnv({self.name}): step() without a pending call")
        try:
            action = list(action)
            text = self.prompts.renderer.parse_response(action).message["content"]
            reply = assistant_reply(text)
            finish = finish_reason(reply, (extra or {}).get("finish_reason", "stop"))
            make = stream_body if call.request.stream else completion_body
            call.answer(200, make(call.request, reply, finish, len(self._ob), len(action)))
            self._previous = Turn(call.request.messages + [reply], call.request.tools_key, self._ob, action)
            ob = await self._next_observation()
            if ob is not None:
                return StepResult(0.0, False, ob, self.stop)
            reward, metrics = await self._reward()
            final = self._ob + action
            await self.aclose("the agent returned")
            return StepResult(
                reward,
                True,
                final,
                self.stop,
                metrics={
                    **metrics,
                    "agent_calls": float(self._session.num_calls),
                    "history_rewrites": float(self._rewrites),
                },
            )
        except BaseException:
            await self.aclose("the episode failed")
            raise

    async def finish_truncated(self, stop_reason: str) -> tuple[float, dict[str, float]] | None:
        """Score an episode the rollout budget cut (``stop_reason``: ``"max_turns"`` / ``"max_tokens"``) the way its
        agent's library scores a cut episode, when the agent says how: an agent with a
        ``stop_episode(api_key, stop_reason) -> bool`` method (e.g. :class:`~trl_envs.verifiers.VerifiersAgent`) is
        told, its pending and later calls are refused, and its run is awaited (up to :data:`FINISH_TIMEOUT` s) for
        its reward and metrics (``truncated`` = 1). ``None`` (the episode stays unscored, reward 0) for other agents,
        or when the run cannot finish."""
        stop = getattr(self.agent, "stop_episode", None)
        run, session = self._run, self._session
        if stop is None or run is None or session is None or session.closed or run.done():
            return None
        if not stop(session.key, stop_reason):
            return None
        reason = f"the rollout's {stop_reason} budget ended it"
        call, self._call = self._call, None
        if call is not None:
            call.refuse(ended_error(reason))
        session.close(reason)
        await asyncio.wait([run], timeout=FINISH_TIMEOUT)
        if not run.done() or run.cancelled() or run.exception() is not None:
            why = "did not finish" if not run.done() else "was cancelled" if run.cancelled() else repr(run.exception())
            logger.warning("%s: the episode cut by %s could not be scored: its run %s", self.name, stop_reason, why)
            return None
        reward, metrics = await self._reward()
        return reward, {**metrics, "agent_calls": float(session.num_calls), "truncated": 1.0}

    async def aclose(self, reason: str = "the episode ended") -> None:
        """End the episode's side of the endpoint: answer pending calls with 409, cancel the agent if it still runs
        (waiting up to 5 s for it), and release the endpoint. Safe to call more than once."""
        call, self._call = self._call, None
        if call is not None:  # taken as an observation but never sampled (a rollout budget ended the episode)
            call.refuse(ended_error(reason))
        if self._session is not None:
            self._session.close(reason)
        run = self._run
        if run is not None and not run.done():
            run.cancel()
            await asyncio.wait([run], timeout=5.0)
        if run is not None and run.done() and not run.cancelled():
            run.exception()  # retrieved: the error (if any) was reported by the step that saw it
        endpoint, self._endpoint = self._endpoint, None
        if endpoint is not None:
            await endpoint.release()

    # -- internals ---------------------------------------------------------------------------------------------

    async def _run_agent(self, base_url: str, key: str) -> Any:
        if inspect.iscoroutinefunction(self.agent) or inspect.iscoroutinefunction(type(self.agent).__call__):
            return await self.agent(base_url, key, self.task)
        result = await asyncio.to_thread(self.agent, base_url, key, self.task)
        return await result if inspect.isawaitable(result) else result

    async def _next_observation(self) -> list[int] | None:
        """The next call's observation, or ``None`` once the agent returned (raises :class:`AgentError` if it
        raised). Calls the template cannot render are refused (400) and skipped."""
        session, run = self._session, self._run
        while True:
            if session.calls:
                call = session.calls.popleft()
                try:
                    ob, extends = self.prompts.observe(call.request, self._previous)
                except APIError as e:
                    call.refuse(e)
                    continue
                if not extends:
                    self.observations_extend = False
                    self._rewrites += 1
                self._call, self._ob = call, ob
                self.max_tokens_next_turn = call.request.max_tokens
                return ob
            if run.done():
                if run.cancelled():
                    raise AgentError(f"agent {self.name!r} was cancelled (task {_short(self.task)})")
                error = run.exception()
                if error is not None:
                    raise AgentError(
                        f"agent {self.name!r} raised {type(error).__name__}: {error} (task {_short(self.task)})"
                    ) from error
                return None
            await session.wait()

    async def _reward(self) -> tuple[float, dict[str, float]]:
        result = self._run.result()
        if self.reward_fn is not None:
            result = self.reward_fn(self.task, result)
            if inspect.isawaitable(result):
                result = await result
            where = "reward_fn"
        else:
            where = f"agent {self.name!r}"
        metrics = {}
        if isinstance(result, dict) and "reward" in result:
            metrics = result.get("metrics") or {}
            if not isinstance(metrics, dict) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
                for k, v in metrics.items()
            ):
                raise EnvContractError(f"{where}: 'metrics' must be a dict of names to numbers, got {_short(metrics)}")
            result = result["reward"]
        if isinstance(result, bool) or not isinstance(result, (int, float)) or not math.isfinite(result):
            hint = "" if self.reward_fn is not None else " (or give a reward_fn(task, result) that scores it)"
            raise EnvContractError(
                f"{where} must return a finite number as the reward (or {{'reward': number, "
                f"'metrics': {{...}}}}), got {_short(result)}{hint}"
            )
        return float(result), {k: float(v) for k, v in metrics.items()}


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class AgentGroupBuilder(EnvGroupBuilder):
    """``group_size`` runs of ``agent`` on one ``task`` (a GRPO group), cleaned up however the group ends.

    ``compute_group_rewards`` gives zeros (the agent's own reward is the trajectory's), after scoring the episodes
    the rollout budget cut where the agent's library scores them (:meth:`AgentEnv.finish_truncated`). ``cleanup``
    closes every env made (also those of retried attempts), so no agent or pending call outlives its rollout.
    """

    def __init__(
        self,
        agent: AgentFn,
        task: Any,
        renderer: Renderer | PromptBuilder,
        group_size: int,
        *,
        reward_fn: RewardFn | None = None,
        tags: Sequence[str] = ("agent",),
    ):
        if group_size < 1:
            raise ValueError(f"AgentGroupBuilder: group_size must be >= 1, got {group_size}")
        self.agent, self.task, self.group_size, self.reward_fn = agent, task, group_size, reward_fn
        self.prompts = renderer if isinstance(renderer, PromptBuilder) else PromptBuilder(renderer)
        self.tags = list(tags)
        self._envs: list[AgentEnv] = []

    async def make_envs(self) -> Sequence[Env]:
        envs = [AgentEnv(self.agent, self.task, self.prompts, reward_fn=self.reward_fn) for _ in range(self.group_size)]
        self._envs.extend(envs)
        return envs

    async def compute_group_rewards(
        self, trajectories: Sequence[Trajectory], envs: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        """Zeros; but an episode the rollout budget cut (stop reason ``max_turns`` / ``max_tokens``) whose agent's
        library scores cut episodes (:meth:`AgentEnv.finish_truncated`) gets that score on its last step, as a
        finished episode does, with the metric ``truncated`` = 1."""
        for trajectory, env in zip(trajectories, envs):
            if trajectory.stop_reason not in ("max_turns", "max_tokens") or not isinstance(env, AgentEnv):
                continue
            if not trajectory.transitions:
                continue
            scored = await env.finish_truncated(trajectory.stop_reason)
            if scored is not None:
                reward, metrics = scored
                last = trajectory.transitions[-1]
                last.reward, last.metrics = last.reward + reward, {**last.metrics, **metrics}
        return [(0.0, {}) for _ in trajectories]

    async def cleanup(self) -> None:
        envs, self._envs = self._envs, []
        for env in envs:
            await env.aclose()

    def logging_tags(self) -> list[str]:
        return list(self.tags)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_envs": []}
