"""The tinker-cookbook envs the tests train, built offline for the tiny model (tests import this module only after
``pytest.importorskip("tinker_cookbook")``).

* ``arithmetic``: ``recipes/math_rl/arithmetic_env.ArithmeticDatasetBuilder``, exactly as the cookbook builds it.
* ``guess_number``: ``recipes/multiplayer_rl/guess_number/env.GuessNumberDatasetBuilder``, exactly as the cookbook
  builds it.
* ``twenty_questions``: ``recipes/multiplayer_rl/twenty_questions/env.TwentyQuestionsDataset``. Its dataset builder
  opens a Tinker service connection for the answerer, so the dataset is built directly, with an offline answerer:
  a :class:`~trl_envs.tinker.SamplerMessageCompleter` over a scripted yes/no policy.

The tiny model was warm-started to answer bare numbers, so it never writes the cookbook's ``Guess: <n>`` format:
on-policy, every guess_number / twenty_questions episode gets the same reward and GRPO/DPO have nothing to learn
from. :func:`scripted_player` is a stochastic scripted player (half of its replies use the format) that gives
those envs' rewards a spread; the trainers then train the tiny model on its episodes.
"""

from __future__ import annotations

import random
import re

from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticDatasetBuilder
from tinker_cookbook.recipes.multiplayer_rl.guess_number.env import GuessNumberDatasetBuilder
from tinker_cookbook.recipes.multiplayer_rl.twenty_questions.env import TwentyQuestionsDataset
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.tokenizer_utils import get_tokenizer
from transformers import AutoTokenizer

from trl_envs import Renderer
from trl_envs.samplers.text_policy import TextPolicySampler
from trl_envs.tinker import SamplerMessageCompleter

RENDERER_NAME = "qwen3_instruct"  # ChatML, like the tiny model's template

COOKBOOK_ENVS = {
    # The tiny model rarely sums operands up to 100 right; a 2-token budget cuts its 2-digit answers before the
    # end-of-turn token (the cookbook's format penalty, -0.1) and lets 1-digit ones end (0.0): rewards spread.
    "arithmetic": {
        "metrics": ["env/all/reward/total", "env/problems/correct", "env/problems/format"],
        "scripted": False,
        "max_tokens": 2,
    },
    "guess_number": {"metrics": ["env/all/reward/total", "env/all/turns"], "scripted": True, "max_tokens": 8},
    "twenty_questions": {"metrics": ["env/all/reward/total", "env/all/turns"], "scripted": True, "max_tokens": 8},
}
"""Per env: the env metrics its training logs must show, whether the tests play it with :func:`scripted_player`,
and the token budget of one action."""

SECRET_WORDS = ["apple", "river", "chair", "cloud", "lamp", "stone", "bread", "horse"]


def make_cookbook_builder(env: str, model_path: str, *, batch_size: int, group_size: int):
    """The cookbook's builder (or dataset) of ``env`` with ``batch_size`` groups of ``group_size`` envs a batch."""
    if env == "arithmetic":
        return ArithmeticDatasetBuilder(
            batch_size=batch_size,
            model_name_for_tokenizer=model_path,
            renderer_name=RENDERER_NAME,
            n_batches=3,
            group_size=group_size,
            include_fewshot=False,
        )
    if env == "guess_number":
        return GuessNumberDatasetBuilder(
            batch_size=batch_size, renderer_name=RENDERER_NAME, train_group_size=group_size, model_name=model_path
        )
    if env == "twenty_questions":
        renderer = get_renderer(RENDERER_NAME, get_tokenizer(model_path))
        return TwentyQuestionsDataset(
            answerer=scripted_answerer(model_path),
            answers=SECRET_WORDS * 2,
            renderer=renderer,
            batch_size=batch_size,
            group_size=group_size,
        )
    raise KeyError(env)


def scripted_answerer(model_path: str) -> SamplerMessageCompleter:
    """The twenty-questions answerer: "yes" when the secret word (from its system prompt) is in the question."""

    def answer(prompt_text: str) -> str:
        secret = re.search(r"Your secret word is (\w+)", prompt_text).group(1)
        question = prompt_text.rsplit("<|im_start|>user", 1)[-1]
        return "yes" if secret.lower() in question.lower() else "no"

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    sampler = TextPolicySampler(Renderer(tokenizer), answer)
    return SamplerMessageCompleter(sampler, get_renderer(RENDERER_NAME, get_tokenizer(model_path)), max_tokens=5)


def scripted_player(model_path: str, seed: int = 0) -> TextPolicySampler:
    """Half of the replies in the cookbook's ``Guess: <x>`` format (a number, or a secret word), half without."""
    rng = random.Random(seed)

    def play(prompt_text: str) -> str:
        words = "20 questions" in prompt_text
        guess = rng.choice(SECRET_WORDS) if words else str(rng.randrange(1024))
        return f"Guess: {guess}" if rng.random() < 0.5 else (f"Is it a {guess}?" if words else guess)

    return TextPolicySampler(Renderer(AutoTokenizer.from_pretrained(model_path)), play)
