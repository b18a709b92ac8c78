"""The agent endpoint: agents written with the openai client (or plain httpx) roll out as token-exact episodes, one
sampler call per wave of calls, and every bad case gets one clear error."""

import asyncio
import contextlib
import copy
import gc
import json
import logging
import os

import pytest

pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from trl_envs import Renderer  # noqa: E402
from trl_envs.agents import AgentEnv, AgentError, AgentGroupBuilder  # noqa: E402
from trl_envs.core.tools import CALCULATOR  # noqa: E402
from trl_envs.rollout.engine import FailFast, RetryOnFailure, RolloutBudget, run_rollout_batch  # noqa: E402
from trl_envs.rollout.watchdog import RolloutTimeoutError  # noqa: E402
from trl_envs.samplers.text_policy import TextPolicySampler  # noqa: E402
from trl_envs.training_data.row_layout import plan_rows  # noqa: E402
from trl_envs.training_data.rows import trajectory_to_data  # noqa: E402

TOOLS = [CALCULATOR.schema()]


def last_turn(prompt: str) -> str:
    """The role and text of the last message of a ChatML prompt."""
    return prompt.rsplit("<|im_start|>", 2)[-2].split("<|im_end|>")[0]


def calculator_policy(prompt: str) -> str:
    """Calls the calculator on the user's expression, then answers with the tool's result."""
    turn = last_turn(prompt)
    if turn.startswith("tool"):
        return "The answer is " + turn.split("\n", 1)[1]
    expression = turn.split("\n", 1)[1].rstrip("?")
    call = {"name": "calculator", "arguments": {"expression": expression}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


async def calculator_agent(base_url, api_key, task):
    """A tool-using agent loop written with the openai client."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        messages = [{"role": "user", "content": task["question"]}]
        for _ in range(4):
            response = await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return float(message.content.endswith(str(task["answer"])))
            for call in message.tool_calls:
                result = CALCULATOR.fn(**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return 0.0


class CountingSampler(TextPolicySampler):
    """Records every sampler call's requests."""

    def __init__(self, renderer, policy):
        super().__init__(renderer, policy)
        self.calls = []

    def sample(self, requests):
        self.calls.append(list(requests))
        return super().sample(requests)


def rollout(renderer, agent, tasks, group_size=1, policy=calculator_policy, budget=None, strategy=None, **kwargs):
    strategy = strategy or FailFast()
    sampler = CountingSampler(renderer, policy)
    builders = [AgentGroupBuilder(agent, task, renderer, group_size, **kwargs) for task in tasks]
    return run_rollout_batch(builders, sampler, budget or RolloutBudget(max_turns=8), strategy), sampler


def test_openai_client_agent_with_tool_calls_is_one_token_exact_sequence(renderer):
    result, sampler = rollout(renderer, calculator_agent, [{"question": "6*7?", "answer": 42}], group_size=2)
    assert result.num_sampler_calls == len(sampler.calls) == 2  # one per wave: the tool call, then the answer
    assert [len(c) for c in sampler.calls] == [2, 2]
    for traj in result.groups[0].trajectories:
        assert traj.stop_reason == "done" and traj.observations_extend
        assert [t.reward for t in traj.transitions] == [0.0, 1.0]
        assert traj.transitions[-1].metrics == {"agent_calls": 2.0, "history_rewrites": 0.0}
        row = trajectory_to_data(traj, "agent")  # raises if any call's prompt did not extend the context
        assert row.prompt_ids + row.completion_ids == traj.final_ob
        # the model's first action is in the context exactly as sampled (not re-rendered from its text)
        first = traj.transitions[0]
        assert traj.transitions[1].ob[: len(first.ob) + len(first.ac.tokens)] == first.ob + first.ac.tokens
    text = renderer.tokenizer.decode(result.groups[0].trajectories[0].final_ob)
    assert '"name": "calculator"' in text and "Tools:" in text  # tools reach a template without tool support
    assert "<|im_start|>tool\n42<|im_end|>" in text


async def httpx_agent(base_url, api_key, task):
    """A plain-HTTP agent; checks the OpenAI response shape, including parsed tool calls."""
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
        models = (await client.get("/models")).json()
        assert models["data"][0]["id"] == "policy"
        messages = [{"role": "user", "content": [{"type": "text", "text": task}]}]
        r = await client.post("/chat/completions", json={"model": "policy", "messages": messages, "tools": TOOLS})
        assert r.status_code == 200, r.text
        body = r.json()
        choice = body["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        call = choice["message"]["tool_calls"][0]
        assert call["type"] == "function" and call["function"]["name"] == "calculator"
        assert json.loads(call["function"]["arguments"]) == {"expression": "2+3"}
        assert body["usage"]["completion_tokens"] > 0 and body["usage"]["prompt_tokens"] > 0
        messages += [choice["message"], {"role": "tool", "tool_call_id": call["id"], "content": "5"}]
        r = await client.post("/chat/completions", json={"model": "policy", "messages": messages, "tools": TOOLS})
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["message"]["content"] == "The answer is 5"
        return 1.0


def test_plain_httpx_agent_gets_openai_json(renderer):
    result, _ = rollout(renderer, httpx_agent, ["2+3?"])
    traj = result.groups[0].trajectories[0]
    assert traj.observations_extend and traj.transitions[-1].reward == 1.0


def test_64_concurrent_agents_one_sampler_call_per_wave(renderer):
    tasks = [{"question": f"{i}*3?", "answer": i * 3} for i in range(16)]
    result, sampler = rollout(renderer, calculator_agent, tasks, group_size=4)
    assert [len(c) for c in sampler.calls] == [64, 64]  # generate calls per wave = 1.00
    rewards = [g.get_total_rewards() for g in result.groups]
    assert all(r == [1.0] * 4 for r in rewards)


async def rewriting_agent(base_url, api_key, task):
    """Drops its earlier turns before the second call (a summarising agent): the prompts stop extending."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        first = await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "1+1?"}])
        second = await client.chat.completions.create(
            model="p", messages=[{"role": "user", "content": f"Earlier you said {first.choices[0].message.content}"}]
        )
        return float(bool(second.choices[0].message.content))


def open_descriptors() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors in /proc")
def test_256_concurrent_agents_per_step_complete_without_errors_or_descriptor_growth(renderer):
    """256 agent episodes at once (64 groups of 4), each making two calls through its own openai client, for two
    steps: every episode completes, no call fails, and the process holds no more open descriptors after the second
    step than after the first (connections and sockets of finished episodes are closed)."""
    tasks = [{"question": f"{i}*3+1?", "answer": i * 3 + 1} for i in range(64)]
    counts = []
    for _ in range(2):
        result, sampler = rollout(renderer, calculator_agent, tasks, group_size=4)
        episodes = [t for g in result.groups for t in g.trajectories]
        assert len(episodes) == 256 and not result.error_counts
        assert all(t.transitions[-1].reward == 1.0 and len(t.transitions) == 2 for t in episodes)
        assert sum(len(c) for c in sampler.calls) == 512
        counts.append(open_descriptors())
    assert counts[1] <= counts[0], counts


def test_rewritten_history_trains_one_row_per_call(renderer):
    result, _ = rollout(renderer, rewriting_agent, [None], policy=lambda p: "2")
    traj = result.groups[0].trajectories[0]
    assert not traj.observations_extend and traj.transitions[-1].metrics["history_rewrites"] == 1.0
    plan = plan_rows(result.groups, 1, "auto")
    assert len(plan.rows) == 2 and plan.num_per_turn_trajectories == 1


async def short_agent(base_url, api_key, task):
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        r = await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
        return float(r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3)


def test_max_tokens_caps_the_turn(renderer):
    result, sampler = rollout(renderer, short_agent, [None], policy=lambda p: "one two three four five six")
    assert sampler.calls[0][0].max_tokens == 3
    assert result.groups[0].trajectories[0].transitions[-1].reward == 1.0


async def streaming_agent(base_url, api_key, task):
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="p", messages=[{"role": "user", "content": "Hi"}], stream=True, stream_options={"include_usage": True}
        )
        text, finish, usage = "", None, None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            usage = chunk.usage or usage
        try:
            await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}], n=2)
        except openai.BadRequestError as e:
            n_error = e.body
        return float(
            text == "Hello there"
            and finish == "stop"
            and usage.completion_tokens > 0
            and n_error["param"] == "n"
            and "n must be 1" in n_error["message"]
        )


def test_stream_is_supported_and_n_above_1_refused(renderer):
    result, _ = rollout(renderer, streaming_agent, [None], policy=lambda p: "Hello there")
    assert result.groups[0].trajectories[0].transitions[-1].reward == 1.0


async def wrong_key_agent(base_url, api_key, task):
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-not-mine", max_retries=0) as client:
        try:
            await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}])
        except openai.AuthenticationError as e:
            assert e.status_code == 401 and "invalid API key" in e.body["message"]
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}])
    return 1.0


def test_wrong_key_gets_401_and_is_not_attributed(renderer):
    result, sampler = rollout(renderer, wrong_key_agent, [None], policy=lambda p: "ok")
    traj = result.groups[0].trajectories[0]
    assert len(traj.transitions) == 1 and traj.transitions[0].reward == 1.0
    assert [len(c) for c in sampler.calls] == [1]


def test_agent_that_raises_fails_fast_or_is_retried(renderer):
    async def broken(base_url, api_key, task):
        async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}])
        raise KeyError("no such file")

    with pytest.raises(AgentError, match="agent 'broken' raised KeyError") as info:
        rollout(renderer, broken, ["t"], policy=lambda p: "ok")
    assert isinstance(info.value.__cause__, KeyError)
    result, _ = rollout(renderer, broken, ["t"], policy=lambda p: "ok", strategy=RetryOnFailure(max_retries=1))
    assert result.groups == [None] and result.error_counts["AgentError"] == 2


def test_agent_that_never_calls_the_model(renderer):
    async def lazy(base_url, api_key, task):
        return 1.0

    with pytest.raises(AgentError, match="returned without calling the model"):
        rollout(renderer, lazy, ["t"], policy=lambda p: "ok")


def test_calls_after_the_episode_ended_get_409_and_lose_nothing(renderer):
    late = {}

    async def leaky(base_url, api_key, task):
        client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}])

        async def after():
            await asyncio.sleep(0)  # runs once the episode has ended
            try:
                await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "again"}])
            except openai.APIStatusError as e:
                late["status"], late["body"] = e.status_code, e.body
            await client.close()

        late["task"] = asyncio.ensure_future(after())
        return 0.5

    async def sibling(base_url, api_key, task):  # keeps the endpoint up until the late call was answered
        async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}])
        while "task" not in late:
            await asyncio.sleep(0.01)
        await late["task"]
        return 1.0

    sampler = CountingSampler(renderer, lambda p: "ok")
    builders = [AgentGroupBuilder(leaky, "a", renderer, 1), AgentGroupBuilder(sibling, "b", renderer, 1)]
    result = run_rollout_batch(builders, sampler, RolloutBudget(max_turns=8))
    assert late["status"] == 409 and late["body"]["code"] == "episode_ended"
    assert [g.trajectories[0].transitions[-1].reward for g in result.groups] == [0.5, 1.0]
    assert sum(len(c) for c in sampler.calls) == 2  # the late call was never sampled


def test_messages_the_template_cannot_render_get_400_and_the_agent_can_go_on(renderer, tokenizer):
    strict = copy.deepcopy(tokenizer)
    strict.chat_template = (
        "{%- for m in messages %}{%- if m['role'] == 'developer' %}"
        "{{ raise_exception('developer messages are not supported') }}{%- endif %}"
        "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    errors = []

    async def agent(base_url, api_key, task):
        async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            for messages in (
                [{"role": "developer", "content": "Be brief"}],
                [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            ):
                try:
                    await client.chat.completions.create(model="p", messages=messages)
                except openai.BadRequestError as e:
                    errors.append(e.body["message"])
            await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}])
        return 1.0

    result, sampler = rollout(Renderer(strict), agent, ["t"], policy=lambda p: "ok")
    assert "cannot render these messages" in errors[0] and "developer messages are not supported" in errors[0]
    assert "messages[0].content" in errors[1]
    assert [len(c) for c in sampler.calls] == [1] and result.groups[0].trajectories[0].transitions[-1].reward == 1.0


async def endless_agent(base_url, api_key, task):
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        messages = [{"role": "user", "content": "count"}]
        while True:
            r = await client.chat.completions.create(model="p", messages=messages)
            messages += [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "more"}]
            endless_agent.base_url = base_url


def test_budget_stop_cancels_the_agent_and_stops_the_endpoint(renderer):
    result, sampler = rollout(renderer, endless_agent, ["t"], policy=lambda p: "1", budget=RolloutBudget(max_turns=3))
    traj = result.groups[0].trajectories[0]
    assert traj.stop_reason == "max_turns" and len(traj.transitions) == 3 and traj.observations_extend
    with pytest.raises(httpx.ConnectError):  # the endpoint stopped with the rollout
        httpx.get(endless_agent.base_url + "/models", timeout=2)


def test_reward_fn_scores_what_the_agent_returns_and_bad_rewards_are_named(renderer):
    async def agent(base_url, api_key, task):
        async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            r = await client.chat.completions.create(model="p", messages=[{"role": "user", "content": task}])
        return [{"role": "user", "content": task}, {"role": "assistant", "content": r.choices[0].message.content}]

    result, _ = rollout(
        renderer,
        agent,
        ["say 7"],
        policy=lambda p: "7",
        reward_fn=lambda task, messages: float(messages[-1]["content"] == "7"),
    )
    assert result.groups[0].trajectories[0].transitions[-1].reward == 1.0
    with pytest.raises(TypeError, match="must return a finite number as the reward.*reward_fn"):
        rollout(renderer, agent, ["say 7"], policy=lambda p: "7")


def test_sync_agent_runs_in_a_thread(renderer):
    def agent(base_url, api_key, task):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        r = client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}])
        client.close()
        return float(r.choices[0].message.content == "yes")

    result, _ = rollout(renderer, agent, ["t"], policy=lambda p: "yes")
    assert result.groups[0].trajectories[0].transitions[-1].reward == 1.0


def test_agent_env_is_single_use(renderer):
    env = AgentEnv(calculator_agent, {"question": "1+1?", "answer": 2}, renderer)
    with pytest.raises(TypeError, match="agent must be callable"):
        AgentEnv("not a function", None, renderer)
    assert env.observations_extend and env.max_tokens_next_turn is None


def test_agent_groups_make_dpo_pairs(renderer):
    from trl_envs.training_data.preference import make_preference_pairs

    replies = iter(["yes", "no", "no", "no"])

    async def agent(base_url, api_key, task):
        async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            r = await client.chat.completions.create(model="p", messages=[{"role": "user", "content": task}])
        return float(r.choices[0].message.content == "yes")

    result, _ = rollout(renderer, agent, ["Say yes"], group_size=4, policy=lambda p: next(replies))
    pairs, stats = make_preference_pairs(result.groups)
    assert len(pairs) == 1 and (pairs[0].chosen_reward, pairs[0].rejected_reward) == (1.0, 0.0)
    yes = renderer.tokenizer.encode("yes", add_special_tokens=False)
    assert pairs[0].chosen_ids[: len(yes)] == yes and pairs[0].tags == ["agent"]


def test_a_timed_out_agent_is_retried_and_cancelled(renderer):
    calls, cancelled = [], []

    async def hangs_once(base_url, api_key, task):
        async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
            await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}])
            calls.append(api_key)
            if len(calls) == 1:
                try:
                    await asyncio.sleep(3600)  # stuck in its own work: the rollout timeout replaces it
                except asyncio.CancelledError:
                    cancelled.append(api_key)
                    raise
        return 1.0

    result, _ = rollout(
        renderer,
        hangs_once,
        ["t"],
        policy=lambda p: "ok",
        strategy=RetryOnFailure(max_retries=1, per_rollout_timeout=1.0),
    )
    assert result.groups[0].trajectories[0].transitions[-1].reward == 1.0
    assert len(set(calls)) == 2 and result.error_counts == {"TimeoutError": 1}
    assert cancelled == calls[:1]  # the stuck run did not outlive its rollout


async def never_returns(base_url, api_key, task):
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        await client.chat.completions.create(model="p", messages=[{"role": "user", "content": "Hi"}])
        await asyncio.sleep(3600)  # its own work never ends


@pytest.mark.parametrize("strategy", ["fail_fast", "retry"])
def test_an_agent_that_never_returns_is_ended_by_the_timeout_naming_the_agent_function(renderer, strategy):
    """The timeout names the agent function (what the user wrote), not ``AgentEnv.step``; under retry the group is
    retried, then skipped, and the batch completes."""
    timeout = 1.0
    if strategy == "fail_fast":
        with pytest.raises(RolloutTimeoutError) as raised:
            rollout(
                renderer, never_returns, ["t"], policy=lambda p: "ok", strategy=FailFast(per_rollout_timeout=timeout)
            )
        message = str(raised.value)
    else:
        with caplog_of("trl_envs.rollout.engine") as records:
            result, _ = rollout(
                renderer,
                never_returns,
                ["t", "u"],
                policy=lambda p: "ok",
                strategy=RetryOnFailure(max_retries=1, per_rollout_timeout=timeout),
            )
        assert result.groups == [None, None] and result.error_counts["TimeoutError"] == 4
        message = "\n".join(records)
    assert "AgentEnv running agent function 'never_returns'" in message, message
    assert "it was in agent function 'never_returns', after the model answered its call of turn 0" in message, message
    assert "AgentEnv.step" not in message


@contextlib.contextmanager
def caplog_of(logger_name: str):
    """The messages logged by ``logger_name`` (INFO and above) while the block runs."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger, handler = logging.getLogger(logger_name), Keep(logging.INFO)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


async def raw_http_agent(base_url, api_key, task):
    """Requests no client library would send: an unknown route, a body in chunks, a body that is not JSON."""
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
        r = await client.post("/completions", json={"prompt": "Hi"})
        assert r.status_code == 404 and "POST /v1/chat/completions" in r.json()["error"]["message"], r.text
        r = await client.post("/chat/completions", content=b"{not json")
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"], r.text
        body = json.dumps({"model": "policy", "messages": [{"role": "user", "content": "Hi"}]}).encode()

        async def chunks():  # chunked transfer encoding: the body arrives in several ASGI messages
            for i in range(0, len(body), 7):
                yield body[i : i + 7]

        r = await client.post("/chat/completions", content=chunks())
        assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
        return float(r.json()["choices"][0]["message"]["content"] == "ok")


def test_unknown_routes_bad_bodies_and_chunked_bodies(renderer):
    result, sampler = rollout(renderer, raw_http_agent, [None], policy=lambda p: "ok")
    traj = result.groups[0].trajectories[0]
    assert [len(c) for c in sampler.calls] == [1] and traj.transitions[-1].reward == 1.0
