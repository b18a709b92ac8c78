"""The names of the offline tiny chat models (:mod:`trl_envs.tiny_model` builds them). Importing this module costs
nothing, so commands can name the models without importing the builder."""

MODEL_NAME = "tiny-chat-v1"
"""The small, fast model the tests use; bump the version when the recipe changes so old caches are not reused."""

DEMO_MODEL_NAME = "tiny-chat-v5"
"""The demo model: what the training scripts, ``trl-envs play``, ``trl-envs eval`` and ``trl-envs build-tiny-model``
use when no model is given. A larger model warm-started by :mod:`trl_envs.warm_start` so that GRPO visibly improves it
in a few minutes on a CPU."""

MODEL_NAMES = (MODEL_NAME, DEMO_MODEL_NAME)
