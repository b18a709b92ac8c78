# Copyright the trl_envs authors. Apache-2.0.
"""Play an environment by hand: you type the model's answers (the same as ``trl-envs play``).

    python scripts/play.py                               # arithmetic
    python scripts/play.py --env guess_number
    printf '8\\n4\\n6\\n' | python scripts/play.py --env guess_number    # answers read from a pipe

See ``trl_envs/cli/play.py`` for what is shown and how your answer becomes the action.
"""

from trl_envs.cli.play import main

if __name__ == "__main__":
    main()
