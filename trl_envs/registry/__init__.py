"""Env kinds by name, env rows and their validation, envs as Hugging Face datasets.

* :mod:`~trl_envs.registry.names`: env kinds by name (``register_env``, ``get_env``, ``list_envs``, entry points) and
  building an env's datasets by name (``make_env_dataset``) — the one way to make an env by name;
* :mod:`~trl_envs.registry.rows`: row specs (``{"env": NAME, **fields}``) and their validation;
* :mod:`~trl_envs.registry.env_kwargs`: ``--env_kwargs`` parsing;
* :mod:`~trl_envs.registry.env_datasets`: a ``datasets.Dataset`` of rows as an ``RLDataset`` (imports ``datasets``,
  so it is not imported here).
"""

from .env_kwargs import parse_env_kwargs
from .names import (
    ENTRY_POINT_GROUP,
    ENV_FIELD,
    EnvKind,
    UnknownEnvError,
    forget_entry_points,
    get_env,
    known_env_names,
    list_envs,
    make_env_dataset,
    register_env,
    unregister_env,
)
from .rows import EnvRowError, make_env_group_builder, row_env_names, validate_row

__all__ = [
    "ENTRY_POINT_GROUP",
    "ENV_FIELD",
    "EnvKind",
    "EnvRowError",
    "UnknownEnvError",
    "forget_entry_points",
    "get_env",
    "known_env_names",
    "list_envs",
    "make_env_dataset",
    "make_env_group_builder",
    "parse_env_kwargs",
    "register_env",
    "row_env_names",
    "unregister_env",
    "validate_row",
]
