"""Every TextArena and PettingZoo game `trl-envs list` lists trains by name: each is made by name and played to its
end by a scripted player; a sample trains one step from the command line. Games whose library is missing stop with
one line; opponents and observation formatters are chosen in --env_kwargs."""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("textarena")
pytest.importorskip("pettingzoo")

from trl_envs import EnvGRPOTrainer, Renderer  # noqa: E402
from trl_envs.multiplayer.game import IllegalReply  # noqa: E402
from trl_envs.pettingzoo.registry import env_names as pettingzoo_names  # noqa: E402
from trl_envs.registry import make_env_dataset  # noqa: E402
from trl_envs.textarena.registry import env_names as textarena_names  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MAX_MOVES = 2000


def scripted_reply(game, seat: int, rng: random.Random) -> str:
    """A legal move the game names (its move list, or its move generator), else a reply it will not accept (the
    game's own rules end a game that receives too many of them)."""
    try:
        return game.random_reply(seat, rng)
    except IllegalReply:
        return "[0]"


def play_to_the_end(builder) -> tuple[int, dict[int, float]]:
    """One full game of ``builder``'s game, every seat scripted; ``(moves, rewards)``."""
    game, rng, moves = builder.game_factory()(0), random.Random(0), 0
    try:
        while (seat := game.to_move()) is not None:
            assert moves < MAX_MOVES, f"{game.name}: no end after {MAX_MOVES} moves"
            text = game.observe(seat)
            assert isinstance(text, str) and text.strip(), f"{game.name}: seat {seat} was shown no text"
            game.play(seat, scripted_reply(game, seat, rng))
            moves += 1
        return moves, game.rewards()
    finally:
        game.close()


def test_every_listed_textarena_game_is_made_by_name_and_plays_to_its_end(renderer):
    names = textarena_names()
    assert "textarena/ConnectFour-v0" in names and "textarena/Chess-v0" not in names  # a game that cannot start here
    played = 0
    for name, description in names.items():
        if "needs NLTK" in description:  # listed with the download line; training it says the same, in one line
            with pytest.raises(ValueError, match=r"needs NLTK's 'words' data.*nltk\.download\('words'\)") as e:
                make_env_dataset(name, renderer)
            assert "\n" not in str(e.value)
            continue
        builder = make_env_dataset(name, renderer, group_size=60)  # a multiple of any player count 1..6
        moves, rewards = play_to_the_end(builder)
        assert moves >= 1 and sorted(rewards) == list(range(builder.num_players)), name
        played += 1
    assert played >= 150


def test_every_listed_pettingzoo_game_is_made_by_name_and_plays_to_its_end(renderer):
    names = pettingzoo_names()
    assert {"pettingzoo/classic/connect_four_v3", "pettingzoo/classic/go_v5"} <= set(names)
    for name, description in names.items():
        if "needs: pip install" in description:
            with pytest.raises(ImportError, match=r"needs the '\w+' package, which is not installed: pip install"):
                make_env_dataset(name, renderer)
            continue
        make_kwargs = {"board_size": 9} if name.endswith("go_v5") else {}  # a whole 19x19 game takes a while
        builder = make_env_dataset(name, renderer, make_kwargs=make_kwargs)
        moves, rewards = play_to_the_end(builder)
        assert moves >= 1 and len(rewards) == builder.num_players, name


def test_pettingzoo_formatter_by_name_or_import_path(renderer):
    game = make_env_dataset("pettingzoo/classic/connect_four_v3", renderer).game_factory()(0)
    assert "Connect Four" in game.observe(0) and "0 1 2 3 4 5 6" in game.observe(0)
    with pytest.raises(ValueError, match=r"84 numbers \(more than 64.*option 'formatter'"):
        make_env_dataset("pettingzoo/classic/connect_four_v3", renderer, formatter="numbers").game_factory()(0).observe(
            0
        )
    custom = make_env_dataset(
        "pettingzoo/classic/connect_four_v3", renderer, formatter="trl_envs.pettingzoo.text:go_text"
    ).game_factory()(0)
    assert custom.observe(0).startswith("Go on a 6x6 board")  # the named function drew it (badly: it is for go)
    with pytest.raises(ValueError, match="option 'formatter' must be one of"):
        make_env_dataset("pettingzoo/classic/connect_four_v3", renderer, formatter="ascii")


def test_games_without_a_move_list_get_an_opponent_from_the_command_line(renderer):
    # ConnectFour and Nim name no moves: their own move generators play 'random'; KuhnPoker's "available actions".
    for name in ("textarena/ConnectFour-v0", "textarena/Nim-v0", "textarena/KuhnPoker-v0"):
        builder = make_env_dataset(name, renderer, opponent="random")
        assert builder.test_opponent == "random"
        game = builder.game_factory()(0)
        seat = game.to_move()
        game.observe(seat)
        assert game.play(seat, game.random_reply(seat, random.Random(0))), name  # a legal move
    # a game that names no moves: self-play tests it unless an opponent function is named by import path
    assert make_env_dataset("textarena/Alquerque-v0", renderer).test_opponent is None
    named = make_env_dataset("textarena/Alquerque-v0", renderer, test_opponent="random:choice", opponent="self")
    assert named.test_opponent is random.choice and named.opponent is None
    with pytest.raises(ValueError, match="'opponent' is 'random', but the game names no moves"):
        make_env_dataset("textarena/Alquerque-v0", renderer, opponent="random")
    with pytest.raises(ValueError, match="option 'opponent': cannot import 'nowhere:nothing'"):
        make_env_dataset("textarena/Alquerque-v0", renderer, opponent="nowhere:nothing")


def never_moves(text: str, rng: random.Random) -> str:
    raise AssertionError("the test split was played")


def test_no_test_game_is_played_without_evaluation(renderer, tiny_model_path, tokenizer, cpu_grpo_config):
    builder = make_env_dataset("textarena/ConnectFour-v0", Renderer(tokenizer), test_opponent=f"{__name__}:never_moves")
    EnvGRPOTrainer(tiny_model_path, cpu_grpo_config(), builder, processing_class=tokenizer)  # eval_strategy "no"
    with pytest.raises(AssertionError, match="the test split was played"):
        EnvGRPOTrainer(
            tiny_model_path,
            cpu_grpo_config(eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=8),
            builder,
            processing_class=tokenizer,
        )


def train_by_name(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train_grpo.py"), "--max_steps", "1", "--card_eval", "false"]
        + ["--output_dir", str(tmp_path / "out"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )


@pytest.mark.parametrize("name", ["textarena/ConnectFour-v0", "pettingzoo/classic/connect_four_v3"])
def test_a_game_without_a_move_list_trains_one_step_by_name(tmp_path, name):
    # 2 groups of 2 games, not the demo recipe's 16 groups of 8 (a minute of CPU per game here): the step is the point
    proc = train_by_name(tmp_path, "--env", name, "--num_generations", "2", "--per_device_train_batch_size", "4")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "out" / "model.safetensors").exists()


def test_a_game_whose_library_is_missing_stops_with_one_line(tmp_path):
    if importlib.util.find_spec("chess") is not None:
        pytest.skip("python-chess is installed here")
    proc = train_by_name(tmp_path, "--env", "pettingzoo/classic/chess_v6")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("needs the 'chess' package, which is not installed: pip install chess")
    )
