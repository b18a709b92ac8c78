"""Trainers: EnvGRPOTrainer and EnvDPOTrainer, their configs, and the one seam to TRL's internals.

Importing this package first checks the installed TRL, transformers, torch and the rest against the ranges
pyproject declares (:mod:`trl_envs.errors.versions`): a version outside them is one line naming the package, the
version found, the range that works and the pip line, before anything of TRL's loads.
"""

from ..errors.versions import check_installed_versions

check_installed_versions()
