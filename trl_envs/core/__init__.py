"""The contract a user subclasses: env types, the renderer, problem / message envs, tools, judges."""
