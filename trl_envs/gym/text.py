"""Gymnasium spaces <-> text: how :class:`~trl_envs.gym.env.GymEnv` shows an observation to a language model and
reads an action back from its reply.

* :class:`ObservationFormatter` (the default formatter) writes an observation as short text: numbers rounded to
  ``precision`` decimals (named when ``observation_names`` is given), followed by the legal actions.
* :class:`ActionParser` (the default parser) reads a reply as an action: for ``Discrete`` an index or an action
  name, for ``Box`` the numbers (clipped to the bounds by default). Anything else raises :class:`ActionParseError`
  with a message that says what was expected.

Both work on ``Discrete`` and ``Box`` spaces (observations also on ``Dict``/``Tuple`` of them, and
``MultiDiscrete``/``MultiBinary``). For other spaces pass your own ``formatter(observation, info) -> str`` and
``action_parser(text) -> action``. Gymnasium is only needed to build these from real spaces; the module imports
without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

MAX_NUMBERS_SHOWN = 64
"""An observation with more numbers than this (an image...) is refused by the default formatter: it would not fit a
prompt. Pass a ``formatter`` that summarises it instead."""

MAX_ACTIONS_LISTED = 20
"""``Discrete`` action spaces up to this size are listed one by one; larger ones are described as a range."""

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER_LIST = re.compile(rf"^[\[(]?\s*{_NUMBER}(?:\s*[,;]?\s*{_NUMBER})*\s*[\])]?$")
_TRIM = " \t\n.!\"'`*"


class ActionParseError(ValueError):
    """The model's reply is not a legal action. The message says what was read and what was expected."""


def _space_kind(space: Any) -> str:
    return type(space).__name__


def _fmt_number(x: float, precision: int, signed: bool = False) -> str:
    """``x`` rounded to ``precision`` decimals (integers without decimals); ``-0.00`` shows as ``0.00``."""
    if isinstance(x, (bool, np.bool_)):
        return str(int(x))
    if isinstance(x, (int, np.integer)):
        return f"{int(x):+d}" if signed else str(int(x))
    value = float(x)
    if not np.isfinite(value):
        return str(value)
    text = f"{value:+.{precision}f}" if signed else f"{value:.{precision}f}"
    if float(text) == 0.0:  # no "-0.00": the sign of a number that rounds to zero carries no information
        text = f"{0.0:+.{precision}f}" if signed else f"{0.0:.{precision}f}"
    return text


def format_numbers(values: Any, precision: int = 2, names: Sequence[str] | None = None, signed: bool = False) -> str:
    """``"1.00, -0.25"`` (or ``"x 1.00, y -0.25"`` with ``names``) for an array or a sequence of numbers."""
    flat = np.asarray(values).reshape(-1)
    parts = [_fmt_number(v.item() if hasattr(v, "item") else v, precision, signed) for v in flat]
    if names is not None:
        if len(names) != len(parts):
            raise ValueError(f"format_numbers: {len(names)} names for {len(parts)} numbers")
        parts = [f"{n} {p}" for n, p in zip(names, parts)]
    return ", ".join(parts)


def _count_numbers(space: Any) -> int:
    kind = _space_kind(space)
    if kind == "Dict":
        return sum(_count_numbers(s) for s in space.spaces.values())
    if kind == "Tuple":
        return sum(_count_numbers(s) for s in space.spaces)
    if kind == "Discrete":
        return 1
    shape = getattr(space, "shape", None)
    if shape is None:
        raise TypeError(f"no default text for {space!r}")
    return int(np.prod(shape)) if len(shape) else 1


def describe_observation(
    observation: Any, precision: int = 2, names: Sequence[str] | None = None, signed: bool = False
) -> str:
    """An observation as text: numbers rounded, ``Dict`` as ``key: value`` pairs, ``Tuple`` as ``(a; b)``."""
    if isinstance(observation, Mapping):
        return "; ".join(f"{k}: {describe_observation(v, precision, None, signed)}" for k, v in observation.items())
    if isinstance(observation, tuple):
        return "(" + "; ".join(describe_observation(v, precision, None, signed) for v in observation) + ")"
    return format_numbers(observation, precision, names, signed)


def describe_actions(action_space: Any, action_names: Sequence[str] | None = None, precision: int = 2) -> str:
    """The legal actions as one line, e.g. ``"Actions: 0 = left, 1 = right"`` or ``"Action: 1 number in
    [-2.00, 2.00]"``."""
    kind = _space_kind(action_space)
    if kind == "Discrete":
        start, n = int(action_space.start), int(action_space.n)
        if action_names is not None:
            return "Actions: " + ", ".join(f"{start + i} = {name}" for i, name in enumerate(action_names))
        if n <= MAX_ACTIONS_LISTED:
            return "Actions: " + ", ".join(str(start + i) for i in range(n))
        return f"Action: an integer from {start} to {start + n - 1}"
    if kind == "Box":
        low, high = np.asarray(action_space.low).reshape(-1), np.asarray(action_space.high).reshape(-1)
        count = low.size
        if action_names is not None:
            return "Action: " + ", ".join(
                f"{name} in [{_fmt_number(lo, precision)}, {_fmt_number(hi, precision)}]"
                for name, lo, hi in zip(action_names, low, high)
            )
        if np.all(low == low[0]) and np.all(high == high[0]):
            noun = "number" if count == 1 else "numbers"
            return (
                f"Action: {count} {noun} in [{_fmt_number(low[0].item(), precision)}, "
                f"{_fmt_number(high[0].item(), precision)}]"
            )
        bounds = ", ".join(f"[{_fmt_number(lo, precision)}, {_fmt_number(hi, precision)}]" for lo, hi in zip(low, high))
        return f"Action: {count} numbers, in {bounds}"
    if kind in ("MultiDiscrete", "MultiBinary"):
        return f"Action: {_count_numbers(action_space)} integers"
    return ""


class ObservationFormatter:
    """The default ``formatter(observation, info) -> str`` of :class:`~trl_envs.gym.env.GymEnv`.

    Writes ``instructions`` (if any), then ``Observation: <numbers>``, then the legal actions, one per line::

        Observation: cart position 0.01, cart velocity -0.02, pole angle 0.03, pole angular velocity -0.04
        Actions: 0 = left, 1 = right

    Args:
        observation_space, action_space: the env's spaces.
        observation_names: one name per number of a flat ``Box`` observation (shown before each number).
        action_names: one name per ``Discrete`` action (or per ``Box`` action dimension).
        precision: decimals of the rounded numbers.
        instructions: a first line telling the model what to do (e.g. ``"Keep the pole upright."``).
        signed: write every number with its sign (``+0.03``), which makes signs easy to read for small models.

    Raises:
        TypeError: the observation space is not made of Box / Discrete / MultiDiscrete / MultiBinary spaces
            (possibly inside Dict / Tuple), or has more than :data:`MAX_NUMBERS_SHOWN` numbers.
        ValueError: the number of names does not match the space.
    """

    def __init__(
        self,
        observation_space: Any,
        action_space: Any,
        *,
        observation_names: Sequence[str] | None = None,
        action_names: Sequence[str] | None = None,
        precision: int = 2,
        instructions: str = "",
        signed: bool = False,
    ):
        try:
            count = _count_numbers(observation_space)
        except TypeError:
            raise TypeError(
                f"ObservationFormatter: no default text for observation space {observation_space!r}; "
                "pass formatter=(observation, info) -> str"
            ) from None
        if count > MAX_NUMBERS_SHOWN:
            raise TypeError(
                f"ObservationFormatter: observation space {observation_space!r} has {count} numbers, too "
                f"many to show as text (limit {MAX_NUMBERS_SHOWN}); pass formatter=(observation, info) -> "
                "str that summarises it"
            )
        if observation_names is not None and (
            _space_kind(observation_space) not in ("Box", "Discrete") or len(observation_names) != count
        ):
            raise ValueError(
                f"ObservationFormatter: {len(observation_names)} observation_names for observation space "
                f"{observation_space!r} ({count} numbers); give one name per number of a Box space"
            )
        _check_action_names(action_space, action_names, "ObservationFormatter")
        self.observation_space, self.action_space = observation_space, action_space
        self.observation_names = list(observation_names) if observation_names is not None else None
        self.precision, self.instructions, self.signed = precision, instructions, signed
        self.actions_line = describe_actions(action_space, action_names, precision)

    def __call__(self, observation: Any, info: dict | None = None) -> str:
        lines = [self.instructions] if self.instructions else []
        lines.append(
            "Observation: " + describe_observation(observation, self.precision, self.observation_names, self.signed)
        )
        if self.actions_line:
            lines.append(self.actions_line)
        return "\n".join(lines)


def _check_action_names(action_space: Any, action_names: Sequence[str] | None, where: str) -> None:
    if action_names is None:
        return
    kind = _space_kind(action_space)
    expected = (
        int(action_space.n) if kind == "Discrete" else (int(np.prod(action_space.shape)) if kind == "Box" else None)
    )
    if expected is None or len(action_names) != expected:
        raise ValueError(
            f"{where}: {len(action_names)} action_names for action space {action_space!r}; give one "
            "name per Discrete action (or per Box dimension)"
        )
    if kind == "Discrete":
        lowered = [str(n).strip().lower() for n in action_names]
        if len(set(lowered)) != len(lowered) or any(re.fullmatch(_NUMBER, n) for n in lowered):
            raise ValueError(
                f"{where}: action_names {list(action_names)} must be distinct and not numbers "
                "(numbers are read as action indices)"
            )


class ActionParser:
    """The default ``action_parser(text) -> action`` of :class:`~trl_envs.gym.env.GymEnv`.

    The whole reply (surrounding spaces, quotes, ``*`` and a final ``.`` removed, case ignored) must be the action:

    * ``Discrete(n, start)``: an index ``start .. start+n-1`` (``"1"``), or one of ``action_names`` (``"right"``).
    * ``Box``: exactly as many numbers as the space has, separated by spaces or commas, optionally in brackets
      (``"0.5"``, ``"[0.1, -0.3]"``). Out-of-bounds numbers are clipped to the bounds (``clip=True``) or rejected.
    * ``MultiDiscrete`` / ``MultiBinary``: the integers, as for ``Box``.

    Raises :class:`ActionParseError` for anything else, never another exception.

    Raises (at construction):
        TypeError: no default parser for this action space (pass ``action_parser=...`` to ``GymEnv``).
    """

    def __init__(self, action_space: Any, *, action_names: Sequence[str] | None = None, clip: bool = True):
        kind = _space_kind(action_space)
        if kind not in ("Discrete", "Box", "MultiDiscrete", "MultiBinary"):
            raise TypeError(
                f"ActionParser: no default parser for action space {action_space!r}; pass "
                "action_parser=(text) -> action"
            )
        _check_action_names(action_space, action_names, "ActionParser")
        self.action_space, self.kind, self.clip = action_space, kind, clip
        self.action_names = [str(n).strip().lower() for n in action_names] if action_names is not None else None

    def __call__(self, text: str) -> Any:
        reply = text.strip().strip(_TRIM).strip().lower()
        if not reply:
            raise ActionParseError(f"empty reply; expected {self._expected()}")
        if self.kind == "Discrete":
            return self._discrete(reply)
        return self._numbers(reply)

    def _expected(self) -> str:
        return (
            describe_actions(self.action_space, self.action_names)
            .replace("Actions: ", "one of ")
            .replace("Action: ", "")
        )

    def _discrete(self, reply: str) -> int:
        space = self.action_space
        start, n = int(space.start), int(space.n)
        if self.action_names is not None and reply in self.action_names:
            return start + self.action_names.index(reply)
        if re.fullmatch(r"[-+]?\d+", reply):
            value = int(reply)
            if start <= value < start + n:
                return value
            raise ActionParseError(f"action {value} is outside {space!r}; expected {self._expected()}")
        raise ActionParseError(f"cannot read an action from {reply!r:.80}; expected {self._expected()}")

    def _numbers(self, reply: str) -> np.ndarray:
        space = self.action_space
        if not _NUMBER_LIST.match(reply):
            raise ActionParseError(f"cannot read numbers from {reply!r:.80}; expected {self._expected()}")
        values = np.array([float(v) for v in re.findall(_NUMBER, reply)])
        shape = tuple(space.shape)
        expected = int(np.prod(shape)) if shape else 1
        if values.size != expected:
            raise ActionParseError(f"got {values.size} numbers, {space!r} takes {expected}")
        if not np.all(np.isfinite(values)):
            raise ActionParseError(f"non-finite number in {reply!r:.80}")
        if self.kind == "Box":
            low, high = np.asarray(space.low, dtype=float).reshape(-1), np.asarray(space.high, dtype=float).reshape(-1)
            if self.clip:
                values = np.clip(values, low, high)
            elif np.any(values < low) or np.any(values > high):
                raise ActionParseError(f"{format_numbers(values)} is outside the bounds of {space!r}")
            return values.astype(space.dtype).reshape(shape)
        if not np.all(values == np.round(values)):
            raise ActionParseError(f"{space!r} takes integers, got {reply!r:.80}")
        action = values.astype(space.dtype).reshape(shape)
        if not space.contains(action):
            raise ActionParseError(f"{reply!r:.80} is outside {space!r}")
        return action


def default_action(action_space: Any) -> Any:
    """The action played in place of an unparsable one by default: ``Discrete`` → its first action; ``Box`` → zeros
    clipped into the bounds (the middle of a symmetric range); ``MultiDiscrete`` → its first actions;
    ``MultiBinary`` → zeros.

    Raises:
        TypeError: no default for this space (pass ``default_action=`` to ``GymEnv``).
    """
    kind = _space_kind(action_space)
    if kind == "Discrete":
        return int(action_space.start)
    if kind == "Box":
        zeros = np.zeros(action_space.shape, dtype=float)
        return np.clip(zeros, action_space.low, action_space.high).astype(action_space.dtype)
    if kind == "MultiDiscrete":
        return np.asarray(getattr(action_space, "start", np.zeros_like(action_space.nvec)), dtype=action_space.dtype)
    if kind == "MultiBinary":
        return np.zeros(action_space.shape, dtype=action_space.dtype)
    raise TypeError(f"no default action for action space {action_space!r}; pass default_action= (or 'random')")
