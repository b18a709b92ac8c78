"""``python -m trl_envs`` is the ``trl-envs`` command."""

import sys

from .cli.commands import main
from .cli.errors import bound_exit

status = main()
bound_exit("trl-envs", status)  # whatever would hold the process at exit, it ends within seconds
sys.exit(status)
