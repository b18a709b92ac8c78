"""``skyrl_gym/<env id>`` names (e.g. ``skyrl_gym/gsm8k``) as env kinds of the registry.

By name, ``--env_kwargs`` names the SkyRL-format dataset to play: ``data_files`` (parquet / JSON lines / CSV files,
as SkyRL's example scripts write them), optionally ``test_data_files`` (else the last ``num_test_batches *
batch_size`` rows are held out of training for the test split), and ``env_config`` (the env's SkyRL config section).
From Python, ``rows`` takes the rows themselves. As rows of an env dataset: ``{"env": "skyrl_gym/gsm8k", "prompt":
[...], "reward_spec": {"method": "rule", "ground_truth": "42"}}`` (one group per row).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..core.renderer import Renderer
from ..core.types import EnvGroupBuilder, RLDataset
from ..envs import BuiltinDataset, BuiltinDatasetBuilder
from ..registry.names import EnvKind, unknown_prefixed_name
from .env import PREFIX, SkyRLGymGroupBuilder, check_row, env_ids

LISTED: dict[str, str] = {
    "gsm8k": "SkyRL-Gym gsm8k: grade-school math, one answer ('#### N'), scored against reward_spec.ground_truth",
    "gsm8k_multi_turn": "SkyRL-Gym gsm8k_multi_turn: gsm8k over up to max_turns tries, per-turn rewards",
    "aime": "SkyRL-Gym aime: competition math, scored against reward_model.ground_truth",
}
"""The ids ``trl-envs list`` lists: they play from dataset rows alone. The others (``text2sql``, ``search``,
``searchcode``, ``lcb``) also resolve by name; they need their databases, a retrieval server or a code sandbox."""


class SkyRLGymDataset(BuiltinDataset):
    """Batches of groups over ``rows`` (one row per group), in an order fixed by ``order_seed``; cycles when the run
    outlasts them."""

    def __init__(
        self,
        renderer: Renderer,
        batch_size: int,
        group_size: int,
        num_batches: int,
        env_id: str,
        rows: Sequence[Mapping[str, Any]],
        env_config: Mapping[str, Any],
        order_seed: int,
    ):
        super().__init__(renderer, batch_size, group_size, num_batches)
        self.env_id, self.rows, self.env_config = env_id, list(rows), dict(env_config)
        self.order = list(range(len(self.rows)))
        random.Random(f"{PREFIX}{env_id}/{order_seed}").shuffle(self.order)

    def make_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        start = index * self.batch_size
        return [
            SkyRLGymGroupBuilder(
                self.renderer,
                self.env_id,
                self.rows[self.order[(start + j) % len(self.order)]],
                self.group_size,
                self.env_config,
            )
            for j in range(self.batch_size)
        ]


@dataclass
class SkyRLGymDatasetBuilder(BuiltinDatasetBuilder):
    """A SkyRL-Gym env on the rows of a SkyRL-format dataset (see the module docstring)."""

    env_name: ClassVar[str] = "skyrl_gym"

    data_files: str | list[str] | None = None
    test_data_files: str | list[str] | None = None
    rows: list[dict[str, Any]] | None = None
    env_config: dict[str, Any] = field(default_factory=dict)
    env_id: str = field(default="gsm8k", kw_only=True)

    def check_options(self) -> None:
        self.env_name = PREFIX + self.env_id
        super().check_options()
        if (self.rows is None) == (self.data_files is None):
            raise ValueError(
                f"env {self.env_name!r}: give the SkyRL-format dataset to play: option 'data_files' (parquet / "
                "jsonl files with 'prompt' and the env's fields, e.g. 'reward_spec'), or 'rows' from Python"
            )
        if not isinstance(self.env_config, dict):
            raise ValueError(
                f"env {self.env_name!r}: option 'env_config' must be a JSON object, got {self.env_config!r}"
            )
        self._train = self._load(self.data_files, "data_files") if self.rows is None else list(self.rows)
        self._test = self._load(self.test_data_files, "test_data_files") if self.test_data_files else None
        held = self.num_test_batches * self.batch_size if self._test is None else 0
        if len(self._train) <= held:
            raise ValueError(
                f"env {self.env_name!r}: {len(self._train)} rows, and the test split holds out the last {held} "
                "(num_test_batches x batch_size); give more rows or option 'test_data_files'"
            )

    def _load(self, files: str | list[str] | None, option: str) -> list[dict[str, Any]]:
        from datasets import load_dataset

        from ..registry.env_datasets import data_file_builder

        listed = [files] if isinstance(files, str) else list(files or [])
        try:
            data = load_dataset(
                data_file_builder(listed, f"env {self.env_name!r}: option {option!r}"), data_files=listed
            )
        except FileNotFoundError as e:
            raise FileNotFoundError(f"env {self.env_name!r}: option {option!r}: {e}") from None
        rows = [dict(r) for r in data["train"]]
        for i, row in enumerate(rows):
            check_row(self.env_name, row, f"{option} row {i}")
        return rows

    def held_out_split(self) -> tuple[Sequence, Sequence]:
        if self._test is not None:
            return self._train, self._test
        held = self.num_test_batches * self.batch_size
        return self._train[:-held], self._train[-held:]

    def dataset(self, num_batches: int, seed: int, rows: Sequence[Mapping[str, Any]] = ()) -> RLDataset:
        return SkyRLGymDataset(
            self.renderer, self.batch_size, self.group_size, num_batches, self.env_id, rows, self.env_config, seed
        )


def env_kind(name: str) -> EnvKind:
    """The kind of ``skyrl_gym/<env id>``; :class:`~trl_envs.registry.names.UnknownEnvError` with the closest ids for
    one SkyRL-Gym does not register."""
    env_id = name[len(PREFIX) :]
    ids = env_ids()
    if env_id not in ids:
        raise unknown_prefixed_name(name, "skyrl_gym", [PREFIX + i for i in ids])

    def factory(renderer: Renderer, **options: Any) -> SkyRLGymDatasetBuilder:
        return SkyRLGymDatasetBuilder(renderer=renderer, env_id=env_id, **options)

    def from_row(
        renderer: Renderer,
        group_size: int,
        *,
        prompt: list,
        reward_spec: dict | None = None,
        reward_model: dict | None = None,
        extra_info: dict | None = None,
        data_source: str | None = None,
        env_class: str | None = None,
        max_turns: int | None = None,
    ) -> SkyRLGymGroupBuilder:
        """One group on one row of SkyRL's dataset format."""
        fields = {
            "prompt": prompt,
            "reward_spec": reward_spec,
            "reward_model": reward_model,
            "extra_info": extra_info,
            "data_source": data_source,
            "env_class": env_class,
            "max_turns": max_turns,
        }
        row = {k: v for k, v in fields.items() if v is not None}
        row.setdefault("extra_info", {})
        check_row(name, row, "row")
        return SkyRLGymGroupBuilder(renderer, env_id, row, group_size)

    description = LISTED.get(env_id, f"SkyRL-Gym {env_id}")
    factory.__doc__ = description
    return EnvKind(name, description, factory, from_row, "skyrl_gym")


def env_names() -> dict[str, str]:
    """The :data:`LISTED` ids SkyRL-Gym registers, as ``skyrl_gym/<id>``."""
    ids = set(env_ids())
    return {PREFIX + i: d for i, d in LISTED.items() if i in ids}
