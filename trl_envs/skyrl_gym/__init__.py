"""SkyRL-Gym envs as trl_envs envs: ``skyrl_gym/<env id>`` (e.g. ``skyrl_gym/gsm8k``), each episode one row of a
SkyRL-format dataset, scored by the env's own ``step`` rewards.

Needs ``pip install 'trl-envs[skyrl-gym]'``; importing this package does not import skyrl_gym (an episode does).
See docs/ecosystem.md.
"""

from .env import SkyRLGymEnv, SkyRLGymGroupBuilder
from .registry import SkyRLGymDatasetBuilder

__all__ = ["SkyRLGymDatasetBuilder", "SkyRLGymEnv", "SkyRLGymGroupBuilder"]
