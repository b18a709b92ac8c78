"""Chat messages <-> tokens, over any Hugging Face tokenizer with a chat template, token-exact across turns.

The multi-turn rule (docs/DESIGN.md, "token-exact multi-turn"): the next observation is the previous observation,
then the action tokens exactly as sampled, then the rendered tokens of the *new* messages only. History is never
re-rendered or re-tokenized, so what the trainer scores is exactly what the model sampled.

Messages that cannot fit are not tokenized: while :data:`observation_token_limit` holds a limit (the rollout engine
sets it to the episode's context budget), messages whose text is longer than ``limit`` times the tokenizer's longest
token (:attr:`Renderer.max_token_chars`: no token covers more characters, so they need more than ``limit`` tokens)
raise :class:`ObservationOverBudgetError` at once -- tokenizing a 10 MB observation takes tens of seconds.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from .types import EnvContractError

Message: TypeAlias = dict[str, Any]
"""A chat message: ``{"role": ..., "content": ...}`` (plus ``tool_calls`` etc. where the template knows them)."""

ResponseEnd: TypeAlias = Literal["stop", "eos", "malformed"]

observation_token_limit: ContextVar[int | None] = ContextVar("observation_token_limit", default=None)
"""The most tokens an observation may have in the running episode (set by the rollout engine to
``RolloutBudget.max_context_tokens``); ``None``: no limit known."""


class ObservationOverBudgetError(ValueError):
    """Messages whose text alone needs more tokens than :data:`observation_token_limit` (raised before tokenizing).

    Attributes:
        chars: characters of text in the messages; ``min_tokens``: the fewest tokens they can take; ``limit``: the
            budget.
    """

    def __init__(self, chars: int, min_tokens: int, limit: int, longest: int):
        self.chars, self.min_tokens, self.limit = chars, min_tokens, limit
        super().__init__(
            f"holds {chars:,} characters of message text: at least {min_tokens:,} tokens (no token of the tokenizer "
            f"is longer than {longest} characters), over the context budget of {limit:,} tokens "
            "(max_context_tokens; a trainer defaults it to the model's maximum positions); it was not tokenized"
        )


_PROBE_USER = {"role": "user", "content": "Hi"}
_PROBE_ASSISTANT = {"role": "assistant", "content": "Hello"}


@dataclass
class ParsedResponse:
    """An assistant message parsed from sampled tokens.

    Unpacks like the Tinker cookbook's ``parse_response`` result: ``message, ok = renderer.parse_response(tokens)``.

    Attributes:
        message: ``{"role": "assistant", "content": text}``, special tokens removed.
        end: ``"stop"`` when the tokens end with the end-of-turn token, ``"eos"`` when they end with the
            tokenizer's EOS (where that differs), ``"malformed"`` when they end with neither (cut by a budget).
    """

    message: Message
    end: ResponseEnd

    @property
    def ok(self) -> bool:
        """Whether the response is well formed: it ended on the end-of-turn token or EOS."""
        return self.end != "malformed"

    def __iter__(self):
        """``(message, ok)``, so that ``message, ok = renderer.parse_response(tokens)`` works."""
        return iter((self.message, self.ok))


class Renderer:
    """Renders chat messages to token ids with the tokenizer's chat template, and parses responses back.

    Args:
        tokenizer: a ``transformers`` tokenizer with a chat template.
        chat_template_kwargs: extra keyword arguments for ``apply_chat_template`` (e.g. ``enable_thinking``).

    Raises:
        ValueError: the tokenizer has no chat template, or its template does not render a conversation as a
            prefix of the same conversation with one more message (then token-exact extension is impossible).
    """

    def __init__(self, tokenizer, *, chat_template_kwargs: dict[str, Any] | None = None):
        name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__) or type(tokenizer).__name__
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"Renderer: tokenizer {name!r} has no chat template. Use an instruct/chat model, or set "
                "tokenizer.chat_template (e.g. a ChatML template) before building the Renderer."
            )
        self.tokenizer = tokenizer
        self.name = name
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._end_of_turn = self._find_end_of_turn_token()
        self.eos_token_id = tokenizer.eos_token_id
        stops = [self._end_of_turn]
        if self.eos_token_id is not None and self.eos_token_id not in stops:
            stops.append(self.eos_token_id)
        self._stop_ids = stops
        self._render_cache: dict[tuple[Any, bool], tuple[int, ...]] = {}
        self._max_token_chars: int | None = None
        self._probe_prefix = self._apply([_PROBE_USER, _PROBE_ASSISTANT], add_generation_prompt=False)
        # The tokens the template puts after an assistant turn's end-of-turn token and before the next message
        # (e.g. "\n" for ChatML) come from the suffix rendering; see `extend_observation`.

    # -- rendering ---------------------------------------------------------------------------------------------

    def _apply(self, messages: list[Message], add_generation_prompt: bool) -> list[int]:
        out = self.tokenizer.apply_chat_template(
            messages,
            add_generation_prompt=add_generation_prompt,
            tokenize=True,
            return_dict=False,
            **self.chat_template_kwargs,
        )
        if isinstance(out, dict) or hasattr(out, "input_ids"):
            out = out["input_ids"]
        return list(out)

    @property
    def max_token_chars(self) -> int:
        """The most characters one token of the tokenizer stands for (its longest vocabulary entry, at least 1)."""
        if self._max_token_chars is None:
            self._max_token_chars = max(1, max((len(t) for t in self.tokenizer.get_vocab()), default=1))
        return self._max_token_chars

    def _check_fits(self, messages: list[Message]) -> None:
        limit = observation_token_limit.get()
        if limit is None:
            return
        chars = _text_chars(messages)
        if chars > limit * self.max_token_chars:
            raise ObservationOverBudgetError(chars, -(-chars // self.max_token_chars), limit, self.max_token_chars)

    def _apply_cached(self, messages: list[Message], add_generation_prompt: bool) -> list[int]:
        """``_apply`` memoized on the messages' JSON: envs render the same few conversations and replies over and
        over (every env of a group, every "Higher."), and every chat-template render is event-loop time. Messages that
        are not JSON-serializable (images, ...) are rendered every time. Templates that print the current date keep the
        date of their first render for the life of the Renderer."""
        self._check_fits(messages)
        key = _plain_key(messages)  # text-only messages: a tuple, several times cheaper than their JSON
        if key is None:
            try:
                key = json.dumps(messages, sort_keys=True)
            except (TypeError, ValueError):
                return self._apply(messages, add_generation_prompt)
        key = (key, add_generation_prompt)
        ids = self._render_cache.get(key)
        if ids is None:
            if len(self._render_cache) >= 4096:
                self._render_cache.clear()
            ids = self._render_cache[key] = tuple(self._apply(messages, add_generation_prompt))
        return list(ids)

    def build_generation_prompt(self, messages: list[Message]) -> list[int]:
        """Token ids of ``messages`` followed by the template's assistant generation prompt."""
        if not messages:
            raise ValueError("Renderer.build_generation_prompt: no messages given")
        return self._apply_cached(messages, add_generation_prompt=True)

    def get_stop_sequences(self) -> list[int]:
        """Stop token ids for sampling an assistant turn: the end-of-turn token (and EOS where it differs)."""
        return list(self._stop_ids)

    @property
    def end_of_turn_token_id(self) -> int:
        return self._end_of_turn

    def parse_response(self, tokens: list[int]) -> ParsedResponse:
        """Parse sampled ``tokens`` into an assistant message and say how the response ended."""
        if tokens and tokens[-1] == self._end_of_turn:
            end: ResponseEnd = "stop"
        elif tokens and tokens[-1] in self._stop_ids:
            end = "eos"
        else:
            end = "malformed"
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return ParsedResponse(message={"role": "assistant", "content": text.strip()}, end=end)

    def extend_observation(self, observation: list[int], action: list[int], new_messages: list[Message]) -> list[int]:
        """The next observation: ``observation + action + rendered(new_messages) + generation prompt``.

        Nothing before ``new_messages`` is re-tokenized. If ``action`` does not end with the end-of-turn token
        (the model was cut off by a token budget), the end-of-turn token is inserted as an env token first, so
        the context stays a well-formed conversation.
        """
        if not new_messages:
            raise ValueError("Renderer.extend_observation: no new messages to append")
        closing = [] if action and action[-1] in self._stop_ids else [self._end_of_turn]
        return list(observation) + list(action) + closing + self.render_suffix(new_messages)

    def render_suffix(self, new_messages: list[Message]) -> list[int]:
        """Tokens the template writes after an assistant turn's end-of-turn token for ``new_messages``, up to and
        including the next assistant generation prompt."""
        probe = [_PROBE_USER, _PROBE_ASSISTANT]
        prefix = self._probe_prefix
        full = self._apply_cached(probe + list(new_messages), add_generation_prompt=True)
        cut = _last_index(prefix, self._end_of_turn) + 1
        if full[:cut] != prefix[:cut]:
            raise EnvContractError(
                f"Renderer: the chat template of {self.name!r} renders a conversation differently once a message "
                "is appended, so observations cannot be extended token-exactly. Use per-turn training rows for "
                "this template."
            )
        return full[cut:]

    # -- helpers -----------------------------------------------------------------------------------------------

    def _find_end_of_turn_token(self) -> int:
        """The special token the template writes right after an assistant message's content."""
        ids = self._apply([_PROBE_USER, _PROBE_ASSISTANT], add_generation_prompt=False)
        content_ids = self.tokenizer.encode(_PROBE_ASSISTANT["content"], add_special_tokens=False)
        start = _find_sublist(ids, content_ids)
        special = set(self.tokenizer.all_special_ids)
        # Chat tokens are often added special tokens outside the special-tokens map (e.g. <|im_end|> when EOS is
        # <|endoftext|>); all_special_ids misses them, and falling back to EOS would pick the wrong end of turn.
        added = getattr(self.tokenizer, "added_tokens_decoder", None) or {}
        special |= {i for i, tok in added.items() if getattr(tok, "special", False)}
        if start is not None:
            for tok in ids[start + len(content_ids) :]:
                if tok in special:
                    return tok
        if self.tokenizer.eos_token_id is not None:
            return self.tokenizer.eos_token_id
        raise ValueError(
            f"Renderer: cannot find the end-of-turn token of {self.name!r}'s chat template, and the tokenizer has "
            "no EOS token."
        )


def _text_chars(value: Any) -> int:
    """Characters of every string in ``value`` (messages: contents, text parts, tool calls)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_text_chars(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_text_chars(v) for v in value)
    return 0


def _plain_key(messages: list[Message]) -> tuple | None:
    """A cache key for messages that are dicts of strings only (``None`` for anything else): their sorted items.
    Strings compare exactly, so two such conversations share a key exactly when their JSON would be equal."""
    key = []
    for m in messages:
        if type(m) is not dict:
            return None
        items = sorted(m.items())
        for k, v in items:
            if type(k) is not str or type(v) is not str:
                return None
        key.append(tuple(items))
    return tuple(key)


def _last_index(seq: list[int], value: int) -> int:
    for i in range(len(seq) - 1, -1, -1):
        if seq[i] == value:
            return i
    raise ValueError(f"Renderer: end-of-turn token {value} not found in the rendered probe conversation")


def _find_sublist(seq: list[int], sub: list[int]) -> int | None:
    n = len(sub)
    for i in range(len(seq) - n, -1, -1):
        if seq[i : i + n] == sub:
            return i
    return None
