"""What the model reads and writes: an OpenEnv observation (a dict) as text, the model's text as an action (a dict).

Defaults, decided once per server from its published action schema (``GET /schema``):

* **action**: the model's reply (stripped) goes into one field of the env's action type, ``{action_field: text}``.
  ``action_field`` defaults to the action's only text field (``type: string``), else its only required field; an
  action type with several candidates needs ``action_field`` set. The server validates the value (pydantic turns
  ``"3"`` into ``3`` for an ``int`` field).
* **observation**: ``observation_field`` if given; else the observation's only text field; else its fields as JSON
  (``metadata`` left out in both cases: it travels in the step's logs).

Override either with a function: ``action_fn(text) -> dict`` and ``observation_fn(observation_dict) -> str``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .session import OpenEnvConnectionError, OpenEnvError

HIDDEN_OBSERVATION_FIELDS = ("metadata", "done", "reward")
"""Observation fields never shown to the model (OpenEnv's bookkeeping)."""

ActionFn = Callable[[str], dict[str, Any]]
ObservationFn = Callable[[dict[str, Any]], str]


def http_url(url: str) -> str:
    """``url`` with an ``http(s)://`` scheme (``ws(s)://`` is what the WebSocket client uses for the same server)."""
    url = url.rstrip("/")
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if url.startswith(ws):
            return http + url[len(ws) :]
    return url


_SCHEMAS: dict[str, dict[str, Any]] = {}  # by URL: the rows of a dataset share a server


def fetch_schema(url: str, timeout: float = 10.0, *, cached: bool = True) -> dict[str, Any]:
    """The server's ``GET /schema`` (``{"action": ..., "observation": ..., "state": ...}``, JSON schemas); read once
    per URL and process unless ``cached`` is false.

    Raises:
        OpenEnvConnectionError: nothing answers at ``url``. OpenEnvError: something answers but not as an OpenEnv
        server.
    """
    endpoint = f"{http_url(url)}/schema"
    if cached and endpoint in _SCHEMAS:
        return _SCHEMAS[endpoint]
    try:
        with urllib.request.urlopen(endpoint, timeout=timeout) as response:
            schema = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        raise OpenEnvError(
            f"OpenEnv server at {url}: GET {endpoint} answered HTTP {e.code}; is this an OpenEnv "
            "server (openenv.core.create_app)?"
        ) from e
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise OpenEnvConnectionError(
            f"no OpenEnv server answers at {url} ({reason}); start it first (e.g. "
            "`uvicorn my_env.server.app:app --port 8000`) or check the URL"
        ) from e
    except ValueError as e:
        raise OpenEnvError(f"OpenEnv server at {url}: GET {endpoint} did not return JSON ({e})") from e
    if not isinstance(schema, dict) or not isinstance(schema.get("action"), dict):
        raise OpenEnvError(f"OpenEnv server at {url}: GET {endpoint} has no action schema; is this an OpenEnv server?")
    _SCHEMAS[endpoint] = schema
    return schema


def action_fields(schema: dict[str, Any]) -> dict[str, Any]:
    """The action type's fields (``metadata`` left out): ``{name: JSON schema of the field}``."""
    properties = schema.get("action", {}).get("properties", {}) or {}
    return {name: spec for name, spec in properties.items() if name != "metadata"}


def default_action_field(schema: dict[str, Any], url: str) -> str:
    """The field the model's text goes into (see the module docstring); raises ``ValueError`` naming the fields."""
    fields = action_fields(schema)
    text = [name for name, spec in fields.items() if spec.get("type") == "string"]
    if len(text) == 1:
        return text[0]
    required = [name for name in schema.get("action", {}).get("required", []) or [] if name in fields]
    if len(required) == 1:
        return required[0]
    raise ValueError(
        f"env 'openenv' at {url}: cannot tell which action field the model's text goes into; the "
        f"action type has fields {sorted(fields)} (text fields: {sorted(text)}, required: "
        f"{sorted(required)}). Set the option action_field, or pass action_fn."
    )


def default_observation_text(observation: dict[str, Any], field: str | None = None) -> str:
    """The observation as the model reads it: ``observation[field]``; else its only text field; else its visible
    fields as JSON."""
    if field is not None:
        if field not in observation:
            raise KeyError(
                f"observation field {field!r} (observation_field) is not in the observation; its fields: "
                f"{sorted(observation)}"
            )
        value = observation[field]
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    visible = {k: v for k, v in observation.items() if k not in HIDDEN_OBSERVATION_FIELDS}
    texts = [v for v in visible.values() if isinstance(v, str)]
    if len(texts) == 1:
        return texts[0]
    return json.dumps(visible, sort_keys=True, default=str)


@dataclass
class TextMapping:
    """The two conversions of one server: ``action(text) -> dict`` and ``observation_text(dict) -> str``.

    Build it with :meth:`for_server`, which reads the server's schema when the action field is not given.
    """

    action_field: str | None = None
    observation_field: str | None = None
    action_fn: ActionFn | None = None
    observation_fn: ObservationFn | None = None

    @classmethod
    def for_server(
        cls,
        url: str,
        *,
        action_field: str | None = None,
        observation_field: str | None = None,
        action_fn: ActionFn | None = None,
        observation_fn: ObservationFn | None = None,
        schema: dict[str, Any] | None = None,
    ) -> TextMapping:
        """The mapping for the server at ``url``: checks ``action_field`` against its action type, or picks the
        default field (fetching ``/schema`` unless given). Raises ``ValueError`` naming a field the env lacks."""
        if action_fn is None:
            schema = schema if schema is not None else fetch_schema(url)
            fields = action_fields(schema)
            if action_field is None:
                action_field = default_action_field(schema, url)
            elif fields and action_field not in fields:
                raise ValueError(
                    f"env 'openenv' at {url}: option action_field={action_field!r} is not a field of "
                    f"the env's action type; its fields: {sorted(fields)}"
                )
        return cls(action_field, observation_field, action_fn, observation_fn)

    def action(self, text: str) -> dict[str, Any]:
        if self.action_fn is not None:
            action = self.action_fn(text)
            if not isinstance(action, dict):
                raise TypeError(f"action_fn must return a dict of the env's action fields, got {type(action).__name__}")
            return action
        return {self.action_field: text.strip()}

    def observation_text(self, observation: dict[str, Any]) -> str:
        if self.observation_fn is not None:
            text = self.observation_fn(observation)
            if not isinstance(text, str):
                raise TypeError(f"observation_fn must return a str, got {type(text).__name__}")
            return text
        return default_observation_text(observation, self.observation_field)
