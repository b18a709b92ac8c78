"""Built-in environments, by name. Build one with :func:`trl_envs.registry.make_env_dataset` (the one way to make an
env by name: built-in, registered or installed)."""

from __future__ import annotations

from collections.abc import Callable

from ..core.builtin_datasets import BuiltinDataset, BuiltinDatasetBuilder, check_int_option, check_number_option
from ..core.types import RLDatasetBuilder
from ..openenv.dataset import OpenEnvDatasetBuilder  # imports nothing of openenv until a session opens
from .arithmetic import ArithmeticDatasetBuilder, ArithmeticEnv
from .calculator_agent import CalculatorAgentDatasetBuilder
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
    "openenv": OpenEnvDatasetBuilder,  # an OpenEnv server; needs OpenEnv's client (docs/openenv.md)
    "calculator_agent": CalculatorAgentDatasetBuilder,  # needs pip install "trl-envs[agents]" openai
}


__all__ = [
    "ArithmeticDatasetBuilder",
    "ArithmeticEnv",
    "BUILTIN_ENVS",
    "BuiltinDataset",
    "BuiltinDatasetBuilder",
    "CalculatorAgentDatasetBuilder",
    "CartPoleDatasetBuilder",
    "check_int_option",
    "check_number_option",
    "GuessNumberDatasetBuilder",
    "GuessNumberEnv",
    "JudgedArithmeticDatasetBuilder",
    "TicTacToeDatasetBuilder",
    "ToolUseDatasetBuilder",
]
