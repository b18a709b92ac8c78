"""Play an env by hand: you type the model's answers (``trl-envs play ENV``, ``scripts/play.py``).

You see exactly what the model would see: the observation (the token context, shown as text with the chat
template's special tokens), then you answer. Your text is tokenized and ended with the end-of-turn token, as if the
model had sampled it, and handed to the env's ``step``. After the episode you get every step's reward, its metrics
and the total. The env runs through the same rollout code as training (``do_group_rollout``, a group of one).
Answers can come from a pipe (``printf '8\\n4\\n' | trl-envs play guess_number``); they are then echoed, and the
end of the input ends the episode there: the report shows the turns played and the reward so far (exit status 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import threading

from ..core.renderer import Renderer
from ..core.types import (
    EnvGroupBuilder,
    RLDataset,
    RLDatasetBuilder,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)
from ..rollout.engine import RolloutBudget, do_group_rollout
from ..rollout.event_loop import run_sync

PLAY_LOST = "the episode was abandoned; play saves nothing, so nothing was lost"
"""What Ctrl-C in ``play`` loses, as its one line says."""


class EndOfInput(Exception):
    """The answers ran out (end of a piped input, or Ctrl-D) before the episode ended."""


class HumanPolicy:
    """A policy whose actions are typed on stdin (``await policy(prompt, stop, max_tokens)``, like the sampler).

    Shows the part of each observation not shown yet, reads one line, and returns its tokens followed by the
    renderer's end-of-turn token (or cut at ``max_tokens`` with finish reason ``"length"``, as the sampler would).
    End of input raises :class:`EndOfInput` (the episode ends there; :func:`play` reports the turns played).
    """

    def __init__(self, tokenizer, renderer: Renderer, show_tokens: bool = False):
        self.tokenizer, self.renderer, self.show_tokens = tokenizer, renderer, show_tokens
        self.seen = 0  # tokens of the context already shown
        self.echo = not sys.stdin.isatty()  # piped answers are echoed so the transcript reads like a dialogue

    async def __call__(self, prompt: list[int], stop, max_tokens: int) -> TokensWithLogprobs:
        new = prompt[self.seen :]
        print(self.tokenizer.decode(new, skip_special_tokens=False), end="")
        if self.show_tokens:
            print(f"\n    [observation: {len(prompt)} tokens, {len(new)} new: {new}]")
        try:
            text = input("" if not self.show_tokens else "your answer> ")
        except EOFError:
            raise EndOfInput from None
        if self.echo:
            print(text)
        tokens = self.tokenizer.encode(text, add_special_tokens=False)
        if len(tokens) < max_tokens:  # ended by the end-of-turn token, as a model ends its turn
            tokens, finish = tokens + [self.renderer.end_of_turn_token_id], "stop"
        else:  # cut by the token budget, as the sampler would
            tokens, finish = tokens[:max_tokens], "length"
        print(self.tokenizer.decode(tokens[len(tokens) - (finish == "stop") :], skip_special_tokens=False), end="")
        if self.show_tokens:
            print(f"\n    [action: {tokens}]", end="")
        self.seen = len(prompt) + len(tokens)
        return TokensWithLogprobs(tokens, None, finish)


def report(group: TrajectoryGroup) -> None:
    """Print every step's reward and metrics, the group reward (if any) and the total of a one-episode group."""
    (trajectory,) = group.trajectories
    if trajectory.stop_reason == "end_of_input":
        print(f"\n--- end of input: the episode stops after {len(trajectory.transitions)} turns, unfinished")
    else:
        print("\n--- episode over:", trajectory.stop_reason)
    for turn, tr in enumerate(trajectory.transitions):
        logs = ", ".join(f"{k}={v!r}" for k, v in tr.logs.items())
        print(f"turn {turn}: reward {tr.reward:+.2f}  metrics {tr.metrics}" + (f"  ({logs})" if logs else ""))
    if group.group_rewards[0]:
        print(f"group reward {group.group_rewards[0]:+.2f}  {group.group_metrics[0]}")
    print(f"total reward {group.get_total_rewards()[0]:+.2f}")


def add_arguments(parser: argparse.ArgumentParser, *, env_positional: bool) -> None:
    """The options of ``play`` (``env_positional``: ``play ENV`` as on ``trl-envs``, else ``--env ENV``)."""
    from ..registry.names import list_envs

    env_help = (
        f"env to play: {', '.join(list_envs(prefixed=False))}, reasoning_gym/<task>, textarena/<game>, "
        "pettingzoo/<family>/<game> or 'package.module:factory' (default: arithmetic)"
    )
    if env_positional:
        parser.add_argument("env", nargs="?", default="arithmetic", help=env_help)
    else:
        parser.add_argument("--env", default="arithmetic", help=env_help)
    parser.add_argument("--env_kwargs", type=json_object, default=None, help="env dataset options, a JSON object")
    parser.add_argument(
        "--model_name_or_path",
        default=None,
        help="whose tokenizer and chat template to use (default: the demo model, tiny-chat-v5)",
    )
    parser.add_argument("--seed", type=int, default=0, help="dataset seed")
    parser.add_argument("--index", type=int, default=0, help="which problem of the training set to play")
    parser.add_argument("--max_tokens", type=int, default=32, help="token budget of one answer")
    parser.add_argument("--max_turns", type=int, default=16)
    parser.add_argument("--show_tokens", action="store_true", help="also print the token ids")


def json_object(text: str) -> dict:
    """The ``--env_kwargs`` argument type: a JSON object, else an error naming the option (argparse adds it)."""
    from ..registry.env_kwargs import parse_env_kwargs

    try:
        return parse_env_kwargs(text, option="")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix(": ")) from None


def play(args: argparse.Namespace) -> TrajectoryGroup:
    """Play one episode of ``args.env`` (problem ``args.index`` of its training split) and print the report."""
    from transformers import AutoTokenizer

    from ..model_names import DEMO_MODEL_NAME
    from ..registry.names import make_env_dataset
    from ..tiny_model import tiny_model_path

    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path or tiny_model_path(DEMO_MODEL_NAME))
    renderer = Renderer(tokenizer)
    envs = make_env_dataset(
        args.env,
        renderer,
        group_size=1,
        groups_per_batch=1,
        num_batches=args.index + 1,
        defaults={"seed": args.seed},
        **(args.env_kwargs or {}),
    )
    train = run_sync(envs)[0] if isinstance(envs, RLDatasetBuilder) else envs
    builder = _problem(train, args.index, args.env)
    budget = RolloutBudget(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens)
    played: list[Transition] = []
    try:
        with _interrupt_while_typing():
            group = asyncio.run(
                do_group_rollout(
                    _Recording(builder, played), HumanPolicy(tokenizer, renderer, args.show_tokens), budget
                )
            )
    except Exception as e:  # noqa: BLE001 - the end of the input, however the rollout wrapped it, ends the episode
        if not _caused_by(e, EndOfInput):
            raise
        group = TrajectoryGroup([Trajectory(played, [], "end_of_input")], [0.0], [{}], [args.env])
    report(group)
    return group


def _caused_by(error: BaseException | None, kind: type[BaseException]) -> bool:
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


class _Recording(EnvGroupBuilder):
    """``builder``'s group, whose envs' steps are also appended to ``played`` (the report of an episode the input
    ended before the env did)."""

    def __init__(self, builder: EnvGroupBuilder, played: list[Transition]):
        self.builder, self.played = builder, played

    async def make_envs(self):
        envs = await self.builder.make_envs()
        for env in envs:
            step = env.step

            async def recorded(action, *a, _step=step, **kw):
                result = await _step(action, *a, **kw)
                self.played.append(
                    Transition(
                        [],
                        TokensWithLogprobs(list(action), None),
                        float(result.reward),
                        result.episode_done,
                        dict(result.metrics),
                        dict(result.logs),
                    )
                )
                return result

            env.step = recorded
        return envs

    async def compute_group_rewards(self, trajectories, envs):
        return await self.builder.compute_group_rewards(trajectories, envs)

    def coupled_envs(self):
        return self.builder.coupled_envs()

    async def cleanup(self) -> None:
        await self.builder.cleanup()

    def logging_tags(self):
        return self.builder.logging_tags()

    def __getattr__(self, name):
        return getattr(self.builder, name)


@contextlib.contextmanager
def _interrupt_while_typing():
    """Ctrl-C stops the episode at once, even while ``input()`` waits. (asyncio's own handler would only cancel the
    task, which the blocked ``input()`` never sees: the first Ctrl-C would be ignored.)"""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _problem(dataset: RLDataset, index: int, env: str):
    seen = 0
    for i in range(len(dataset)):
        batch = dataset.get_batch(i)
        if index < seen + len(batch):
            return batch[index - seen]
        seen += len(batch)
    raise ValueError(f"--index {index}: env {env!r} has only {seen} problems in its training split")


def main(argv: list[str] | None = None) -> None:
    """``python scripts/play.py [--env ENV] ...``."""
    parser = argparse.ArgumentParser(description="Play an env by hand: you type the model's answers.")
    add_arguments(parser, env_positional=False)
    args = parser.parse_args(argv)
    from .errors import run_command

    raise SystemExit(run_command("play", lambda: play(args) and 0, lost=PLAY_LOST))
