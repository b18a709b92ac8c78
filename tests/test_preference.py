"""Preference pairs from trajectory groups, the masked preference collator, and the built-in preference dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trl_envs import (
    DataCollatorForMaskedPreference,
    NonExtendingObservationError,
    PairStats,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
    make_preference_pairs,
)

PROMPT = [1, 2, 3]


def traj(*turns, prompt=PROMPT) -> Trajectory:
    """A trajectory from ``(action, reward, env_tokens_after)`` turns; observations extend token-exactly."""
    transitions, ob = [], list(prompt)
    for i, (action, reward, env_tokens) in enumerate(turns):
        done = i == len(turns) - 1
        transitions.append(Transition(list(ob), TokensWithLogprobs(list(action), [-0.5] * len(action)), reward, done))
        ob = ob + list(action) + list(env_tokens)
    return Trajectory(transitions, ob)


def group(*trajectories, group_rewards=None, tags=("toy",)) -> TrajectoryGroup:
    n = len(trajectories)
    return TrajectoryGroup(list(trajectories), group_rewards or [0.0] * n, [{} for _ in range(n)], list(tags))


def test_best_is_chosen_worst_is_rejected():
    g = group(traj(([10], 0.5, [])), traj(([11], 1.0, [])), traj(([12], -0.1, [])), traj(([13], 0.0, [])))
    pairs, stats = make_preference_pairs([g])
    assert stats == PairStats(num_groups=1, num_pairs=1)
    (p,) = pairs
    assert (p.prompt_ids, p.chosen_ids, p.rejected_ids) == (PROMPT, [11], [12])
    assert (p.chosen_reward, p.rejected_reward) == (1.0, -0.1)
    assert p.as_row()["chosen_mask"] == [1] and p.tags == ["toy"]


def test_total_reward_includes_group_rewards():
    # Step rewards favour trajectory 0, but the group reward (e.g. a judge) reverses the order.
    g = group(traj(([10], 1.0, [])), traj(([11], 0.0, [])), group_rewards=[0.0, 2.0])
    (p,), _ = make_preference_pairs([g])
    assert (p.chosen_ids, p.rejected_ids) == ([11], [10])


def test_multi_turn_pair_masks_env_tokens():
    chosen = traj(([10, 99], -0.1, [50, 51, 52]), ([11, 99], 1.0, []))
    rejected = traj(([12, 99], -0.1, [60, 61]), ([13, 99], -0.1, []))
    (p,), _ = make_preference_pairs([group(rejected, chosen)])
    assert p.chosen_ids == [10, 99, 50, 51, 52, 11, 99]
    assert p.chosen_mask == [1, 1, 0, 0, 0, 1, 1]
    assert p.rejected_ids == [12, 99, 60, 61, 13, 99]
    assert p.rejected_mask == [1, 1, 0, 0, 1, 1]


def test_unpairable_groups_are_counted_by_reason():
    ties = group(traj(([10], 1.0, [])), traj(([11], 1.0, [])))
    small = group(traj(([10], 1.0, [])))
    other_prompt = group(traj(([10], 1.0, [])), traj(([11], 0.0, []), prompt=[7, 7]))
    identical = group(traj(([10], 1.0, [])), traj(([10], 0.0, [])))  # a noisy reward, same sampled tokens
    good = group(traj(([10], 1.0, [])), traj(([11], 0.0, [])))
    pairs, stats = make_preference_pairs([ties, small, None, other_prompt, identical, good])
    assert len(pairs) == 1
    assert stats == PairStats(num_groups=6, num_pairs=1, ties=1, too_small=1, prompt_mismatch=1, identical=1, skipped=1)
    assert stats.num_unpaired == 5
    assert stats.as_metrics()["pairs/ties"] == 1.0


def test_min_reward_gap():
    g = group(traj(([10], 0.05, [])), traj(([11], 0.0, [])))
    assert len(make_preference_pairs([g])[0]) == 1
    pairs, stats = make_preference_pairs([g], min_reward_gap=0.1)
    assert pairs == [] and stats.ties == 1
    with pytest.raises(ValueError, match="min_reward_gap"):
        make_preference_pairs([g], min_reward_gap=-1)


def test_ties_pick_the_earliest_trajectory_deterministically():
    g = group(traj(([10], 1.0, [])), traj(([11], 1.0, [])), traj(([12], 0.0, [])), traj(([13], 0.0, [])))
    (p,), _ = make_preference_pairs([g])
    assert (p.chosen_ids, p.rejected_ids) == ([10], [12])


def test_non_extending_observation_is_an_error_not_a_silent_pair():
    bad = traj(([10], 0.0, [50]), ([11], 1.0, []))
    bad.transitions[1].ob = [1, 2, 3, 99]  # history rewritten
    with pytest.raises(NonExtendingObservationError, match="toy"):
        make_preference_pairs([group(bad, traj(([12], 0.0, [])))])


def test_pair_stats_add():
    assert PairStats(2, 1, ties=1) + PairStats(3, 2, skipped=1) == PairStats(5, 3, ties=1, skipped=1)


# -- the collator ----------------------------------------------------------------------------------------------


def test_collator_applies_token_masks_to_completion_mask():
    collator = DataCollatorForMaskedPreference(pad_token_id=0)
    out = collator(
        [
            {
                "prompt_ids": [1, 2],
                "chosen_ids": [3, 4, 5],
                "rejected_ids": [6],
                "chosen_mask": [1, 0, 1],
                "rejected_mask": [1],
            },
            {
                "prompt_ids": [7],
                "chosen_ids": [8],
                "rejected_ids": [9, 10],
                "chosen_mask": [1],
                "rejected_mask": [0, 1],
            },
        ]
    )
    assert out["input_ids"].tolist() == [[1, 2, 3, 4, 5], [7, 8, 0, 0, 0], [1, 2, 6, 0, 0], [7, 9, 10, 0, 0]]
    assert out["completion_mask"].tolist() == [[0, 0, 1, 0, 1], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0]]


def test_collator_without_masks_is_trls_and_truncates_masks_with_ids():
    plain = [{"prompt_ids": [1, 2], "chosen_ids": [3, 4], "rejected_ids": [5]}]
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    ours, theirs = DataCollatorForMaskedPreference(pad_token_id=0)(plain), DataCollatorForPreference(0)(plain)
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    cut = DataCollatorForMaskedPreference(pad_token_id=0, max_length=4)(
        [
            {
                "prompt_ids": [1, 2],
                "chosen_ids": [3, 4, 5],
                "rejected_ids": [6],
                "chosen_mask": [0, 1, 1],
                "rejected_mask": [1],
            }
        ]
    )
    assert cut["completion_mask"].tolist() == [[0, 0, 0, 1], [0, 0, 1, 0]]


def test_collator_rejects_a_mask_of_the_wrong_length():
    with pytest.raises(ValueError, match="3 chosen_ids but 2 chosen_mask"):
        DataCollatorForMaskedPreference(pad_token_id=0)(
            [{"prompt_ids": [1], "chosen_ids": [3, 4, 5], "rejected_ids": [6], "chosen_mask": [1, 1]}]
        )


# -- the built-in preference dataset --------------------------------------------------------------------------


def test_builtin_preference_dataset(tmp_path):
    from trl_envs.envs.arithmetic import ArithmeticEnv
    from trl_envs.training_data.preference_data import (
        arithmetic_preference_rows,
        build_preference_dataset,
        load_preference_dataset,
    )

    path = build_preference_dataset(str(tmp_path / "prefs"), num_train=32, num_test=8)
    assert build_preference_dataset(str(tmp_path / "prefs")) == path  # cached: reused as is
    data = load_preference_dataset(path)
    assert {split: len(ds) for split, ds in data.items()} == {"train": 32, "test": 8}
    assert {"prompt", "chosen", "rejected"} <= set(data["train"].column_names)
    for row in data["train"]:
        a, b = (int(x) for x in row["prompt"][0]["content"].removeprefix("What is ").rstrip("?").split(" + "))
        env = ArithmeticEnv(None, a, b)
        assert env.check_answer(row["chosen"][0]["content"]) and not env.check_answer(row["rejected"][0]["content"])
        assert (row["chosen_reward"], row["rejected_reward"]) == (1.0, 0.0)
    assert arithmetic_preference_rows(4, seed=1) == arithmetic_preference_rows(4, seed=1)  # deterministic
    assert data["test"]["prompt"] != data["train"]["prompt"][:8]  # another seed


def test_mapping_the_shipped_preference_dataset_writes_nothing_into_the_package():
    from trl_envs.training_data.preference_data import load_preference_dataset, shipped_preference_dataset_path

    folder = Path(shipped_preference_dataset_path())
    before = sorted(p for p in folder.rglob("*") if p.is_file())
    data = load_preference_dataset()
    mapped = data["train"].map(lambda row: {"n": len(row["prompt"])})  # as TRL's tokenization maps it
    assert len(mapped) == len(data["train"]) and mapped.cache_files == []
    assert sorted(p for p in folder.rglob("*") if p.is_file()) == before


# -- where the prompt comes from -------------------------------------------------------------------------------


def _user(text):
    return {"role": "user", "content": text}


def _assistant(text):
    return {"role": "assistant", "content": text}


@pytest.mark.parametrize("alias", ["question", "instruction", "input"])
def test_a_prompt_alias_column_is_used_and_said(alias, tokenizer):
    from datasets import Dataset

    from trl_envs.training_data.preference_checks import check_raw_preferences

    data = Dataset.from_dict(
        {alias: ["What is 6 + 6?", "What is 2 + 2?"], "chosen": ["12", "4"], "rejected": ["13", "5"]}
    )
    with pytest.warns(UserWarning, match=rf"no 'prompt' column; its '{alias}' column is used as the prompt"):
        checked = check_raw_preferences(data, "train", tokenizer)
    assert checked["prompt"] == ["What is 6 + 6?", "What is 2 + 2?"]
    assert alias not in checked.column_names


def test_several_alias_columns_are_named_not_guessed(tokenizer):
    from datasets import Dataset

    from trl_envs.training_data.preference_checks import check_raw_preferences

    data = Dataset.from_dict({"instruction": ["Add"], "input": ["6 + 6"], "chosen": ["12"], "rejected": ["13"]})
    with pytest.raises(ValueError, match=r"several that could be it: \['instruction', 'input'\]"):
        check_raw_preferences(data, "train", tokenizer)


def test_text_answers_without_a_prompt_column_name_the_columns_found(tokenizer):
    """TRL's implicit prompt on text takes the common leading characters: '12' / '13' would train on prompt '1'."""
    from datasets import Dataset

    from trl_envs.training_data.preference_checks import check_raw_preferences

    data = Dataset.from_dict({"query": ["What is 6 + 6?"], "chosen": ["12"], "rejected": ["13"]})
    with pytest.raises(ValueError, match=r"no 'prompt' column.*Columns found: \['query', 'chosen', 'rejected'\]"):
        check_raw_preferences(data, "train", tokenizer)


def test_conversations_sharing_a_prompt_are_an_implicit_prompt(tokenizer):
    from datasets import Dataset

    from trl_envs.training_data.preference_checks import check_raw_preferences

    rows = [
        {
            "chosen": [_user(f"What is {a} + 1?"), _assistant(str(a + 1))],
            "rejected": [_user(f"What is {a} + 1?"), _assistant("0")],
        }
        for a in range(3)
    ]
    checked = check_raw_preferences(Dataset.from_list(rows), "train", tokenizer)
    assert len(checked) == 3 and "prompt" not in checked.column_names  # TRL extracts the shared messages


def test_rows_whose_implicit_prompt_is_empty_are_named(tokenizer):
    from datasets import Dataset

    from trl_envs.training_data.preference_checks import check_raw_preferences

    shared = [_user("What is 1 + 1?")]
    rows = [{"chosen": shared + [_assistant("2")], "rejected": shared + [_assistant("3")]} for _ in range(4)]
    rows[1] = {"chosen": [_assistant("2")], "rejected": [_assistant("3")]}
    rows[3] = {"chosen": [_user("What is 1 + 1?"), _assistant("2")], "rejected": [_user("1 + 1?"), _assistant("3")]}
    with pytest.raises(ValueError, match=r"in rows 1, 3 \(2 of 4\).*implicit prompt is empty"):
        check_raw_preferences(Dataset.from_list(rows), "train", tokenizer)
