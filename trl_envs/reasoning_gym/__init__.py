"""reasoning-gym tasks as single-turn problem envs: ``reasoning_gym/<task>`` (e.g. ``reasoning_gym/basic_arithmetic``).

Needs ``pip install 'trl-envs[reasoning-gym]'``; importing this package does not import reasoning_gym (a task does).
See docs/ecosystem.md.
"""

from .env import ReasoningGymEnv, ReasoningGymGroupBuilder, extract_answer, task_names
from .registry import ReasoningGymDataset, ReasoningGymDatasetBuilder

__all__ = [
    "ReasoningGymDataset",
    "ReasoningGymDatasetBuilder",
    "ReasoningGymEnv",
    "ReasoningGymGroupBuilder",
    "extract_answer",
    "task_names",
]
