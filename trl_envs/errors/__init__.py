"""What a mistake or a stopped run is called, and the checks that catch mistakes before a model loads.

Every stage may use this package (it is in the core stage and imports nothing else of trl_envs):

* :mod:`~trl_envs.errors.types`: :class:`~trl_envs.errors.types.UsageError` (an input mistake),
  :class:`~trl_envs.errors.types.RunFailed` (a run that cannot go on), and which errors are plain input mistakes;
* :mod:`~trl_envs.errors.messages`: values and messages shortened to a readable length;
* :mod:`~trl_envs.errors.disk_full`: telling a full disk from other errors, and the line that names it;
* :mod:`~trl_envs.errors.preflight`: the checks the scripts and commands run before loading a model;
* :mod:`~trl_envs.errors.unknown_args`: misspelled flags and ``--config`` keys, with a did-you-mean.

How a command ends on these errors (exit statuses, signals, the bounded exit) is :mod:`trl_envs.cli.errors`.
"""
