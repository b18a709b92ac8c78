"""Single-turn problems: one question, one answer, a reward for format and correctness."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from .renderer import Message, Renderer
from .types import Action, Env, EnvGroupBuilder, Observation, StepResult, StopCondition


class ProblemEnv(Env):
    """A single-turn problem. Subclasses say what the question is and how to check an answer.

    Reward: ``format_coef * (format_ok - 1) + answer_ok``. With ``format_coef=0.1``: 1.0 for a well-formed right
    answer, 0.9 for a badly formed right one, 0.0 for a well-formed wrong one, -0.1 for a badly formed wrong one.
    A response counts as well formed when it ended on the end-of-turn token and :meth:`check_format` accepts it.
    Unparsable output is never an error: it just earns the format penalty.

    Args:
        renderer: renders the question and parses the answer.
        convo_prefix: messages placed before the question (system prompt, few-shot examples).
        format_coef: weight of the format penalty.
    """

    def __init__(self, renderer: Renderer, convo_prefix: list[Message] | None = None, format_coef: float = 0.1):
        self.renderer = renderer
        self.convo_prefix = list(convo_prefix or [])
        self.format_coef = format_coef

    @abstractmethod
    def get_question(self) -> str:
        """The user message text."""

    @abstractmethod
    def check_answer(self, sample_str: str) -> bool:
        """Whether the response text answers the question correctly."""

    @abstractmethod
    def check_format(self, sample_str: str) -> bool:
        """Whether the response text has the expected form."""

    @abstractmethod
    def get_reference_answer(self) -> str:
        """A correct answer, for logs and for warm-start data."""

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        messages = self.convo_prefix + [{"role": "user", "content": self.get_question()}]
        return self.renderer.build_generation_prompt(messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: dict[str, Any] | None = None) -> StepResult:
        parsed = self.renderer.parse_response(action)
        content = parsed.message["content"]
        format_ok = parsed.ok and self.check_format(content)
        answer_ok = self.check_answer(content)
        reward = self.format_coef * (float(format_ok) - 1.0) + float(answer_ok)
        return StepResult(
            reward=reward,
            episode_done=True,
            next_observation=[],
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={"format": float(format_ok), "correct": float(answer_ok)},
            logs={"question": self.get_question(), "response": content, "reference": self.get_reference_answer()},
        )


class ProblemGroupBuilder(EnvGroupBuilder):
    """A group of ``num_envs`` copies of the same problem.

    ``env_thunk`` is called once per env and must rebuild the *same* problem every time (sampling the problem
    inside the thunk would give each member of a GRPO group a different problem, and the group baseline would be
    meaningless). :meth:`make_envs` checks this for :class:`ProblemEnv` and raises if the questions differ.
    """

    def __init__(self, env_thunk: Callable[[], ProblemEnv], num_envs: int, dataset_name: str = "problems"):
        if num_envs < 1:
            raise ValueError(f"ProblemGroupBuilder({dataset_name!r}): num_envs must be >= 1, got {num_envs}")
        self.env_thunk = env_thunk
        self.num_envs = num_envs
        self.dataset_name = dataset_name

    async def make_envs(self) -> Sequence[Env]:
        envs = [self.env_thunk() for _ in range(self.num_envs)]
        questions = {e.get_question() for e in envs if isinstance(e, ProblemEnv)}
        if len(questions) > 1:
            raise ValueError(
                f"ProblemGroupBuilder({self.dataset_name!r}): env_thunk built {len(questions)} different problems "
                f"for one group ({sorted(questions)[:3]}...). The thunk must rebuild the same problem each call; "
                "sample the problem outside the thunk."
            )
        return envs

    def logging_tags(self) -> list[str]:
        return [self.dataset_name]
