"""The names of the offline tiny chat models (they ship with the package: :mod:`trl_envs.tiny_model`). Importing this
module costs nothing, so commands can name the models without loading anything."""

MODEL_NAME = "tiny-chat-v1"
"""The small, fast model the tests use; bump the version when the recipe changes (scripts/tiny_models/)."""

DEMO_MODEL_NAME = "tiny-chat-v5"
"""The demo model: what the training scripts, ``trl-envs play``, ``trl-envs eval`` and ``trl-envs build-tiny-model``
use when no model is given. A larger model, warm-started (scripts/tiny_models/warm_start.py) so that GRPO visibly
improves it in a few minutes on a CPU."""

MODEL_NAMES = (MODEL_NAME, DEMO_MODEL_NAME)
