"""Train on OpenEnv environments: an env server (a URL, a Docker image or a Hugging Face Space) as trl_envs envs
(docs/openenv.md).

::

    python scripts/train_grpo.py --env openenv --env_kwargs '{"url": "http://127.0.0.1:8000"}'

or in Python::

    from trl_envs.openenv import OpenEnvDatasetBuilder
    envs = OpenEnvDatasetBuilder(Renderer(tokenizer), url="http://127.0.0.1:8000", group_size=8)
    EnvGRPOTrainer(model, args, env_dataset=envs).train()

Needs OpenEnv's client (the ``openenv`` package, see :data:`INSTALL`), imported when the first session opens:
``import trl_envs`` and ``import trl_envs.openenv`` never import it.
"""

from .dataset import ENV_NAME, OpenEnvDataset, OpenEnvDatasetBuilder, openenv_from_row, start_server
from .env import OpenEnvEnv, OpenEnvGroupBuilder
from .mapping import TextMapping, default_observation_text, fetch_schema
from .session import (
    INSTALL,
    OpenEnvActionError,
    OpenEnvCapacityError,
    OpenEnvConnectionError,
    OpenEnvConnectionLost,
    OpenEnvError,
    OpenEnvServerGone,
    OpenEnvSession,
)

__all__ = [
    "ENV_NAME",
    "INSTALL",
    "OpenEnvActionError",
    "OpenEnvCapacityError",
    "OpenEnvConnectionError",
    "OpenEnvConnectionLost",
    "OpenEnvDataset",
    "OpenEnvDatasetBuilder",
    "OpenEnvEnv",
    "OpenEnvError",
    "OpenEnvGroupBuilder",
    "OpenEnvServerGone",
    "OpenEnvSession",
    "TextMapping",
    "default_observation_text",
    "fetch_schema",
    "openenv_from_row",
    "start_server",
]
