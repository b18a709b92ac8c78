"""Where a verifiers environment comes from: an id and its config (loaded once per process), or a ``vf.Env`` given
from Python. Its tasks, split into training tasks and held-out test tasks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .loading import VerifiersEnvError, env_config, load_env

DEFAULT_MAX_TASKS = 1000
"""Tasks drawn from a taskset that never ends (``INFINITE``) when ``max_tasks`` is not given."""


class VerifiersSource:
    """A verifiers environment: ``VerifiersSource("my-env", taskset={"num_tasks": 8})`` or ``VerifiersSource(env)``.

    Args:
        env: the environment's id (an importable environment module, ``owner/name@version`` as on the hub, or a
            taskset built into verifiers), or a loaded ``vf.Env``.
        taskset: the taskset's config fields (only with an id).
        env_config: the env-level config (only with an id): roles by name (``{"agent": {"runtime": {...}}}``),
            ``timeout``, ``id`` of a reusable env to pair the taskset with.
        test_taskset: taskset config fields that make the held-out split (e.g. ``{"split": "test"}``): the test
            tasks come from a second taskset with these fields over ``taskset``.
        num_test_tasks: hold out the last ``num_test_tasks`` tasks of the taskset (never trained on) as the test
            split.
        max_tasks: tasks taken from a taskset that never ends (default :data:`DEFAULT_MAX_TASKS`).

    The loaded ``vf.Env`` is not pickled: a copy in another process loads its own from the id.
    """

    def __init__(
        self,
        env: Any,
        *,
        taskset: Mapping[str, Any] | None = None,
        env_config: Mapping[str, Any] | None = None,
        test_taskset: Mapping[str, Any] | None = None,
        num_test_tasks: int = 0,
        max_tasks: int | None = None,
    ):
        if isinstance(env, str):
            self.env_id, self._env = env, None
            self.name = env
        else:
            import verifiers.v1 as vf

            if not isinstance(env, vf.Env):
                raise TypeError(f"VerifiersSource: expected an environment id or a vf.Env, got {type(env).__name__}")
            if taskset or env_config:
                raise ValueError("VerifiersSource: taskset and env_config go with an environment id, not a vf.Env")
            self.env_id, self._env = None, env
            self.name = env.config.env_id
        self.taskset, self.env_options = dict(taskset or {}), dict(env_config or {})
        self.test_taskset = None if test_taskset is None else dict(test_taskset)
        for option, value in (("num_test_tasks", num_test_tasks), ("max_tasks", max_tasks)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise VerifiersEnvError(f"verifiers env {self.name!r}: {option} must be an integer >= 0, got {value!r}")
        if self.test_taskset is not None and num_test_tasks:
            raise VerifiersEnvError(
                f"verifiers env {self.name!r}: give test_taskset or num_test_tasks for the test split, not both"
            )
        if self.test_taskset is not None and self._env is not None:
            raise VerifiersEnvError("VerifiersSource: test_taskset needs an environment id (it loads a second taskset)")
        self.num_test_tasks, self.max_tasks = num_test_tasks, max_tasks
        self._test_env = None

    def config(self, taskset: Mapping[str, Any] | None = None):
        """The env's ``vf.EnvConfig`` (validated), with ``taskset`` fields over its own."""
        return env_config(self.env_id, {**self.taskset, **(taskset or {})}, self.env_options)

    def env(self):
        """The loaded ``vf.Env`` (loaded on first use in each process)."""
        if self._env is None:
            self._env = load_env(self.config())
        return self._env

    def splits(self) -> tuple[list[Any], list[Any]]:
        """``(training tasks, test tasks)``; the test list is empty when the env has no held-out split."""
        train = self._tasks(self.env().taskset)
        if self.test_taskset is not None:
            if self._test_env is None:
                self._test_env = load_env(self.config(self.test_taskset))
            test = self._tasks(self._test_env.taskset)
            keys = {t.key for t in train}
            test = [t for t in test if t.key not in keys]
            if not test:
                raise VerifiersEnvError(
                    f"verifiers env {self.name!r}: the test taskset {self.test_taskset} has no task the training "
                    "taskset does not also have"
                )
            return train, test
        if self.num_test_tasks:
            if self.num_test_tasks >= len(train):
                raise VerifiersEnvError(
                    f"verifiers env {self.name!r}: num_test_tasks={self.num_test_tasks} leaves no training task "
                    f"(the taskset has {len(train)})"
                )
            return train[: -self.num_test_tasks], train[-self.num_test_tasks :]
        return train, []

    def _tasks(self, taskset: Any) -> list[Any]:
        if not taskset.bounded:
            taskset = taskset.take(self.max_tasks or DEFAULT_MAX_TASKS)
        elif self.max_tasks:
            taskset = taskset.take(self.max_tasks)
        tasks = list(taskset)
        if not tasks:
            raise VerifiersEnvError(f"verifiers env {self.name!r}: its taskset has no tasks")
        return tasks

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.env_id is not None:
            state["_env"] = state["_test_env"] = None
        return state
