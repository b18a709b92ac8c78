"""One reasoning-gym problem as a single-turn :class:`~trl_envs.core.problem_env.ProblemEnv`, and its group.

The question is the entry's ``question``; the reward's answer score is the dataset's own ``score_answer(answer,
entry)`` (a score in [0, 1]). The answer is the whole reply (stripped), or with ``answer_tag`` the text inside the
reply's last ``<answer_tag>...</answer_tag>``, as reasoning-gym's own prompts ask (``answer_tag="answer"`` also puts
reasoning-gym's default system prompt before the question); a reply without the tag is badly formed and scores 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache, partial
from typing import Any

from ..core.problem_env import ProblemEnv, ProblemGroupBuilder
from ..core.renderer import Renderer

PREFIX = "reasoning_gym/"


def import_reasoning_gym():
    try:
        import reasoning_gym
    except ImportError as e:
        raise ImportError(
            "reasoning-gym tasks need reasoning_gym: pip install 'trl-envs[reasoning-gym]' (docs/ecosystem.md)"
        ) from e
    return reasoning_gym


def task_names() -> list[str]:
    """Every dataset reasoning-gym registers, sorted."""
    import_reasoning_gym()
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def make_procedural_dataset(task: str, config: Mapping[str, Any]):
    """``reasoning_gym.create_dataset(task, **config)``, with one ``ValueError`` naming the task and the option for a
    bad config (reasoning-gym raises ``TypeError`` or ``AssertionError`` there)."""
    rg = import_reasoning_gym()
    from reasoning_gym.factory import DATASETS

    options = dict(config)
    if task == "composite" and isinstance(options.get("datasets"), list):
        from reasoning_gym.composite import DatasetSpec

        options["datasets"] = [
            DatasetSpec(d["name"], float(d.get("weight", 1.0)), dict(d.get("config", {})))
            if isinstance(d, Mapping)
            else d
            for d in options["datasets"]
        ]
    size = options.get("size", 1)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"env '{PREFIX}{task}': option 'size' must be an integer >= 1, got {size!r}")
    try:
        return rg.create_dataset(task, **options)
    except (TypeError, AssertionError, ValueError, KeyError) as e:
        fields = sorted(getattr(DATASETS[task][1], "__dataclass_fields__", {}))
        raise ValueError(
            f"env '{PREFIX}{task}': reasoning-gym rejected the config {dict(config)}: "
            f"{type(e).__name__}: {e}. Its options: {fields}"
        ) from e


@lru_cache(maxsize=64)
def _cached_dataset(task: str, config_key: str):
    import json

    return make_procedural_dataset(task, json.loads(config_key))


def procedural_dataset(task: str, config: Mapping[str, Any]):
    """The dataset of ``task`` with ``config``, cached per (task, config) in this process."""
    import json

    return _cached_dataset(task, json.dumps(dict(config), sort_keys=True))


_TAG_CACHE: dict[str, re.Pattern] = {}


def extract_answer(text: str, tag: str | None) -> str | None:
    """The answer in a reply: all of it (stripped) without ``tag``; else the last ``<tag>...</tag>``'s content, or
    ``None`` when there is none."""
    if tag is None:
        return text.strip()
    pattern = _TAG_CACHE.setdefault(tag, re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL))
    found = pattern.findall(text)
    return found[-1].strip() if found else None


class ReasoningGymEnv(ProblemEnv):
    """Entry ``index`` of ``task``'s dataset made with ``config``; reward: the dataset's ``score_answer``."""

    def __init__(
        self,
        renderer: Renderer,
        task: str,
        index: int,
        config: Mapping[str, Any],
        answer_tag: str | None = None,
        format_coef: float = 0.1,
    ):
        prefix = None
        if answer_tag is not None:
            from reasoning_gym.utils import SYSTEM_PROMPTS

            prefix = [{"role": "system", "content": SYSTEM_PROMPTS["default"]}]
        super().__init__(renderer, convo_prefix=prefix, format_coef=format_coef)
        self.task, self.index, self.answer_tag = task, index, answer_tag
        self.dataset = procedural_dataset(task, config)
        self.entry = self.dataset[index % len(self.dataset)]

    def get_question(self) -> str:
        return self.entry["question"]

    def check_format(self, sample_str: str) -> bool:
        return extract_answer(sample_str, self.answer_tag) is not None

    def check_answer(self, sample_str: str) -> float:
        answer = extract_answer(sample_str, self.answer_tag)
        if answer is None:
            return 0.0
        return min(1.0, max(0.0, float(self.dataset.score_answer(answer, self.entry))))

    def get_reference_answer(self) -> str | None:
        answer = self.entry.get("answer")
        return None if answer is None else str(answer)


class ReasoningGymGroupBuilder(ProblemGroupBuilder):
    """``group_size`` copies of one reasoning-gym problem. Its logging tags are the env name and, for a composite
    dataset, the entry's source task (``reasoning_gym/<source task>``), so a mixed run reports each task apart.

    Also the row spec of ``reasoning_gym/<task>``: ``{"env": "reasoning_gym/<task>", "index": 3}`` with optional
    ``config`` (the dataset's options; ``seed`` and ``size`` among them), ``answer_tag`` and ``format_coef``.
    """

    def __init__(
        self,
        renderer: Renderer,
        task: str,
        index: int,
        group_size: int,
        config: Mapping[str, Any] | None = None,
        answer_tag: str | None = None,
        format_coef: float = 0.1,
    ):
        config = dict(config or {})
        super().__init__(
            partial(ReasoningGymEnv, renderer, task, index, config, answer_tag, format_coef),
            group_size,
            dataset_name=PREFIX + task,
        )
        self.task, self.index, self.config = task, index, config
        self.answer_tag, self.format_coef = answer_tag, format_coef
        entry = procedural_dataset(task, config)[index % len(procedural_dataset(task, config))]
        source = entry.get("metadata", {}).get("source_dataset")
        self.source = source if isinstance(source, str) else task

    def logging_tags(self) -> list[str]:
        return [PREFIX + self.task] + ([PREFIX + self.source] if self.source != self.task else [])

    def to_row(self) -> dict[str, Any]:
        """This group's row spec (JSON-serializable)."""
        return {
            "env": PREFIX + self.task,
            "index": self.index,
            "config": self.config,
            "answer_tag": self.answer_tag,
            "format_coef": self.format_coef,
        }
