"""trl_envs.tinker: tinker-cookbook objects as trl_envs ones, token-exact, through the registry and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("tinker_cookbook")

import tinker  # noqa: E402
from tinker_cookbook.recipes.multiplayer_rl.guess_number import env as guess_env  # noqa: E402
from tinker_cookbook.rl import types as tc  # noqa: E402
from tinker_cookbook_envs import RENDERER_NAME, make_cookbook_builder, scripted_player  # noqa: E402

from trl_envs import ListRLDataset, run_rollout_batch  # noqa: E402
from trl_envs.core.types import EnvContractError, TokensWithLogprobs, Trajectory, Transition  # noqa: E402
from trl_envs.registry.names import get_env, make_env_dataset  # noqa: E402
from trl_envs.rollout.event_loop import run_sync  # noqa: E402
from trl_envs.tinker import (  # noqa: E402
    TinkerDatasetBuilder,
    TinkerGroupBuilder,
    TinkerRLDataset,
    adapt,
    cookbook_trajectory,
    is_tinker_cookbook_object,
    model_input_of,
    tokens_of,
)

pytestmark = pytest.mark.timeout(300)
ARITHMETIC = "tinker_cookbook.recipes.math_rl.arithmetic_env:ArithmeticDatasetBuilder"


def test_import_trl_envs_stays_free_of_tinker():
    code = (
        "import sys, trl_envs, trl_envs.registry.names, trl_envs.tinker; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tinker', 'tinker_cookbook', 'chz')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "[]", out.stdout


def test_cookbook_objects_are_recognised_without_importing_them(tiny_model_path):
    builder = make_cookbook_builder("arithmetic", tiny_model_path, batch_size=2, group_size=2)
    assert is_tinker_cookbook_object(builder) and is_tinker_cookbook_object(type(builder))
    assert not is_tinker_cookbook_object(ListRLDataset) and not is_tinker_cookbook_object(object())


def test_observation_and_trajectory_conversions_are_token_exact():
    ids = [5, 17, 3, 250, 2]
    assert tokens_of(model_input_of(ids), "x") == ids and model_input_of([]).length == 0
    with pytest.raises(EnvContractError, match="MyEnv.step: expected a tinker.ModelInput observation, got str"):
        tokens_of("hello", "MyEnv.step")
    image = tinker.ModelInput(chunks=[tinker.types.ImageChunk(data=b"\x89PNG", format="png")])
    with pytest.raises(EnvContractError, match="ImageChunk; only text"):
        tokens_of(image, "VisionEnv.initial_observation")
    ours = Trajectory(
        [
            Transition([1, 2], TokensWithLogprobs([3, 4], [-0.5, -1.0], "length"), 0.5, False, {"a": 1.0}, {"l": "x"}),
            Transition([1, 2, 3, 4, 9], TokensWithLogprobs([7], None), 1.0, True, {"stop/completed": 1.0}),
        ],
        [1, 2, 3, 4, 9, 7],
        "done",
    )
    theirs = cookbook_trajectory(ours)
    assert isinstance(theirs, tc.Trajectory) and theirs.stop_reason == "completed"
    first, last = theirs.transitions
    assert first.ob.to_ints() == [1, 2] and first.ac.tokens == [3, 4] and first.ac.maybe_logprobs == [-0.5, -1.0]
    assert first.ac.stop_reason == "length" and (first.reward, first.episode_done) == (0.5, False)
    assert first.metrics == {"a": 1.0} and first.logs == {"l": "x"} and last.ac.maybe_logprobs is None
    assert theirs.final_ob.to_ints() == [1, 2, 3, 4, 9, 7]
    assert cookbook_trajectory(Trajectory(ours.transitions, [], "max_turns")).stop_reason == "max_turns"


class RecordingGuessEnv(guess_env.GuessNumberEnv):
    """The cookbook's guess-number env, recording every observation it gave and every action it received."""

    seen: list = []

    async def initial_observation(self):
        ob, stop = await super().initial_observation()
        self.record = {"obs": [ob.to_ints()], "actions": [], "extra": []}
        RecordingGuessEnv.seen.append(self.record)
        return ob, stop

    async def step(self, action, *, extra=None):
        self.record["actions"].append(list(action))
        self.record["extra"].append(extra)
        result = await super().step(action, extra=extra)
        if not result.episode_done:
            self.record["obs"].append(result.next_observation.to_ints())
        return result


class RecordingGroup(guess_env.GuessNumberEnvGroupBuilder):
    cleaned = 0
    seen_trajectories: list = []

    async def make_envs(self):
        return [RecordingGuessEnv(self.answer, self.renderer) for _ in range(self.num_envs)]

    async def compute_group_rewards(self, trajectory_group, env_group):
        RecordingGroup.seen_trajectories.append((trajectory_group, list(env_group)))
        return [(0.25 * i, {"group_metric": float(i)}) for i in range(len(trajectory_group))]

    async def cleanup(self):
        RecordingGroup.cleaned += 1

    def logging_tags(self):
        return ["guess"]


def recording_dataset(model_path: str, groups: int = 2) -> tc.RLDataset:
    train, _ = asyncio.run(make_cookbook_builder("guess_number", model_path, batch_size=groups, group_size=4)())
    builders = [RecordingGroup(answer=b.answer, renderer=b.renderer, num_envs=b.num_envs) for b in train.get_batch(0)]

    class Dataset(tc.RLDataset):
        def get_batch(self, index):
            return builders

        def __len__(self):
            return 1

    return Dataset()


def test_group_rewards_cleanup_tags_and_the_cookbook_shapes(tiny_model_path):
    RecordingGuessEnv.seen.clear(), RecordingGroup.seen_trajectories.clear()
    RecordingGroup.cleaned = 0
    envs = adapt(recording_dataset(tiny_model_path))
    assert isinstance(envs, TinkerRLDataset) and len(envs) == 1
    result = run_rollout_batch(envs.get_batch(0), scripted_player(tiny_model_path), budget=None)
    assert RecordingGroup.cleaned == 2
    for group, (trajs, inner_envs) in zip(result.groups, RecordingGroup.seen_trajectories):
        assert group.tags == ["guess"] and group.group_rewards == [0.0, 0.25, 0.5, 0.75]
        assert [m["group_metric"] for m in group.group_metrics] == [0.0, 1.0, 2.0, 3.0]
        assert all(isinstance(e, RecordingGuessEnv) for e in inner_envs)  # the cookbook's own envs
        for ours, theirs in zip(group.trajectories, trajs):
            assert isinstance(theirs, tc.Trajectory) and isinstance(theirs.transitions[0].ob, tinker.ModelInput)
            assert [t.ob.to_ints() for t in theirs.transitions] == [t.ob for t in ours.transitions]
            assert [t.ac.tokens for t in theirs.transitions] == [t.ac.tokens for t in ours.transitions]
            assert [t.reward for t in theirs.transitions] == [t.reward for t in ours.transitions]


def test_trained_tokens_are_what_the_cookbook_env_saw(tiny_model_path, tokenizer, cpu_grpo_config):
    """Every row TRL trains on is an observation the cookbook env produced, followed by exactly the action tokens it
    was given (guess_number re-renders its conversation each turn, so each turn is its own row)."""
    from trl_envs import EnvGRPOTrainer

    RecordingGuessEnv.seen.clear()
    envs = adapt(recording_dataset(tiny_model_path, groups=2))
    trainer = EnvGRPOTrainer(tiny_model_path, cpu_grpo_config(max_turns=3), envs, processing_class=tokenizer)
    keys = trainer.train_dataset["prompt"][:2]
    trainer.model.train()
    out = trainer.generation_batch(keys)
    assert all(t.observations_extend is False for g in trainer.last_rollout.groups for t in g.trajectories)
    expected = {(tuple(ob), tuple(ac)) for rec in RecordingGuessEnv.seen for ob, ac in zip(rec["obs"], rec["actions"])}
    trained = set()
    for i in range(out["completion_ids"].shape[0]):
        prompt = out["prompt_ids"][i][out["prompt_mask"][i].bool()].tolist()
        completion = out["completion_ids"][i][out["completion_mask"][i].bool()].tolist()
        trained.add((tuple(prompt), tuple(completion)))
    assert trained <= expected and len(trained) >= 8  # every trained row is a (cookbook observation, action) pair
    assert all(extra["stop_reason"] in ("stop", "length") for rec in RecordingGuessEnv.seen for extra in rec["extra"])


def test_a_dataset_builder_is_awaited_and_its_test_split_kept(tiny_model_path):
    builder = make_cookbook_builder("guess_number", tiny_model_path, batch_size=2, group_size=4)
    assert asyncio.iscoroutinefunction(type(builder).__call__)  # the cookbook's RLDatasetBuilder is async
    train, test = run_sync(adapt(builder))
    assert isinstance(train, TinkerRLDataset) and isinstance(test, TinkerRLDataset)
    assert all(isinstance(b, TinkerGroupBuilder) for b in train.get_batch(0))
    with pytest.raises(
        TypeError,
        match="expected a tinker_cookbook RLDatasetBuilder, RLDataset or EnvGroupBuilder instance, got ListRLDataset",
    ):
        adapt(ListRLDataset(train.get_batch(0), batch_size=1))


def test_registry_builds_a_cookbook_builder_from_its_import_path(tiny_model_path):
    kind = get_env(ARITHMETIC)
    assert kind.source == "import (tinker-cookbook)" and "ArithmeticDatasetBuilder" in kind.description
    envs = make_env_dataset(
        ARITHMETIC,
        None,
        group_size=4,
        groups_per_batch=3,
        model_name_for_tokenizer=tiny_model_path,
        renderer_name=RENDERER_NAME,
        n_batches=2,
        include_fewshot=False,
    )
    assert isinstance(envs, TinkerDatasetBuilder)
    train, test = run_sync(envs)
    groups = train.get_batch(0)
    assert len(train) == 2 and test is None and len(groups) == 3  # batch_size came from groups_per_batch
    assert len(run_sync(groups[0].make_envs)) == 4  # group_size came from num_generations
    with pytest.raises(
        TypeError,
        match=r"ArithmeticDatasetBuilder takes no option 'max_operand'; its options are "
        r"\(batch_size, model_name_for_tokenizer",
    ):
        make_env_dataset(ARITHMETIC, None, max_operand=3)
    with pytest.raises(TypeError, match="needs option 'model_name_for_tokenizer'"):
        make_env_dataset(ARITHMETIC, None, group_size=4, groups_per_batch=2, renderer_name=RENDERER_NAME, n_batches=1)


def test_registry_refuses_a_cookbook_tokenizer_that_is_not_the_trained_models(tiny_model_path, tokenizer):
    from transformers import AutoTokenizer

    from trl_envs import Renderer

    other = AutoTokenizer.from_pretrained(tiny_model_path)
    other.add_tokens(["<|unseen|>"])
    kwargs = dict(
        group_size=2,
        groups_per_batch=1,
        model_name_for_tokenizer=tiny_model_path,
        renderer_name=RENDERER_NAME,
        n_batches=1,
    )
    assert isinstance(make_env_dataset(ARITHMETIC, Renderer(tokenizer), **kwargs), TinkerDatasetBuilder)
    with pytest.raises(
        ValueError,
        match=r"model_name_for_tokenizer='.*tiny-chat-v1' loads a tokenizer \(\d+ tokens\) "
        r"that is not the trained model's",
    ):
        make_env_dataset(ARITHMETIC, Renderer(other), **kwargs)


def test_train_script_and_eval_cli_take_a_cookbook_builder(tiny_model_path, tmp_path):
    env_kwargs = json.dumps(
        {
            "batch_size": 2,
            "model_name_for_tokenizer": tiny_model_path,
            "renderer_name": RENDERER_NAME,
            "n_batches": 3,
            "group_size": 4,
            "include_fewshot": False,
        }
    )
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "train_grpo.py")
    out = subprocess.run(
        [
            sys.executable,
            script,
            "--env",
            ARITHMETIC,
            "--env_kwargs",
            env_kwargs,
            "--model_name_or_path",
            tiny_model_path,
            "--output_dir",
            str(tmp_path / "run"),
            "--max_steps",
            "1",
            "--num_generations",
            "4",
            "--per_device_train_batch_size",
            "8",
            "--max_completion_length",
            "4",
            "--card_eval",
            "false",
        ],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    logs = json.loads((tmp_path / "run" / "log_history.json").read_text())
    assert any("env/problems/correct" in h for h in logs)  # the cookbook env's metrics, under its logging tag
    # train_dpo.py: the same builder, one round (group_size from --group_size, batch_size given as an env option)
    dpo_kwargs = json.dumps(
        {
            "batch_size": 4,
            "model_name_for_tokenizer": tiny_model_path,
            "renderer_name": RENDERER_NAME,
            "n_batches": 2,
            "include_fewshot": False,
        }
    )
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "train_dpo.py")
    out = subprocess.run(
        [
            sys.executable,
            script,
            "--env",
            ARITHMETIC,
            "--env_kwargs",
            dpo_kwargs,
            "--model_name_or_path",
            tiny_model_path,
            "--output_dir",
            str(tmp_path / "dpo"),
            "--num_rounds",
            "1",
            "--group_size",
            "8",
            "--max_tokens_per_turn",
            "2",
            "--card_eval",
            "false",
        ],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    logs = json.loads((tmp_path / "dpo" / "log_history.json").read_text())
    assert any(h.get("round") == 1.0 and "env/problems/correct" in h for h in logs), logs
    # trl-envs eval: --samples_per_problem and --num_problems size the cookbook builder's group_size and batch_size
    eval_kwargs = json.dumps(
        {
            "model_name_for_tokenizer": tiny_model_path,
            "renderer_name": RENDERER_NAME,
            "n_batches": 1,
            "include_fewshot": False,
        }
    )
    result = tmp_path / "eval.json"
    from trl_envs.cli.commands import main as trl_envs_cli

    assert (
        trl_envs_cli(
            [
                "eval",
                "--model",
                tiny_model_path,
                "--env",
                ARITHMETIC,
                "--env_kwargs",
                eval_kwargs,
                "--split",
                "train",
                "--num_problems",
                "2",
                "--samples_per_problem",
                "3",
                "--max_tokens",
                "4",
                "--output",
                str(result),
                "--no_progress",
            ]
        )
        == 0
    )
    data = json.loads(result.read_text())
    assert data["num_episodes"] == 6 and data["num_problems"] == 2
    assert "env/problems/correct" in data["metrics"]
