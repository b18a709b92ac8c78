"""``python -m trl_envs`` is the ``trl-envs`` command."""

import sys

from .cli.commands import main

sys.exit(main())
