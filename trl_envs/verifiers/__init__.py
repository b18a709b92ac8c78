"""verifiers environments (``verifiers.v1``: a taskset, its tasks' rubric, the env's agents) trained as they are:
``verifiers/<env-id>`` by name, or :class:`VerifiersDatasetBuilder` from Python (docs/verifiers.md).

Each episode runs the environment's own rollout (``env.run_episode``) against the policy served on 127.0.0.1
(:mod:`trl_envs.agents`), which records every sampled token; each task is one GRPO group. Needs
``pip install "trl-envs[verifiers]"``; importing this package does not import verifiers (loading an environment does).
"""

from .dataset import VerifiersDatasetBuilder
from .episode import VerifiersAgent, episode_result
from .loading import VerifiersEnvError, env_config, load_env
from .source import VerifiersSource

__all__ = [
    "VerifiersAgent",
    "VerifiersDatasetBuilder",
    "VerifiersEnvError",
    "VerifiersSource",
    "env_config",
    "episode_result",
    "load_env",
]
