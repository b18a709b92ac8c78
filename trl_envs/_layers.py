"""The package's stages, in pipeline order: a module may import only from its own stage or an earlier one.

``tests/test_layering.py`` reads :data:`STAGES`, builds the import graph of ``trl_envs`` (module-level and
function-level imports, relative and absolute) and checks that no module imports from a later stage and that no
import circle exists, between modules nor between folders (each top-level package, or top-level module, of
``trl_envs`` taken as one node). docs/DESIGN.md ("House rules") explains the order.

A module belongs to the stage of the prefix that names it or a package above it (``trl_envs.errors.preflight`` is in
the stage of ``trl_envs.errors``); the entry ``"trl_envs"`` names the package's ``__init__`` only. A folder is in one
stage whole: no entry names a module inside another entry's folder. Imports within one stage are allowed (the circle
checks still apply). Finding code by name at run time (``importlib.import_module`` of a module named in a table, as
the registry does for the ecosystem adapters and the package does for its lazily loaded names) is how a lower stage
reaches a higher one.
"""

from __future__ import annotations

STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The env contract a user subclasses, and leaves that import nothing else of trl_envs: the tiny models' names,
    # the error vocabulary with the pre-load checks every stage and entry point shares (errors/), and whether a
    # terminal watches (terminal.py).
    ("core", ("trl_envs.core", "trl_envs._layers", "trl_envs.model_names", "trl_envs.errors", "trl_envs.terminal")),
    # Prompts -> sampled actions.
    ("samplers", ("trl_envs.samplers",)),
    # Episodes: the rollout engine, batching of sampler calls, evaluation.
    ("rollout", ("trl_envs.rollout",)),
    # Envs: the built-in envs and the adapters they are written with (Gymnasium, OpenEnv servers, agent programs,
    # turn-based games).
    (
        "envs",
        (
            "trl_envs.gym",
            "trl_envs.openenv",
            "trl_envs.agents",
            "trl_envs.multiplayer",
            "trl_envs.envs",
        ),
    ),
    # Envs by name and as dataset rows.
    ("registry", ("trl_envs.registry",)),
    # Name families and imported objects of other libraries: the registry finds these modules by name when such a
    # name is asked for (registry.names.PREFIXED_ENVS, registry.names.IMPORTED_OBJECT_ADAPTERS).
    (
        "ecosystem",
        (
            "trl_envs.tinker",
            "trl_envs.reasoning_gym",
            "trl_envs.textarena",
            "trl_envs.pettingzoo",
            "trl_envs.skyrl_gym",
            "trl_envs.verifiers",
        ),
    ),
    # Trajectories -> what is trained (training rows, preference pairs, the built-in preference dataset).
    ("training_data", ("trl_envs.training_data",)),
    # TRL trainers driven by envs.
    ("trainers", ("trl_envs.trainers",)),
    # After and around training: the Hub, the command line, run defaults, the shipped tiny models, the public API.
    (
        "hub / cli",
        (
            "trl_envs.hub",
            "trl_envs.cli",
            "trl_envs.run_defaults",
            "trl_envs.tiny_model",
            "trl_envs.__main__",
            "trl_envs",
        ),
    ),
)
"""``(stage name, module prefixes)`` in pipeline order."""


def stage_of(module: str) -> int:
    """The index in :data:`STAGES` of ``module`` (a dotted name inside ``trl_envs``): the stage of the longest prefix
    that names it or a package above it (the entry ``"trl_envs"`` names the package's ``__init__`` only). Raises
    ``KeyError`` for a module no stage names."""
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(STAGES):
        for prefix in prefixes:
            below = prefix != "trl_envs" and module.startswith(prefix + ".")  # the root names only itself
            if (module == prefix or below) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise KeyError(f"module {module!r} is in no stage of trl_envs._layers.STAGES: add its package there")
    return best
