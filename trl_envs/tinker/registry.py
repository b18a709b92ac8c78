"""tinker-cookbook builders as env kinds of the registry: ``--env package.module:ArithmeticDatasetBuilder``.

The registry imports ``module:attr`` references; when a class of the object comes from tinker-cookbook it finds this
module by name (:data:`trl_envs.registry.names.IMPORTED_OBJECT_ADAPTERS`) and asks :func:`imported_env_kind` for the
kind. The kind's
factory builds the cookbook object from ``--env_kwargs`` and hands back :func:`~trl_envs.tinker.dataset.adapt`'s
result, so the scripts and ``trl-envs eval`` train and evaluate it like any env.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..core.types import ListRLDataset
from ..registry.env_kwargs import EnvOptionError
from ..registry.names import EnvKind
from .dataset import adapt
from .detect import cookbook_base


def imported_env_kind(ref: str, obj: Any) -> EnvKind | None:
    """The registry's hook: :func:`env_kind` of a tinker-cookbook ``RLDatasetBuilder`` / ``RLDataset`` /
    ``EnvGroupBuilder`` (class or instance) imported from ``ref``; ``None`` for any other object."""
    return env_kind(ref, obj) if cookbook_base(obj) is not None else None


def env_kind(ref: str, obj: Any) -> EnvKind:
    """The :class:`~trl_envs.registry.names.EnvKind` of a tinker-cookbook object imported from ``ref``.

    * a builder **class** (an ``RLDatasetBuilder`` chz dataclass such as ``ArithmeticDatasetBuilder``, or an
      ``RLDataset`` / ``EnvGroupBuilder`` class): the factory calls it with the env kwargs. Its signature lists the
      class's fields, so the registry offers ``group_size`` / ``batch_size`` (= ``--num_generations`` /
      ``--groups_per_batch``) exactly to builders that have fields of those names, and a kwarg it does not take is
      an error naming the fields it does take;
    * an **instance**: the factory hands it back adapted (no kwargs).

    The trl_envs renderer the registry passes is not used to render: a cookbook builder makes its own renderer from
    its ``renderer_name`` and tokenizer fields (:data:`TOKENIZER_FIELDS`), which must name the model being trained
    (or one with its tokenizer). The renderer's tokenizer is what they are checked against
    (:func:`check_same_tokenizer`).
    """
    base = cookbook_base(obj)
    if base is None:
        raise TypeError(
            f"env {ref!r}: {type(obj).__name__} is not a tinker-cookbook RLDatasetBuilder, RLDataset or EnvGroupBuilder"
        )
    description = f"tinker-cookbook {base} {getattr(obj, '__qualname__', type(obj).__qualname__)}"
    if isinstance(obj, type):
        params = _keyword_params(obj)

        def factory(renderer=None, **kwargs):
            names = [p.name for p in params]
            unknown = sorted(set(kwargs) - set(names))
            if unknown:
                raise EnvOptionError(
                    f"env {ref!r}: {obj.__name__} takes no option {unknown[0]!r}; its options are {_describe(params)}"
                )
            missing = [p.name for p in params if p.default is inspect.Parameter.empty and p.name not in kwargs]
            if missing:
                raise EnvOptionError(
                    f"env {ref!r}: {obj.__name__} needs option {missing[0]!r} (--env_kwargs); its options "
                    f"are {_describe(params)}"
                )
            if renderer is not None:
                for name_field in TOKENIZER_FIELDS:
                    if isinstance(kwargs.get(name_field), str):
                        check_same_tokenizer(ref, name_field, kwargs[name_field], renderer.tokenizer)
            return _as_dataset(obj(**kwargs))

        factory.__signature__ = inspect.Signature(
            [inspect.Parameter("renderer", inspect.Parameter.KEYWORD_ONLY, default=None)]
            + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
        )
    else:

        def factory(renderer=None):
            return _as_dataset(obj)

    factory.__doc__ = description
    return EnvKind(ref, description, factory, None, "import (tinker-cookbook)")


TOKENIZER_FIELDS = ("model_name_for_tokenizer", "model_name")
"""Fields of the cookbook's builders that name the model whose tokenizer (and so token ids) the envs use."""

_PROBE = "Hello, World! 12 + 345 = 357?\n  Guess: 42 <think>x</think>"


def check_same_tokenizer(ref: str, field: str, name: str, tokenizer) -> None:
    """Raise ``ValueError`` when the tokenizer that a cookbook builder's ``field`` (= ``name``) loads is not the
    trained model's ``tokenizer``: a different vocabulary, or different ids for the same text (the env would speak
    token ids the model reads differently, and training would go on silently wrong)."""
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    theirs = get_tokenizer(name)
    same = len(theirs) == len(tokenizer) and (
        theirs.encode(_PROBE, add_special_tokens=False) == tokenizer.encode(_PROBE, add_special_tokens=False)
    )
    if not same:
        ours = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ValueError(
            f"env {ref!r}: {field}={name!r} loads a tokenizer ({len(theirs)} tokens) that is not the "
            f"trained model's ({ours!r}, {len(tokenizer)} tokens); the env's token ids would not mean "
            f"what the model reads. Set {field} to the model being trained."
        )


def _as_dataset(obj: Any):
    adapted = adapt(obj)
    if cookbook_base(obj) == "EnvGroupBuilder":
        return ListRLDataset([adapted], batch_size=1)
    return adapted


def _keyword_params(cls: type) -> list[inspect.Parameter]:
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _describe(params: list[inspect.Parameter]) -> str:
    return (
        "("
        + ", ".join(p.name + ("" if p.default is inspect.Parameter.empty else f"={p.default!r}") for p in params)
        + ")"
    )
