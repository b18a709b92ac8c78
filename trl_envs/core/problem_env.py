"""Single-turn problems: one question, one answer, a reward for format and correctness."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from .renderer import Message, Renderer
from .types import Action, Env, EnvContractError, EnvGroupBuilder, Observation, StepResult, StopCondition


class ProblemEnv(Env):
    """A single-turn problem. Subclasses say what the question is and how to check an answer.

    Only :meth:`get_question` and :meth:`check_answer` are required (as in the Tinker cookbook's overview);
    :meth:`check_format` accepts any text and :meth:`get_reference_answer` gives ``None`` unless overridden.

    Reward: ``format_coef * (format_ok - 1) + answer_score``, where ``answer_score`` is :meth:`check_answer`'s
    result: a bool, or a score in [0, 1] for partial credit. With ``format_coef=0.1``: 1.0 for a well-formed right
    answer, 0.9 for a badly formed right one, 0.0 for a well-formed wrong one, -0.1 for a badly formed wrong one.
    A response counts as well formed when it ended on the end-of-turn token and :meth:`check_format` accepts it
    (so even with the default :meth:`check_format`, a reply cut by the token budget earns the format penalty).
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
    def check_answer(self, sample_str: str) -> bool | float:
        """Whether the response text answers the question correctly: a bool, or a score in [0, 1] (partial
        credit). Anything else (a score outside [0, 1], NaN, a string) raises ``EnvContractError``."""

    def check_format(self, sample_str: str) -> bool:
        """Whether the response text has the expected form. Default: any text does (the reply must still end on
        the end-of-turn token to count as well formed)."""
        return True

    def get_reference_answer(self) -> str | None:
        """A correct answer, for logs and for warm-start data. Default: ``None`` (no reference known)."""
        return None

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        messages = self.convo_prefix + [{"role": "user", "content": self.get_question()}]
        return self.renderer.build_generation_prompt(messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: dict[str, Any] | None = None) -> StepResult:
        message, well_formed = self.renderer.parse_response(action)
        content = message["content"]
        format_ok = well_formed and bool(self.check_format(content))
        answer_score = _answer_score(self.check_answer(content), type(self).__name__)
        reward = self.format_coef * (float(format_ok) - 1.0) + answer_score
        return StepResult(
            reward=reward,
            episode_done=True,
            next_observation=[],
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={"format": float(format_ok), "correct": answer_score},
            logs={"question": self.get_question(), "response": content, "reference": self.get_reference_answer()},
        )


def _answer_score(value: Any, env_name: str) -> float:
    """``check_answer``'s result as a score in [0, 1]: a bool counts as 0 or 1."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= float(value) <= 1.0:
        return float(value)
    # numpy bools and scalars
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return _answer_score(value.item(), env_name)
    raise EnvContractError(
        f"{env_name}.check_answer returned {value!r} ({type(value).__name__}); it must return a "
        "bool or a score in [0, 1]"
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
