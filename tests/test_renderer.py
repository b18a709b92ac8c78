"""Renderer and MessageTokenEnv: token-exact multi-turn extension with the tiny model's real ChatML template."""

import asyncio

import pytest
from transformers import AutoTokenizer

from trl_envs import EnvContractError, MessageEnv, MessageStepResult, MessageTokenEnv, Renderer, TokensWithLogprobs
from trl_envs.core.types import Trajectory, Transition
from trl_envs.envs.guess_number import GuessNumberEnv
from trl_envs.training_data.rows import trajectory_to_data


def _full(tokenizer, messages, add_generation_prompt):
    return list(
        tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
        )
    )


def _im_end(tokenizer) -> int:
    return tokenizer.convert_tokens_to_ids("<|im_end|>")


def _answer(tokenizer, text, end=True):
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids + [_im_end(tokenizer)] if end else ids


@pytest.fixture
def fresh_tokenizer(tiny_model_path):
    """A tokenizer the test may modify."""
    return AutoTokenizer.from_pretrained(tiny_model_path)


# -- basics ------------------------------------------------------------------------------------------------------


def test_generation_prompt_is_the_chat_template_rendering(renderer, tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 1 + 2?"}]
    ids = renderer.build_generation_prompt(messages)
    assert ids == _full(tokenizer, messages, True)
    assert tokenizer.decode(ids) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 1 + 2?<|im_end|>\n<|im_start|>assistant\n"
    )
    with pytest.raises(ValueError, match="no messages"):
        renderer.build_generation_prompt([])


def test_stop_sequences_are_the_end_of_turn_token(renderer, tokenizer):
    assert renderer.end_of_turn_token_id == _im_end(tokenizer)
    assert renderer.get_stop_sequences() == [_im_end(tokenizer)]  # EOS is <|im_end|> for this model


def test_parse_response(renderer, tokenizer):
    ok = renderer.parse_response(_answer(tokenizer, " 12 "))
    assert ok.end == "stop" and ok.ok and ok.message == {"role": "assistant", "content": "12"}
    cut = renderer.parse_response(_answer(tokenizer, "12", end=False))
    assert cut.end == "malformed" and not cut.ok and cut.message["content"] == "12"
    empty = renderer.parse_response([])
    assert empty.end == "malformed" and empty.message["content"] == ""


def test_parse_response_distinguishes_eos_from_end_of_turn(fresh_tokenizer):
    fresh_tokenizer.eos_token = "<|endoftext|>"  # EOS now differs from the template's end-of-turn token
    r = Renderer(fresh_tokenizer)
    eot, eos = _im_end(fresh_tokenizer), fresh_tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert r.end_of_turn_token_id == eot
    assert r.get_stop_sequences() == [eot, eos]
    digits = fresh_tokenizer.encode("4", add_special_tokens=False)
    assert r.parse_response(digits + [eos]).end == "eos"
    assert r.parse_response(digits + [eot]).end == "stop"


def test_tokenizer_without_chat_template_is_rejected_by_name(fresh_tokenizer, tiny_model_path):
    fresh_tokenizer.chat_template = None
    with pytest.raises(ValueError, match="has no chat template") as info:
        Renderer(fresh_tokenizer)
    assert tiny_model_path in str(info.value)


def test_template_that_rewrites_history_is_rejected(fresh_tokenizer):
    # Like thinking models that strip earlier assistant turns: an assistant message renders differently once it
    # is no longer the last one, so appending a message changes tokens already seen.
    fresh_tokenizer.chat_template = (
        "{%- for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{%- if message['role'] == 'assistant' and not loop.last %}(hidden){% else %}{{ message['content'] }}"
        "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    r = Renderer(fresh_tokenizer)
    with pytest.raises(EnvContractError, match="cannot be extended token-exactly"):
        r.render_suffix([{"role": "user", "content": "Higher."}])


# -- token-exact extension ---------------------------------------------------------------------------------------


def test_render_suffix_is_what_the_template_appends(renderer, tokenizer):
    suffix = renderer.render_suffix([{"role": "user", "content": "Higher."}])
    assert tokenizer.decode(suffix) == "\n<|im_start|>user\nHigher.<|im_end|>\n<|im_start|>assistant\n"
    two = renderer.render_suffix([{"role": "user", "content": "A"}, {"role": "user", "content": "B"}])
    assert (
        tokenizer.decode(two) == "\n<|im_start|>user\nA<|im_end|>\n<|im_start|>user\nB<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_message_env_observations_extend_token_exactly_and_match_full_rendering(renderer, tokenizer):
    env = MessageTokenEnv(GuessNumberEnv(target=11, low=1, high=16, max_guesses=6), renderer)
    guesses = ["8", "12", "10", "11"]
    conversation = [{"role": "user", "content": "Guess my number between 1 and 16."}]

    async def play():
        ob, stop = await env.initial_observation()
        assert stop == [_im_end(tokenizer)]
        assert ob == _full(tokenizer, conversation, True)
        for guess in guesses:
            action = _answer(tokenizer, guess)
            result = await env.step(action)
            conversation.append({"role": "assistant", "content": guess})
            if result.episode_done:
                assert guess == "11"
                # the final observation is the context plus the last action, nothing re-rendered
                assert result.next_observation == ob + action
                full = _full(tokenizer, conversation, False)
                assert result.next_observation == full[: len(result.next_observation)]
                assert tokenizer.decode(full[len(result.next_observation) :]) == "\n"
                return
            hint = {"role": "user", "content": "Higher." if int(guess) < 11 else "Lower."}
            conversation.append(hint)
            # previous observation + action tokens exactly as sampled + the rendered new messages
            assert result.next_observation == ob + action + renderer.render_suffix([hint])
            # ... which is token-for-token the template's rendering of the whole conversation
            assert result.next_observation == _full(tokenizer, conversation, True)
            ob = result.next_observation
        pytest.fail("episode did not end on the right guess")

    asyncio.run(play())


def test_truncated_action_gets_end_of_turn_inserted_as_env_token(renderer, tokenizer):
    env = MessageTokenEnv(GuessNumberEnv(target=11), renderer)

    async def play():
        ob, _ = await env.initial_observation()
        cut = _answer(tokenizer, "8", end=False)  # the token budget ran out before <|im_end|>
        result = await env.step(cut, extra={"finish_reason": "length"})
        return ob, cut, result

    ob, cut, result = asyncio.run(play())
    reply = {"role": "user", "content": "Reply with just a number between 1 and 16."}
    assert result.next_observation == ob + cut + [_im_end(tokenizer)] + renderer.render_suffix([reply])
    # the conversation stays well formed: the same as a rendering of the (closed) assistant turn
    convo = [
        {"role": "user", "content": "Guess my number between 1 and 16."},
        {"role": "assistant", "content": "8"},
        reply,
    ]
    assert result.next_observation == _full(tokenizer, convo, True)

    # in the training row, the inserted <|im_end|> is an env token: not trained, logprob 0
    win = _answer(tokenizer, "11")
    traj = Trajectory(
        [
            Transition(ob, TokensWithLogprobs(cut, [-0.5] * len(cut), "length"), result.reward, False),
            Transition(result.next_observation, TokensWithLogprobs(win, [-0.25] * len(win)), 1.0, True),
        ],
        final_ob=result.next_observation + win,
    )
    row = trajectory_to_data(traj)
    inserted = len(cut)
    assert row.completion_ids[inserted] == _im_end(tokenizer)
    assert row.mask[:inserted] == [1] * inserted
    assert row.mask[inserted] == 0
    assert row.logprobs[inserted] == 0.0


def test_extend_observation_keeps_a_proper_stop_and_needs_new_messages(renderer, tokenizer):
    ob = renderer.build_generation_prompt([{"role": "user", "content": "hi"}])
    action = _answer(tokenizer, "5")
    new = [{"role": "user", "content": "Lower."}]
    assert renderer.extend_observation(ob, action, new) == ob + action + renderer.render_suffix(new)
    with pytest.raises(ValueError, match="no new messages"):
        renderer.extend_observation(ob, action, [])


class _SilentEnv(MessageEnv):
    async def initial_messages(self):
        return [{"role": "user", "content": "hi"}]

    async def step(self, response):
        return MessageStepResult(0.0, False, [])


class _WrongTypeEnv(MessageEnv):
    async def initial_messages(self):
        return [{"role": "user", "content": "hi"}]

    async def step(self, response):
        return (0.0, True)


def test_message_env_contract_errors_name_the_env(renderer, tokenizer):
    async def step(env):
        await env.initial_observation()
        return await env.step(_answer(tokenizer, "1"))

    with pytest.raises(EnvContractError, match="_SilentEnv.step returned episode_done=False with no next_messages"):
        asyncio.run(step(MessageTokenEnv(_SilentEnv(), renderer)))
    with pytest.raises(EnvContractError, match="_WrongTypeEnv.step must return a MessageStepResult, got tuple"):
        asyncio.run(step(MessageTokenEnv(_WrongTypeEnv(), renderer)))
    with pytest.raises(RuntimeError, match="before initial_observation"):
        asyncio.run(MessageTokenEnv(_SilentEnv(), renderer).step([1]))
