"""A pairwise judge that asks a chat model which of two responses is better (a judge for
:mod:`trl_envs.core.judge`), its calls batched with the rollout's sampler calls."""

from __future__ import annotations

import asyncio
import re

from ..core.renderer import Renderer
from ..samplers.base import Sampler, SampleRequest
from .batching import current_batcher

_VERDICT = re.compile(r"\b(A|B|tie|Tie|TIE)\b")  # case-sensitive A/B: the article "a" is not a verdict

DEFAULT_JUDGE_INSTRUCTION = (
    "Compare two responses to the task below and say which is better. Reply with just A, "
    "B, or tie.\n\nTask: {task}\n\nResponse A: {a}\n\nResponse B: {b}"
)


class ModelJudge:
    """A judge that asks a chat model which of two responses is better.

    Every pair of a group goes to ``sampler`` in ONE batched call; inside a rollout batch, together with the pairs of
    every other group judged meanwhile (:func:`~trl_envs.rollout.batching.current_batcher`). The model's reply is
    read as ``A`` (1), ``B`` (-1) or ``tie`` (0); a reply with none of these counts as a tie and is counted in
    :attr:`num_unreadable`.

    Args:
        sampler: a batched :class:`~trl_envs.samplers.base.Sampler` over the judge model (e.g. ``HFSampler``).
        renderer: the judge model's renderer.
        task: the prompt the responses answer (shown to the judge).
        instruction: a format string with ``{task}``, ``{a}`` and ``{b}``.
        max_tokens: the judge's token budget per verdict.
    """

    def __init__(
        self,
        sampler: Sampler,
        renderer: Renderer,
        task: str,
        *,
        instruction: str = DEFAULT_JUDGE_INSTRUCTION,
        max_tokens: int = 8,
    ):
        self.sampler, self.renderer, self.task = sampler, renderer, task
        self.instruction, self.max_tokens = instruction, max_tokens
        self.num_unreadable = 0

    def prompt(self, a: str, b: str) -> list[int]:
        text = self.instruction.format(task=self.task, a=a, b=b)
        return self.renderer.build_generation_prompt([{"role": "user", "content": text}])

    async def judge_many(self, pairs: list[tuple[str, str]]) -> list[float]:
        requests = [
            SampleRequest(self.prompt(a, b), self.renderer.get_stop_sequences(), self.max_tokens) for a, b in pairs
        ]
        batcher = current_batcher()
        if batcher is not None:  # inside a rollout batch: one call with every group's pairs asked meanwhile
            outs = await asyncio.gather(
                *(batcher.sample(r.prompt, r.stop, r.max_tokens, sampler=self.sampler) for r in requests)
            )
        else:
            outs = await asyncio.to_thread(self.sampler.sample, requests)
        return [self.read_verdict(self.renderer.parse_response(o.tokens).message["content"]) for o in outs]

    def read_verdict(self, text: str) -> float:
        """``A`` → 1, ``B`` → -1, ``tie`` → 0 (the first of these words in ``text``; ``A``/``B`` in capitals);
        anything else → 0."""
        m = _VERDICT.search(text)
        if m is None:
            self.num_unreadable += 1
            return 0.0
        return {"a": 1.0, "b": -1.0, "tie": 0.0}[m.group(1).lower()]
