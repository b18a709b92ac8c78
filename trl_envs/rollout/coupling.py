"""Episodes that wait on each other, and how the engine ends the ones left waiting.

The players of one game are envs of one group that wait on each other (the cookbook's two-player TextArena envs on
an ``asyncio.Condition``, our tic-tac-toe self-play with :func:`~trl_envs.rollout.batching.parked`). When one of them
stops early -- a rollout budget (``max_turns``, ``max_tokens``, the context length) or an error -- the others may
wait for a move that never comes. The :class:`~trl_envs.rollout.batching.BatchingPolicy` running the batch ends them:

* **Siblings left waiting.** When the event loop is quiet (nothing can run, see ``trl_envs.rollout.loop_idle``) and no
  sampling request is pending, an episode that has not asked for an action is blocked for good. It is *ended* --
  cancelled where it waits, its trajectory kept with stop reason ``"sibling_ended"`` -- when a sibling it is coupled
  with stopped early: an env of the same :meth:`~trl_envs.core.types.EnvGroupBuilder.coupled_envs` set, or any env
  of its group while it waits inside :func:`~trl_envs.rollout.batching.parked`. The action it was stepping with
  becomes its last transition (reward 0, not done). An episode ended before its first action has nothing to train
  on: it fails with :class:`SiblingEndedError`, which the group's error strategy handles.
* **Groups that stop making progress.** A group none of whose live episodes asked for an action or got one for
  ``group_stall_timeout_s`` seconds (default 600; ``RolloutBudget``) is failed with :class:`GroupStalledError`, which
  names the group, its envs and what each was doing. This is the safety net for waits the loop cannot see (a thread
  of the env's own, a lost message) and for envs stuck in real work.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any


class SiblingEndedError(RuntimeError):
    """An episode was left waiting, before its first action, on a sibling that stopped early."""


class GroupStalledError(RuntimeError):
    """No episode of a group made progress for ``group_stall_timeout_s`` seconds."""


class Coupling:
    """Envs that wait on each other (a group, or one of its ``coupled_envs`` sets): the first early stop among them.

    Attributes:
        name: for messages (the builder's class name).
        ended: why the first of them stopped early (``"GameEnv (env 0) stopped by max_turns"``), else ``None``.
    """

    __slots__ = ("name", "ended")

    def __init__(self, name: str):
        self.name = name
        self.ended: str | None = None

    def stopped_early(self, why: str) -> None:
        if self.ended is None:
            self.ended = why


class EpisodeLinks:
    """What an episode is coupled with: its ``group``, and its ``coupled_envs`` set (``unit``) if it is in one with
    other envs."""

    __slots__ = ("group", "unit", "label")

    def __init__(self, group: Coupling, unit: Coupling | None, label: str):
        self.group, self.unit, self.label = group, unit, label


current_links: contextvars.ContextVar[EpisodeLinks | None] = contextvars.ContextVar(
    "trl_envs_episode_links", default=None
)
"""Set by the engine around each env's rollout (``do_group_rollout``); read when the episode starts."""


class EpisodeState:
    """One live episode in a :class:`~trl_envs.rollout.batching.BatchingPolicy` (internal bookkeeping).

    Attributes:
        links: what it is coupled with (``None`` outside ``do_group_rollout``).
        asking: its sampling requests not yet sent.
        awaiting: its sampling requests not yet answered (sent or not).
        parked: inside :func:`~trl_envs.rollout.batching.parked`.
        last_progress: loop time of its last request, result or wake-up.
        activity: what it is doing (for stall messages).
        ending: set when the batcher ends it: a reason (``str``) or an exception to raise.
    """

    __slots__ = ("task", "links", "asking", "awaiting", "parked", "last_progress", "activity", "ending")

    def __init__(self, task: asyncio.Task | None, links: EpisodeLinks | None, now: float):
        self.task, self.links = task, links
        self.asking = 0
        self.awaiting = 0
        self.parked = 0
        self.last_progress = now
        self.activity = "starting"
        self.ending: str | BaseException | None = None

    def stopped_early(self, why: str) -> None:
        """This episode stopped by a budget or an error: its coupled siblings may now be left waiting."""
        if self.links is not None:
            self.links.group.stopped_early(why)
            if self.links.unit is not None:
                self.links.unit.stopped_early(why)

    def left_waiting_by(self) -> str | None:
        """Why this (blocked) episode should be ended, or ``None`` if no sibling it waits on stopped early."""
        links = self.links
        if links is None:
            return None
        if links.unit is not None and links.unit.ended is not None:
            return links.unit.ended
        if self.parked and links.group.ended is not None:
            return links.group.ended
        return None

    def end(self, how: str | BaseException) -> None:
        """Stop the episode where it waits: its rollout sees ``ending`` when the cancellation arrives."""
        if self.ending is None and self.task is not None and not self.task.done():
            self.ending = how
            self.task.cancel()

    def take_ending(self) -> str | BaseException | None:
        """The ending the batcher asked for (``None``: a cancellation from elsewhere); the task's cancellation
        request is withdrawn, so the rollout can return normally."""
        how = self.ending
        if how is not None and self.task is not None and hasattr(self.task, "uncancel"):
            self.task.uncancel()
        return how


def describe(episodes: list[Any]) -> str:
    return "; ".join(f"{e.links.label if e.links else 'an episode'} was in {e.activity}" for e in episodes)
