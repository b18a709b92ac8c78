"""The ``trl-envs`` command line."""
