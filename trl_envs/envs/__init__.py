"""Built-in environments, by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.renderer import Renderer
from ..core.types import RLDatasetBuilder
from .arithmetic import ArithmeticDatasetBuilder, ArithmeticEnv
from .cartpole import CartPoleDatasetBuilder
from .guess_number import GuessNumberDatasetBuilder, GuessNumberEnv
from .judged_arithmetic import JudgedArithmeticDatasetBuilder
from .tic_tac_toe import TicTacToeDatasetBuilder
from .tool_use import ToolUseDatasetBuilder

BUILTIN_ENVS: dict[str, Callable[..., RLDatasetBuilder]] = {
    "arithmetic": ArithmeticDatasetBuilder,
    "guess_number": GuessNumberDatasetBuilder,
    "tic_tac_toe": TicTacToeDatasetBuilder,
    "judged_arithmetic": JudgedArithmeticDatasetBuilder,
    "tool_use": ToolUseDatasetBuilder,
    "cartpole": CartPoleDatasetBuilder,  # needs gymnasium (pip install "trl-envs[gym]")
}


def make_dataset_builder(name: str, renderer: Renderer, **kwargs: Any) -> RLDatasetBuilder:
    """The :class:`RLDatasetBuilder` of built-in env ``name``; ``kwargs`` go to its constructor."""
    try:
        factory = BUILTIN_ENVS[name]
    except KeyError:
        raise ValueError(f"Unknown env {name!r}; built-in envs are: {sorted(BUILTIN_ENVS)}") from None
    return factory(renderer=renderer, **kwargs)


__all__ = ["ArithmeticDatasetBuilder", "ArithmeticEnv", "BUILTIN_ENVS", "CartPoleDatasetBuilder",
           "GuessNumberDatasetBuilder", "GuessNumberEnv", "JudgedArithmeticDatasetBuilder", "TicTacToeDatasetBuilder",
           "ToolUseDatasetBuilder", "make_dataset_builder"]
