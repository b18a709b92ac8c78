"""Scripted text policies for env tests: a batched ``Sampler`` whose reply to a prompt is chosen by a function of the
prompt's text, encoded with the real tokenizer and closed with the end-of-turn token (like a well-behaved model)."""

from __future__ import annotations

import re
import threading

from trl_envs import TokensWithLogprobs


class TextSampler:
    """``respond(prompt_text) -> reply_text``; logs the batch size of every call."""

    def __init__(self, tokenizer, respond, end_of_turn: int):
        self.tokenizer, self.respond, self.end_of_turn = tokenizer, respond, end_of_turn
        self.batch_sizes: list[int] = []
        self._lock = threading.Lock()

    def sample(self, requests):
        with self._lock:
            self.batch_sizes.append(len(requests))
        out = []
        for r in requests:
            text = self.tokenizer.decode(r.prompt, skip_special_tokens=False)
            reply = self.respond(text)
            if isinstance(reply, BaseException):
                raise reply
            tokens = (self.tokenizer.encode(reply, add_special_tokens=False) + [self.end_of_turn])[: r.max_tokens]
            out.append(TokensWithLogprobs(tokens, [-0.5] * len(tokens), "stop"))
        return out


_ROW = re.compile(r"^([1-9XO])\|([1-9XO])\|([1-9XO])", re.M)


def last_board(prompt_text: str) -> list[str]:
    """The nine cells of the last board shown in a tic-tac-toe prompt."""
    rows = _ROW.findall(prompt_text)[-3:]
    return [c for row in rows for c in row]


def free_cells(prompt_text: str) -> list[int]:
    return [int(c) for c in last_board(prompt_text) if c.isdigit()]
