"""Tool use: tool calls parse robustly, execute, come back as tool messages that extend the conversation
token-exactly, and the episode ends on a final answer; with a ChatML template without tool support and with a
Qwen-style template that renders tool definitions and <tool_response> blocks. One short training run."""

from __future__ import annotations

import copy
import re

import pytest

from trl_envs import Renderer, run_rollout_batch, trajectory_to_data
from trl_envs.core.renderer import ParsedResponse
from trl_envs.core.tools import (
    CALCULATOR,
    ToolCall,
    evaluate_expression,
    parse_tool_calls,
    run_tool_call,
    tools_system_prompt,
)
from trl_envs.envs.tool_use import ToolUseDataset, ToolUseEnv
from trl_envs.rollout.event_loop import run_sync
from trl_envs.samplers.text_policy import TextPolicySampler

pytestmark = pytest.mark.timeout(300)
TOOLS = {"calculator": CALCULATOR}


def call(expression: str) -> str:
    return '<tool_call>\n{"name": "calculator", "arguments": {"expression": "' + expression + '"}}\n</tool_call>'


def test_tool_calls_parse_robustly():
    calls = parse_tool_calls(
        "Let me compute. " + call("2 + 3") + '\n<tool_call>{"name": "calculator", '
        '"arguments": "{\\"expression\\": \\"7*6\\"}"}</tool_call>'
    )
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("calculator", {"expression": "2 + 3"}, None),
        ("calculator", {"expression": "7*6"}, None),
    ]
    assert parse_tool_calls("42") == []
    bad = parse_tool_calls(
        '<tool_call>{"name": calculator}</tool_call><tool_call>[1]</tool_call>'
        '<tool_call>{"name": "calculator", "arguments": 5}</tool_call><tool_call>{"name": "x"'
    )
    assert [c.error.split(" (")[0] for c in bad] == [
        "the tool call is not valid JSON",
        'a tool call must be a JSON object with a "name" string and "arguments"',
        '"arguments" must be a JSON object',
        "the tool call is not closed with </tool_call>",
    ]


@pytest.mark.parametrize(
    "args, expected, ok",
    [
        ({"expression": "37 * 12 + 5"}, "449", True),
        ({"expression": "7 / 2"}, "3.5", True),
        ({"expression": "1 / 0"}, "Error: division by zero", False),
        ({"expression": "__import__('os').system('true')"}, "Error: only numbers", False),
        ({"expression": "9 ** 9 ** 9"}, "Error: power too large", False),
        ({"expr": "1"}, "Error: bad arguments for calculator (missing expression; unknown expr).", False),
    ],
)
def test_calculator_executes_safely(args, expected, ok):
    message, success = run_tool_call(ToolCall("calculator", args), TOOLS)
    assert message["role"] == "tool" and message["content"].startswith(expected) and success is ok


def test_unknown_tools_and_malformed_calls_get_error_messages():
    assert (
        run_tool_call(ToolCall("search", {}), TOOLS)[0]["content"] == "Error: unknown tool 'search'; tools: calculator."
    )
    assert run_tool_call(ToolCall(error="x is wrong"), TOOLS)[0]["content"] == "Error: x is wrong."
    with pytest.raises(ValueError):
        evaluate_expression("a + 1")


def test_env_steps_call_then_answer():
    env = ToolUseEnv("What is 37 * 12 + 5?", 449, [CALCULATOR], max_tool_calls=2)

    async def go():
        first = await env.step(ParsedResponse({"role": "assistant", "content": call("37 * 12 + 5")}, "stop"))
        assert not first.episode_done and first.next_messages == [
            {"role": "tool", "name": "calculator", "content": "449"}
        ]
        bad = await env.step(ParsedResponse({"role": "assistant", "content": "<tool_call>oops</tool_call>"}, "stop"))
        assert bad.next_messages[0]["content"].startswith("Error: the tool call is not valid JSON")
        over = await env.step(ParsedResponse({"role": "assistant", "content": call("1+1")}, "stop"))
        assert "no tool calls left" in over.next_messages[0]["content"]
        final = await env.step(ParsedResponse({"role": "assistant", "content": "449"}, "stop"))
        assert final.episode_done and final.reward == 1.0
        assert final.metrics == {
            "correct": 1.0,
            "answer_format": 1.0,
            "tool_calls": 3.0,
            "tool_errors": 2.0,
            "used_tool": 1.0,
        }
        cut = ToolUseEnv("q", 449, [CALCULATOR])
        assert (await cut.step(ParsedResponse({"role": "assistant", "content": "449"}, "malformed"))).reward == 0.0

    run_sync(go)


def scripted_tool_user(text: str) -> str:
    """Calls the calculator on the question, then answers with the number in the tool's reply."""
    question = text.split("What is ")[-1].split("?")[0]
    if "<tool_call>" not in text.split("What is ")[-1]:  # no call made yet in this episode
        return call(question)
    last_message = text.rsplit("<|im_start|>", 2)[-2]  # the one before the generation prompt: the tool's reply
    return re.findall(r"-?\d+(?:\.\d+)?", last_message)[-1]


def run_episodes(renderer, dataset):
    return run_rollout_batch(dataset.get_batch(0), TextPolicySampler(renderer, scripted_tool_user))


def test_episodes_with_a_chatml_template_without_tool_support(tokenizer, renderer):
    dataset = ToolUseDataset(renderer, batch_size=2, group_size=2, num_batches=1)
    assert dataset.renderer is renderer and dataset.system_prompt == tools_system_prompt([CALCULATOR])
    result = run_episodes(renderer, dataset)
    for group in result.groups:
        for traj in group.trajectories:
            assert len(traj.transitions) == 2 and traj.step_reward == 1.0
            row = trajectory_to_data(traj)  # the tool reply extended the observation token-exactly
            assert sum(row.mask) == traj.num_action_tokens
            text = tokenizer.decode(traj.final_ob)
            assert "<|im_start|>tool\n" in text and "<tool_call>" in text


# A Qwen-style template (written for this test): tool definitions in a system block, tool messages as
# <tool_response> blocks inside a user turn.
QWEN_STYLE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}"
    "{%- for t in tools %}{{- '\\n' + (t | tojson) }}{%- endfor %}"
    '{{- \'\\n</tools>\\nCall a tool as <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>\\n\' }}'
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def test_episodes_with_a_qwen_style_template_that_renders_tools(tokenizer):
    qwen_like = copy.deepcopy(tokenizer)
    qwen_like.chat_template = QWEN_STYLE
    renderer = Renderer(qwen_like)
    dataset = ToolUseDataset(renderer, batch_size=1, group_size=2, num_batches=1)
    assert dataset.renderer is not renderer and dataset.system_prompt is None  # tools go through the template
    result = run_episodes(renderer, dataset)
    traj = result.groups[0].trajectories[0]
    text = qwen_like.decode(traj.final_ob)
    assert '<tools>\n{"type": "function", "function": {"name": "calculator"' in text
    assert "<|im_start|>user\n<tool_response>\n" in text
    assert traj.step_reward == 1.0
    trajectory_to_data(traj)


def test_tool_use_trains_with_env_grpo_trainer(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    from trl_envs import EnvGRPOTrainer, make_env_dataset

    args = cpu_grpo_config(max_completion_length=16, max_turns=3)
    env = make_env_dataset("tool_use", renderer, group_size=4, batch_size=2, num_batches=4)
    trainer = EnvGRPOTrainer(tiny_model_path, args, env, processing_class=tokenizer)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "env/tool_use/reward/total" in h]
    assert logged and "env/tool_use/correct" in logged[0]
