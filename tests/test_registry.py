"""Envs as Hugging Face datasets: the env registry, row specs and their errors, export → save → load_dataset → train,
env plugins found through the ``trl_envs.envs`` entry-point group, and the scripts' ``--env_dataset``."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cpu_configs import cpu_grpo_config
from datasets import Dataset, DatasetDict, load_dataset

from trl_envs import EnvGRPOTrainer
from trl_envs.envs import BUILTIN_ENVS
from trl_envs.envs.arithmetic import ArithmeticDatasetBuilder, ArithmeticGroupBuilder
from trl_envs.registry import (
    EnvRowError,
    get_env,
    list_envs,
    make_env_dataset,
    make_env_group_builder,
    register_env,
    unregister_env,
)
from trl_envs.registry import names as registry
from trl_envs.registry.env_datasets import EnvRowDataset, export_env_dataset, load_env_dataset, rows_to_dataset
from trl_envs.rollout.event_loop import run_sync

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[1]
PLUGIN_SRC = REPO / "tests" / "fixtures" / "example_env_plugin"


def first_observation(builder) -> list[int]:
    async def go():
        envs = await builder.make_envs()
        return [(await e.initial_observation())[0] for e in envs]

    return asyncio.run(go())


@pytest.fixture
def fresh_entry_points():
    """Forget entry points read so far, before and after the test (plugins come and go with sys.path here)."""
    registry.forget_entry_points()
    yield
    registry.forget_entry_points()


# -- the registry ------------------------------------------------------------------------------------------------


def test_builtin_envs_are_listed_with_a_description_and_row_specs():
    envs = list_envs()
    assert {"arithmetic", "guess_number"} <= set(envs)
    assert "a + b" in envs["arithmetic"] and "Higher" in envs["guess_number"]
    kind = get_env("arithmetic")
    assert kind.source == "builtin" and kind.dataset_builder is ArithmeticDatasetBuilder
    assert list(kind.row_fields) == ["a", "b", "format_coef"]
    assert list(get_env("guess_number").row_fields) == ["target", "low", "high", "max_guesses"]


def test_an_env_added_to_builtin_envs_without_rows_trains_by_name_only(renderer, monkeypatch):
    def sums(renderer, group_size=4, batch_size=4, num_batches=10):
        """Sums, by name only."""
        return ArithmeticDatasetBuilder(renderer, batch_size=batch_size, group_size=group_size, num_batches=num_batches)

    monkeypatch.setitem(BUILTIN_ENVS, "sums_by_name", sums)
    assert list_envs()["sums_by_name"] == "Sums, by name only."
    train, _ = run_sync(make_env_dataset("sums_by_name", renderer, group_size=3, groups_per_batch=2, num_batches=5))
    assert len(train) == 5 and len(first_observation(train.get_batch(0)[0])) == 3
    train, _ = run_sync(make_env_dataset("sums_by_name", renderer, group_size=2))  # sizes left to the factory
    assert len(train) == 10 and len(first_observation(train.get_batch(0)[0])) == 2
    with pytest.raises(
        EnvRowError,
        match=r"env row 0, field 'env': env 'sums_by_name' \(builtin\) has no row spec.*"
        r"--env_name sums_by_name",
    ):
        make_env_group_builder({"env": "sums_by_name", "a": 1}, renderer, 2, index=0)


def test_make_env_dataset_passes_sizes_only_to_factories_that_take_them(renderer):
    seen = {}

    def my_envs(renderer, *, max_operand=9):
        seen["max_operand"] = max_operand
        return ArithmeticDatasetBuilder(renderer, group_size=2, max_operand=max_operand)

    with pytest.raises(KeyError, match=r"unknown env 'my_envs_ref'; known envs: \[.*'arithmetic'"):
        make_env_dataset("my_envs_ref", renderer)
    register_env("my_envs_ref", my_envs)
    try:
        out = make_env_dataset("my_envs_ref", renderer, group_size=2, groups_per_batch=3, num_batches=4, max_operand=5)
        assert isinstance(out, ArithmeticDatasetBuilder) and seen == {"max_operand": 5}
    finally:
        unregister_env("my_envs_ref")


def test_register_env_with_a_row_spec(renderer):
    def from_row(renderer, group_size, *, x: int, y: int = 1):
        return ArithmeticGroupBuilder(renderer, x, y, group_size)

    kind = register_env("pairs", from_row=from_row, description="Sums of pairs.")
    try:
        assert kind.dataset_builder is None and list_envs()["pairs"] == "Sums of pairs."
        builder = make_env_group_builder({"env": "pairs", "x": 4}, renderer, 3)
        assert (builder.a, builder.b, builder.num_envs) == (4, 1, 3)
        with pytest.raises(ValueError, match="already registered"):
            register_env("pairs", from_row=from_row)
        with pytest.raises(ValueError, match="trains only from row specs"):
            make_env_dataset("pairs", renderer)
        with pytest.raises(ValueError, match="'arithmetic' is already builtin"):
            register_env("arithmetic", from_row=from_row)
    finally:
        unregister_env("pairs")
    with pytest.raises(EnvRowError, match="unknown env kind 'pairs'"):
        make_env_group_builder({"env": "pairs", "x": 4}, renderer, 3)


def test_module_reference_by_name_but_never_from_a_row(renderer):
    ref = "trl_envs.envs.arithmetic:ArithmeticDatasetBuilder"
    assert get_env(ref).dataset_builder is ArithmeticDatasetBuilder
    assert isinstance(make_env_dataset(ref, renderer, group_size=2), ArithmeticDatasetBuilder)
    with pytest.raises(EnvRowError, match=r"env row 7, field 'env': unknown env kind"):
        make_env_group_builder({"env": ref, "a": 1, "b": 2}, renderer, 2, index=7)
    with pytest.raises(KeyError, match="cannot import 'Nope'"):
        get_env("trl_envs.envs.arithmetic:Nope")


# -- rows: errors, sources, export ---------------------------------------------------------------------------------

GOOD = {"env": "arithmetic", "a": 1, "b": 2}


@pytest.mark.parametrize(
    "bad,expected",
    [
        ({"a": 1, "b": 2}, r"env row 2: missing field 'env'"),
        (
            {"env": "chess", "a": 1},
            r"env row 2, field 'env': unknown env kind 'chess'; env kinds with row specs: "
            r"\[.*'arithmetic', .*'guess_number'.*\]",
        ),
        (
            {"env": "arithmetic", "a": 1},
            r"env row 2, field 'b': missing required field 'b' of env 'arithmetic'; its "
            r"fields are \(a: int, b: int, format_coef: float = 0.1\)",
        ),
        ({"env": "arithmetic", "a": 1, "b": "two"}, r"env row 2, field 'b': env 'arithmetic' expects int, got 'two'"),
        ({"env": "arithmetic", "a": 1, "b": 2.5}, r"env row 2, field 'b': env 'arithmetic' expects int, got 2.5"),
        ({"env": "arithmetic", "a": 1, "b": 2, "c": 3}, r"env row 2, field 'c': env 'arithmetic' takes no field 'c'"),
        (
            {"env": "guess_number", "target": 40},
            r"env row 2: env 'guess_number' rejected the row .*target 40 is outside",
        ),
        ({"env": 3}, r"env row 2, field 'env': expected an env name"),
    ],
)
def test_bad_rows_name_the_row_index_and_the_field(bad, expected, renderer):
    with pytest.raises(EnvRowError, match=expected):
        EnvRowDataset([GOOD, GOOD, bad, GOOD], renderer, group_size=2, groups_per_batch=2)


def test_bad_row_in_a_loaded_dataset_fails_at_construction(renderer):
    rows = [dict(GOOD) for _ in range(2500)]
    rows[2100] = {"env": "arithmetic", "a": 1}
    data = Dataset.from_list(rows)  # null b in row 2100
    with pytest.raises(EnvRowError, match="env row 2100, field 'b': missing required field"):
        EnvRowDataset(data, renderer, group_size=2)


def test_mixed_env_kinds_in_one_dataset(renderer):
    rows = [GOOD, {"env": "guess_number", "target": 7, "high": 8}, {"env": "arithmetic", "a": 2.0, "b": 3}]
    assert Dataset.from_list(rows).column_names == ["env", "a", "b"]  # why rows_to_dataset exists
    data = rows_to_dataset(rows)
    assert data.column_names == ["env", "a", "b", "target", "high"]
    ds = EnvRowDataset(data, renderer, group_size=3, groups_per_batch=2)
    assert len(ds) == 2 and ds.num_rows == 3
    (b0, b1), (b2,) = ds.get_batch(0), ds.get_batch(1)
    assert (b0.a, b0.b) == (1, 2) and (b1.target, b1.low, b1.high) == (7, 1, 8) and (b2.a, b2.b) == (2, 3)
    assert type(b2.a) is int  # Arrow/JSON widened ints come back as int
    with pytest.raises(IndexError, match=r"batch 2 out of range \(0..1\)"):
        ds.get_batch(2)


def test_row_sources_streaming_limits_and_splits(renderer):
    data = export_env_dataset("arithmetic", n=10)
    streamed = EnvRowDataset(data.to_iterable_dataset(), renderer, group_size=2, groups_per_batch=3, num_batches=2)
    assert len(streamed) == 2 and streamed.num_rows == 6
    assert [b.to_row() for b in streamed.get_batch(1)] == list(data.select(range(3, 6)))
    assert len(EnvRowDataset(data, renderer, 2, 4)) == 3  # the last batch is shorter
    with pytest.raises(ValueError, match=r"DatasetDict with splits \['train'\]; pass one split"):
        EnvRowDataset(DatasetDict(train=data), renderer, 2)
    with pytest.raises(ValueError, match="no rows"):
        EnvRowDataset([], renderer, 2)


def test_export_gives_the_groups_the_env_trains_on_by_name(renderer):
    train, test = run_sync(make_env_dataset("arithmetic", renderer, group_size=2))
    by_name = [b.to_row() for i in range(3) for b in train.get_batch(i)]
    assert list(export_env_dataset("arithmetic", n=12)) == by_name
    assert list(export_env_dataset("arithmetic", split="test", n=4)) == [b.to_row() for b in test.get_batch(0)]
    assert export_env_dataset("arithmetic", n=4, seed=1)["a"] != export_env_dataset("arithmetic", n=4)["a"]
    # a row plays exactly the group it came from
    row_ds = EnvRowDataset(export_env_dataset("arithmetic", n=4), renderer, group_size=2, groups_per_batch=4)
    assert [first_observation(b) for b in row_ds.get_batch(0)] == [first_observation(b) for b in train.get_batch(0)]
    games = export_env_dataset("guess_number", split="test", n=20, seed=3, low=1, high=8)
    assert set(games["high"]) == {8} and all(1 <= t <= 8 for t in games["target"]) and len(set(games["target"])) > 1
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        export_env_dataset("arithmetic", split="validation")


def test_row_builders_and_datasets_pickle(renderer):
    ds = EnvRowDataset(rows_to_dataset([GOOD, {"env": "guess_number", "target": 5}]), renderer, 2, 2)
    copy = pickle.loads(pickle.dumps(ds))
    for original, restored in zip(ds.get_batch(0), pickle.loads(pickle.dumps(list(copy.get_batch(0)))), strict=True):
        assert first_observation(original) == first_observation(restored)


# -- the round trip: env -> Dataset -> disk -> load_dataset -> RLDataset -> training ---------------------------------


def test_round_trip_export_save_load_dataset_and_train(tmp_path, tiny_model_path, tokenizer, renderer):
    exported = export_env_dataset("arithmetic", n=16, seed=0, max_operand=3)
    (tmp_path / "rows").mkdir()
    exported.to_parquet(str(tmp_path / "rows" / "train.parquet"))
    export_env_dataset("arithmetic", split="test", n=4, max_operand=3).to_parquet(
        str(tmp_path / "rows" / "test.parquet")
    )
    exported.save_to_disk(str(tmp_path / "saved"))

    loaded = load_dataset(str(tmp_path / "rows"), split="train")  # a folder of data files, as from the Hub
    assert list(loaded) == list(exported)
    assert list(load_env_dataset(str(tmp_path / "saved"))) == list(exported)
    assert list(load_env_dataset(str(tmp_path / "rows" / "test.parquet"), "test"))[0]["env"] == "arithmetic"

    args = cpu_grpo_config(tmp_path, per_device_eval_batch_size=8, max_steps=2)
    eval_rows = load_dataset(str(tmp_path / "rows"), split="test")
    trainer = EnvGRPOTrainer(tiny_model_path, args, env_dataset=loaded, eval_env_dataset=eval_rows)  # no tokenizer
    assert isinstance(trainer.train_groups.dataset, EnvRowDataset) and trainer.eval_groups is not None
    assert trainer.train_groups.dataset.groups_per_batch == 2  # generation batch 8 / 4 per group
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters()), "no parameter moved"
    logged = [h for h in trainer.state.log_history if "env/arithmetic/reward/total" in h]
    assert len(logged) == 2
    # the groups played are the dataset's rows (step 2 = rows 2 and 3), each a group of num_generations envs
    questions = {f"What is {r['a']} + {r['b']}?" for r in exported}
    played = {t.logs["question"] for g in trainer.last_rollout.groups for tr in g.trajectories for t in tr.transitions}
    assert played and played <= questions
    assert all(len(g.trajectories) == 4 for g in trainer.last_rollout.groups)


# -- plugins through the entry-point group --------------------------------------------------------------------------


def _skip_without_a_wheel_builder() -> None:
    """Without build isolation pip builds the plugin with this venv's setuptools, which makes wheels by itself from
    70.1 on and with the ``wheel`` package before (``invalid command 'bdist_wheel'`` otherwise): a fresh venv of
    Python 3.11 has setuptools 65.5 and no ``wheel``, and nothing can be fetched offline."""
    import importlib.metadata
    import importlib.util

    from packaging.version import Version

    try:
        setuptools = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("no setuptools in this venv: the example plugin cannot be built without build isolation")
    if Version(setuptools) < Version("70.1") and importlib.util.find_spec("wheel") is None:
        pytest.skip(
            f"setuptools {setuptools} without the wheel package cannot build the example plugin offline "
            "(bdist_wheel: setuptools >= 70.1 or wheel)"
        )


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory):
    """pip-installs tests/fixtures/example_env_plugin into a fresh target folder (no network, no build isolation)."""
    _skip_without_a_wheel_builder()
    work = tmp_path_factory.mktemp("plugin")
    shutil.copytree(PLUGIN_SRC, work / "src", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(work / "site"),
            str(work / "src"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    if proc.returncode != 0:
        pytest.fail(f"pip install of the example plugin failed:\n{proc.stdout}\n{proc.stderr}")
    return work / "site"


def test_env_from_an_installed_package_is_found_through_its_entry_point(
    installed_plugin, renderer, monkeypatch, fresh_entry_points
):
    with pytest.raises(KeyError, match="unknown env 'echo_word'"):
        get_env("echo_word")
    monkeypatch.syspath_prepend(str(installed_plugin))  # as if installed in site-packages
    try:
        envs = list_envs()
        assert envs["echo_word"] == "Repeat a given word (an example plugin env)."
        assert envs["echo_word_by_name"] == "Repeat a given word (an example plugin env)."  # the factory's docstring
        kind = get_env("echo_word")
        assert kind.source == "entry point of trl-envs-example-plugin 0.1.0"
        assert sys.modules["example_env_plugin"].__file__.startswith(str(installed_plugin))
        builder = make_env_group_builder({"env": "echo_word", "word": "stone"}, renderer, 3)
        assert len(first_observation(builder)) == 3
        question = renderer.tokenizer.decode(first_observation(builder)[0])
        assert "Repeat the word: stone" in question
        with pytest.raises(
            EnvRowError,
            match=r"env row 1, field 'word': missing required field 'word' of env "
            r"'echo_word'",
        ):
            EnvRowDataset([{"env": "echo_word", "word": "a"}, {"env": "echo_word"}], renderer, 2)
        rows = export_env_dataset("echo_word_by_name", n=3)  # a plain factory with from_row: exportable too
        assert rows.column_names == ["env", "word"] and len(rows) == 3
        train, _ = run_sync(make_env_dataset("echo_word", renderer, group_size=2, groups_per_batch=1, num_batches=2))
        assert len(train) == 2
    finally:
        sys.modules.pop("example_env_plugin", None)


def test_a_broken_plugin_is_reported_not_fatal(tmp_path, monkeypatch, fresh_entry_points):
    dist = tmp_path / "broken_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[trl_envs.envs]\nbroken_env = no_such_module_xyz:ENV\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    envs = list_envs()
    assert envs["broken_env"].startswith("(failed to load: ImportError") and "arithmetic" in envs
    with pytest.raises(
        ImportError,
        match=r"env 'broken_env': loading entry point 'no_such_module_xyz:ENV' "
        r"\(entry point of broken-plugin 1.0\) failed",
    ):
        get_env("broken_env")


# -- the scripts ------------------------------------------------------------------------------------------------------


def test_train_grpo_script_trains_on_an_env_dataset(tmp_path, tiny_model_path):
    export_env_dataset("guess_number", n=8, high=4).to_json(str(tmp_path / "games.jsonl"))
    out = tmp_path / "out"
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRL_EXPERIMENTAL_SILENCE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "train_grpo.py"),
            "--model_name_or_path",
            tiny_model_path,
            "--env_dataset",
            str(tmp_path / "games.jsonl"),
            "--max_steps",
            "1",
            "--num_generations",
            "4",
            "--per_device_train_batch_size",
            "8",
            "--max_completion_length",
            "4",
            "--max_turns",
            "3",
            "--output_dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    history = json.loads((out / "log_history.json").read_text())
    assert any("env/guess_number/reward/total" in h for h in history), history


def test_train_dpo_script_on_an_env_dataset_and_a_module_factory(tmp_path, tiny_model_path, monkeypatch, capsys):
    import importlib.util

    export_env_dataset("arithmetic", n=4, max_operand=3).save_to_disk(str(tmp_path / "sums"))
    spec = importlib.util.spec_from_file_location("train_dpo_registry", REPO / "scripts" / "train_dpo.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)
    spec.loader.exec_module(script)
    common = [
        "--model_name_or_path",
        tiny_model_path,
        "--num_rounds",
        "1",
        "--groups_per_round",
        "2",
        "--group_size",
        "4",
        "--max_steps",
        "1",
        "--logging_steps",
        "1",
    ]
    monkeypatch.setattr(
        sys,
        "argv",
        ["train_dpo.py", "--env_dataset", str(tmp_path / "sums"), *common, "--output_dir", str(tmp_path / "a")],
    )
    script.main(*script.make_parser().parse_args_and_config())
    assert "round  1/1 | env reward" in capsys.readouterr().out
    assert "env:arithmetic" in (tmp_path / "a" / "README.md").read_text()  # the card names the rows' env kind
    from transformers import AutoTokenizer

    from trl_envs.cli.training_script import make_envs

    factory = "trl_envs.envs.guess_number:GuessNumberDatasetBuilder"
    envs, names = make_envs(
        script.ScriptArguments(env_name=factory),
        AutoTokenizer.from_pretrained(tiny_model_path),
        env_name=factory,
        env_kwargs={},
        group_size=2,
        groups_per_batch=3,
        seed=0,
    )
    assert names == [factory]
    train, _ = run_sync(envs)
    assert len(train.get_batch(0)) == 3 and len(first_observation(train.get_batch(0)[0])) == 2


def test_env_kwargs_from_a_command_line_or_a_yaml_mapping():
    from trl_envs.registry import parse_env_kwargs

    assert parse_env_kwargs('{"max_operand": 3}') == parse_env_kwargs({"max_operand": 3}) == {"max_operand": 3}
    assert parse_env_kwargs(None) == {}
    with pytest.raises(ValueError, match=r"--env_kwargs: invalid JSON"):
        parse_env_kwargs("{max_operand: 3}")
    with pytest.raises(ValueError, match=r"--env_kwargs: expected a JSON object"):
        parse_env_kwargs("[3]")


def test_imported_objects_reach_their_library_adapter_by_name(monkeypatch):
    """An object imported from ``module:attr`` whose class comes from a library listed in IMPORTED_OBJECT_ADAPTERS is
    handed to that adapter module (imported by name, only then); ``None`` from the adapter means an ordinary factory."""
    import types

    from trl_envs.registry import EnvKind, names

    seen = []

    def imported_env_kind(ref, obj):
        seen.append((ref, obj))
        if obj.__name__ == "JSONDecoder":
            return EnvKind(ref, "adapted", dataset_builder=lambda renderer=None: None, source="import (fake)")
        return None

    adapter = types.ModuleType("fake_json_adapter")
    adapter.imported_env_kind = imported_env_kind
    monkeypatch.setitem(sys.modules, "fake_json_adapter", adapter)
    monkeypatch.setitem(names.IMPORTED_OBJECT_ADAPTERS, "json", "fake_json_adapter")

    assert get_env("json.decoder:JSONDecoder").source == "import (fake)"
    assert get_env("json.encoder:JSONEncoder").source == "import"  # the adapter declined it
    assert seen == [("json.decoder:JSONDecoder", json.JSONDecoder), ("json.encoder:JSONEncoder", json.JSONEncoder)]


def test_every_built_in_envs_description_is_a_whole_sentence():
    """`trl-envs list` shows the docstring's summary whole, even when it wraps over two lines."""
    from trl_envs.envs import BUILTIN_ENVS
    from trl_envs.registry.names import list_envs

    envs = list_envs()
    for name in BUILTIN_ENVS:
        assert envs[name].endswith("."), f"{name}: {envs[name]!r} is cut"
    assert envs["openenv"].endswith("reply -> action.")


# -- every listed env exports or says why ------------------------------------------------------------------------


def _export_outcome(name):
    try:
        return export_env_dataset(name, n=2), None
    except Exception as e:  # noqa: BLE001 - the outcome is checked by the caller
        return None, e


def _family_samples() -> list[str]:
    """A few names of each installed family (every one would take minutes: some reasoning_gym tasks build slowly)."""
    envs = list_envs()
    picks = []
    for prefix, wanted in (
        ("reasoning_gym/", ("basic_arithmetic", "chain_sum")),
        ("textarena/", ("TicTacToe-v0",)),
        ("pettingzoo/", ("classic/tictactoe_v3",)),
    ):
        picks += [prefix + w for w in wanted if prefix + w in envs]
    return picks


def test_every_named_env_exports_rows_that_play_or_refuses_in_one_line(tmp_path, renderer):
    """tic_tac_toe, tool_use and judged_arithmetic used to fail with a traceback or a group_size error; now each env
    either writes rows that load back and play, or refuses in one line naming it and the envs that export."""
    exported, refused = [], []
    for name in [n for n in list_envs() if "/" not in n] + _family_samples():
        rows, error = _export_outcome(name)
        if error is None:
            path = tmp_path / f"{name.replace('/', '_')}.jsonl"
            rows.to_json(str(path))
            loaded = load_env_dataset(str(path))
            assert list(loaded) == list(rows), name
            (builder,) = EnvRowDataset(loaded, renderer, group_size=2, groups_per_batch=1, num_batches=1).get_batch(0)
            assert all(first_observation(builder)), name
            exported.append(name)
            continue
        message = str(error)
        assert isinstance(error, ValueError) and "\n" not in message, (name, repr(error))
        assert f"env {name!r}" in message, message
        if name in ("tic_tac_toe", "tool_use", "judged_arithmetic", "cartpole", "textarena/TicTacToe-v0"):
            assert "envs that export: arithmetic, guess_number, reasoning_gym/<name>" in message, message
        refused.append(name)
    # reasoning_gym/chain_sum is a name only where the optional reasoning-gym is installed (_family_samples)
    expected = {"arithmetic", "guess_number"} | ({"reasoning_gym/chain_sum"} & set(list_envs()))
    assert expected <= set(exported)
    assert {"tic_tac_toe", "tool_use", "judged_arithmetic"} <= set(refused)


def test_export_takes_a_group_size_option_the_env_rows_do_not_depend_on():
    assert list(export_env_dataset("arithmetic", n=3, group_size=4)) == list(export_env_dataset("arithmetic", n=3))


def test_a_misnamed_kind_column_names_the_file_and_the_columns_found(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"envv": "arithmetic", "a": 2, "b": 3}\n')
    with pytest.raises(
        ValueError,
        match=r"rows.jsonl' has no 'env' column.*columns found: \['envv', 'a', 'b'\]; "
        r"rename 'envv' to 'env'\?",
    ):
        load_env_dataset(str(path))
    Dataset.from_dict({"kind": ["arithmetic"], "a": [2], "b": [3]}).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(ValueError, match=r"saved' has no 'env' column.*columns found: \['kind', 'a', 'b'\]$"):
        load_env_dataset(str(tmp_path / "saved"))
