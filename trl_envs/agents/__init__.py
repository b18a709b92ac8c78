"""Agents that own their loop, trained as they are: an OpenAI-compatible endpoint served during rollouts
(docs/agents.md). Needs the ``agents`` extra (uvicorn, httptools, orjson) once an agent env runs; importing this package
does not import them."""

from .dataset import AgentDataset, AgentDatasetBuilder
from .endpoint import AgentEndpoint, acquire_endpoint
from .env import AgentEnv, AgentError, AgentGroupBuilder
from .prompts import PromptBuilder

__all__ = [
    "AgentDataset",
    "AgentDatasetBuilder",
    "AgentEndpoint",
    "AgentEnv",
    "AgentError",
    "AgentGroupBuilder",
    "PromptBuilder",
    "acquire_endpoint",
]
