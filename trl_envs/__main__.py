"""``python -m trl_envs`` is the ``trl-envs`` command."""

import sys

from .cli import main

sys.exit(main())
