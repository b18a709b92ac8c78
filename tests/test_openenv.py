"""OpenEnv envs (trl_envs.openenv) against a real OpenEnv server on 127.0.0.1 (tests/openenv_server.py, written with
OpenEnv's server API, in a subprocess): GRPO training, `trl-envs eval`, sessions per episode and their cleanup, a
server killed mid-rollout, a session limit, rejected actions, a server that is down, bad options."""

from __future__ import annotations

import json
import os
import re
import selectors
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("openenv")
pytest.importorskip("uvicorn")

from trl_envs import EnvGRPOTrainer, Renderer  # noqa: E402
from trl_envs.openenv import (  # noqa: E402
    OpenEnvActionError,
    OpenEnvCapacityError,
    OpenEnvConnectionError,
    OpenEnvDatasetBuilder,
    OpenEnvServerGone,
    io_loop,
)
from trl_envs.registry import EnvRowError, make_env_dataset, make_env_group_builder  # noqa: E402
from trl_envs.rollout.engine import FailFast, RetryOnFailure, RolloutBudget, run_rollout_batch  # noqa: E402
from trl_envs.rollout.event_loop import run_sync  # noqa: E402
from trl_envs.samplers.text_policy import TextPolicySampler  # noqa: E402

pytestmark = pytest.mark.timeout(240)
SERVER = Path(__file__).with_name("openenv_server.py")


class Server:
    """tests/openenv_server.py in a subprocess; ``url``; ``sessions()`` asks it how many env sessions are alive."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        deadline, seen = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            if not selector.select(timeout=deadline - time.monotonic()):
                break
            line = self.proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if match := re.match(r"PORT (\d+)", line):
                self.url = f"http://127.0.0.1:{match[1]}"
                self.log = seen
                # keep reading its output: a full pipe would block the server on its next log line
                threading.Thread(target=lambda: self.log.extend(self.proc.stdout), daemon=True).start()
                return
        self.stop()
        raise RuntimeError(f"the test OpenEnv server did not start: {''.join(seen)}")

    def sessions(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/test/sessions", timeout=10) as r:
            return json.loads(r.read())

    def live_sessions_soon(self, expected: int = 0, wait_s: float = 5.0) -> int:
        """The live session count once it reaches ``expected`` (the server closes a session when it sees the close,
        a moment after the client sent it), or whatever it is after ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while (live := self.sessions()["live"]) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        return live

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()


@pytest.fixture(scope="module")
def shared():
    """One server for the tests that leave it running (each checks its own sessions are closed)."""
    srv = Server()
    yield srv
    srv.stop()


@pytest.fixture
def server():
    servers: list[Server] = []

    def start(*args: str) -> Server:
        servers.append(Server(*args))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def digit_policy(prompt: str) -> str:
    """Says the digit the env asks for (the last 'say N.' of the prompt)."""
    return re.findall(r"[Ss]ay (\d)\.", prompt)[-1]


def batch(url: str, renderer: Renderer, groups: int = 2, group_size: int = 3, **options):
    builder = OpenEnvDatasetBuilder(
        renderer,
        url=url,
        group_size=group_size,
        batch_size=groups,
        num_batches=1,
        num_test_batches=0,
        seed=5,
        **options,
    )
    train, _ = run_sync(builder)
    return train.get_batch(0)


def test_scripted_episodes_map_observations_actions_and_rewards(shared, renderer):
    srv = shared
    sampler = TextPolicySampler(renderer, digit_policy)
    made = srv.sessions()["made"]
    result = run_rollout_batch(batch(srv.url, renderer), sampler, RolloutBudget(max_turns=4, max_tokens_per_turn=8))
    for group, seed in zip(result.groups, (5, 6)):
        for traj in group.trajectories:
            assert traj.stop_reason == "done" and len(traj.transitions) == 2
            assert [t.reward for t in traj.transitions] == [1.0, 1.0]  # the group's seed reached the server's reset
            first = renderer.tokenizer.decode(traj.transitions[0].ob)
            assert f"Say {seed % 10}." in first
            assert f"Again: say {seed % 10}." in renderer.tokenizer.decode(traj.transitions[1].ob)
            assert traj.transitions[1].ob[: len(traj.transitions[0].ob)] == traj.transitions[0].ob  # token-exact
            assert traj.transitions[0].logs["metadata"] == {"said": str(seed % 10)}
        assert group.tags == ["openenv"]
    assert srv.live_sessions_soon() == 0 and srv.sessions()["made"] - made == 6  # one session per episode, all closed
    assert io_loop.open_sessions() == []


def test_grpo_trains_two_steps_through_the_server_by_name(shared, tiny_model_path, tokenizer, cpu_grpo_config):
    srv = shared
    made = srv.sessions()["made"]
    envs = make_env_dataset(
        "openenv",
        Renderer(tokenizer),
        group_size=4,
        groups_per_batch=2,
        url=srv.url,
        system_prompt="Answer with one digit.",
    )
    trainer = EnvGRPOTrainer(
        tiny_model_path, cpu_grpo_config(max_steps=2, max_turns=2), envs, processing_class=tokenizer
    )
    trainer.train()
    logged = [h for h in trainer.state.log_history if "env/openenv/reward/total" in h]
    assert len(logged) == 2
    assert srv.live_sessions_soon() == 0
    assert srv.sessions()["made"] - made == 2 * 2 * 4  # 2 steps x 2 groups x 4 episodes, one session each


def test_trl_envs_eval_on_the_server(shared, tiny_model_path, tmp_path):
    from trl_envs.cli.commands import main

    srv = shared
    made = srv.sessions()["made"]
    out = tmp_path / "eval.json"
    assert (
        main(
            [
                "eval",
                "--model",
                tiny_model_path,
                "--env",
                "openenv",
                "--env_kwargs",
                json.dumps({"url": srv.url}),
                "--num_problems",
                "2",
                "--samples_per_problem",
                "2",
                "--max_tokens",
                "4",
                "--output",
                str(out),
                "--no_progress",
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["num_episodes"] == 4 and "openenv" in result["per_tag"], result
    assert srv.live_sessions_soon() == 0 and srv.sessions()["made"] - made == 4


def test_row_specs_build_groups_of_the_server(shared, renderer):
    srv = shared
    builder = make_env_group_builder({"env": "openenv", "url": srv.url, "seed": 7}, renderer, group_size=2)
    result = run_rollout_batch([builder], TextPolicySampler(renderer, digit_policy), RolloutBudget(max_turns=4))
    assert [t.step_reward for t in result.groups[0].trajectories] == [2.0, 2.0]
    with pytest.raises(EnvRowError, match="url"):
        make_env_group_builder({"env": "openenv", "seed": 7}, renderer, group_size=2)


def killing_policy(srv: Server):
    def policy(prompt: str) -> str:
        if srv.proc.poll() is None:
            srv.kill()  # mid-rollout: every episode has its session open and is about to step
        return digit_policy(prompt)

    return policy


def test_server_killed_mid_rollout_fail_fast_names_the_url(server, renderer):
    srv = server()
    groups = batch(srv.url, renderer)
    start = time.monotonic()
    with pytest.raises(OpenEnvConnectionError, match=re.escape(srv.url)):
        run_rollout_batch(
            groups,
            TextPolicySampler(renderer, killing_policy(srv)),
            RolloutBudget(max_turns=4),
            FailFast(per_rollout_timeout=60),
        )
    assert time.monotonic() - start < 30  # an error at once, not a hang until some timeout
    assert io_loop.open_sessions() == []


def test_server_gone_for_good_under_retry_stops_naming_the_url(server, renderer, caplog):
    srv = server()
    groups = batch(srv.url, renderer, reconnect_timeout_s=2)
    start = time.monotonic()
    with caplog.at_level("WARNING", logger="trl_envs.openenv.session"):
        with pytest.raises(OpenEnvServerGone, match=f"OpenEnv server at {re.escape(srv.url)} did not come back"):
            run_rollout_batch(
                groups,
                TextPolicySampler(renderer, killing_policy(srv)),
                RolloutBudget(max_turns=4),
                RetryOnFailure(max_retries=1, per_rollout_timeout=60),
            )
    assert time.monotonic() - start < 30  # the reconnect allowance, not a retry budget spent in a tight loop
    waits = [float(m[1]) for r in caplog.records if (m := re.search(r"trying again in ([\d.]+) s", r.getMessage()))]
    assert waits[:2] == [0.5, 1.0] and waits == sorted(set(waits))  # backed off, doubling; one line per wait
    assert all(srv.url in r.getMessage() for r in caplog.records if "trying again" in r.getMessage())
    assert io_loop.open_sessions() == []


def restarting_policy(srv: Server, down_s: float, episodes: int):
    """Kills the server once every one of ``episodes`` episodes has asked for its first reply (all hold an open
    session and are about to step), and starts it again on the same port ``down_s`` seconds later."""
    port = srv.url.rsplit(":", 1)[1]
    restarted: list[Server] = []
    calls = []

    def restart() -> None:
        time.sleep(down_s)
        restarted.append(Server("64", "20", port))

    def policy(prompt: str) -> str:
        calls.append(prompt)
        if len(calls) == episodes and srv.proc.poll() is None:
            srv.kill()  # mid-rollout: every episode has its session open and is about to step
            threading.Thread(target=restart, daemon=True).start()
        return digit_policy(prompt)

    return policy, restarted


def test_server_restarted_mid_rollout_retry_replays_every_episode(server, renderer, caplog):
    srv = server()
    groups = batch(srv.url, renderer)  # 2 groups of 3: six episodes in flight when the server dies
    policy, restarted = restarting_policy(srv, down_s=1.5, episodes=6)
    try:
        with caplog.at_level("WARNING", logger="trl_envs.openenv.session"):
            result = run_rollout_batch(
                groups,
                TextPolicySampler(renderer, policy),
                RolloutBudget(max_turns=4),
                RetryOnFailure(max_retries=1, per_rollout_timeout=60),  # fewer retries than dropped episodes
            )
        assert [t.step_reward for g in result.groups for t in g.trajectories] == [2.0] * 6  # none skipped
        # at least 3 drops over 2 groups: one group lost more episodes than its max_retries (1) allows, yet none is
        # skipped (how many of the 6 episodes see the drop, rather than a failed open, depends on timing)
        assert result.error_counts["OpenEnvConnectionLost"] >= 3 and "GroupSkipped" not in result.error_counts
        assert any("trying again in" in r.getMessage() for r in caplog.records)  # it waited for the server
        assert restarted[0].url == srv.url and restarted[0].live_sessions_soon() == 0
        assert io_loop.open_sessions() == []
    finally:
        for s in restarted:
            s.stop()


class KillServerAfterStep:
    """A trainer callback: kills ``srv`` when step ``step`` ends; with ``restart_after_s``, a thread starts it again on
    the same port that many seconds later (``restarted`` holds it)."""

    def __init__(self, srv: Server, step: int = 1, restart_after_s: float | None = None):
        from transformers import TrainerCallback

        self.srv, self.restarted = srv, []
        outer = self

        class Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == step:
                    outer.srv.kill()
                    if restart_after_s is not None:
                        threading.Thread(target=outer.restart, args=(restart_after_s,), daemon=True).start()

        self.callback = Callback()
        self.restart_after_s = restart_after_s

    def restart(self, delay: float) -> None:
        time.sleep(delay)
        self.restarted.append(Server("64", "20", self.srv.url.rsplit(":", 1)[1]))


def openenv_trainer(url, tiny_model_path, tokenizer, cpu_grpo_config, callback, **env_options):
    envs = make_env_dataset(
        "openenv", Renderer(tokenizer), group_size=4, groups_per_batch=2, url=url, num_test_batches=0, **env_options
    )
    config = cpu_grpo_config(max_steps=3, max_turns=2, rollout_error_strategy="retry", rollout_timeout=120)
    return EnvGRPOTrainer(tiny_model_path, config, envs, processing_class=tokenizer, callbacks=[callback])


def test_training_survives_a_server_restart_and_trains_every_step(server, tiny_model_path, tokenizer, cpu_grpo_config):
    srv = server()
    killer = KillServerAfterStep(srv, step=1, restart_after_s=1.0)
    trainer = openenv_trainer(srv.url, tiny_model_path, tokenizer, cpu_grpo_config, killer.callback)
    try:
        trainer.train()  # step 2's episodes find the server down, wait with backoff, and play once it is back
        logged = [h for h in trainer.state.log_history if "env/openenv/reward/total" in h]
        assert trainer.state.global_step == 3 and len(logged) == 3
        assert all(h["env/all/skipped_groups"] == 0.0 for h in logged)  # nothing lost to the restart
        assert killer.restarted[0].sessions()["made"] >= 2 * 2 * 4  # steps 2 and 3 played on the new server
        assert killer.restarted[0].live_sessions_soon() == 0 and open_sessions_soon() == []
    finally:
        for s in killer.restarted:
            s.stop()


def test_training_with_a_server_that_never_returns_stops_naming_the_url(
    server, tiny_model_path, tokenizer, cpu_grpo_config
):
    srv = server()
    killer = KillServerAfterStep(srv, step=1)
    trainer = openenv_trainer(
        srv.url, tiny_model_path, tokenizer, cpu_grpo_config, killer.callback, reconnect_timeout_s=3
    )
    with pytest.raises(OpenEnvServerGone, match=f"OpenEnv server at {re.escape(srv.url)} did not come back"):
        trainer.train()
    assert trainer.state.global_step == 1 and open_sessions_soon() == []


def open_sessions_soon(wait_s: float = 15.0) -> list:
    """This process's open sessions once none is left, or those left after ``wait_s`` (a session to a dead server
    finishes closing in the background: its close handshake times out)."""
    deadline = time.monotonic() + wait_s
    while (left := io_loop.open_sessions()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_a_run_whose_server_never_returns_exits_non_zero_naming_the_url(server, tiny_model_path, tmp_path):
    srv = server()
    options = json.dumps({"url": srv.url, "reconnect_timeout_s": 3, "num_test_batches": 1})
    repo = Path(__file__).resolve().parents[1]
    run = subprocess.Popen(
        [sys.executable, str(repo / "scripts" / "train_grpo.py"), "--model_name_or_path", tiny_model_path]
        + ["--env", "openenv", "--env_kwargs", options, "--max_steps", "30", "--health_patience", "50"]
        + ["--rollout_error_strategy", "retry", "--card_eval", "false", "--output_dir", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", "")),
    )
    try:
        deadline = time.monotonic() + 300
        while srv.sessions()["made"] < 1 and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # training has started playing on the server
        srv.kill()
        _, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode not in (0, None)
    last = stderr.strip().splitlines()[-1]
    assert f"OpenEnv server at {srv.url} did not come back" in last and "Traceback" not in stderr


def test_rejected_action_is_a_clear_error_and_no_session_leaks(shared, renderer):
    srv = shared
    with pytest.raises(OpenEnvActionError, match="rejected the action .*REJECT"):
        run_rollout_batch(
            batch(srv.url, renderer), TextPolicySampler(renderer, lambda p: "REJECT"), RolloutBudget(max_turns=4)
        )
    # the failed episode and its cancelled siblings all closed their sessions
    assert srv.live_sessions_soon() == 0 and io_loop.open_sessions() == []
    result = run_rollout_batch(
        batch(srv.url, renderer, rejected_action_reward=-1.0),
        TextPolicySampler(renderer, lambda p: "REJECT"),
        RolloutBudget(max_turns=4),
    )
    traj = result.groups[0].trajectories[0]
    assert traj.step_reward == -1.0 and traj.transitions[-1].metrics["action_rejected"] == 1.0
    assert srv.live_sessions_soon() == 0


def test_session_limit_error_names_the_limit_and_max_sessions_queues(server, renderer):
    srv = server("2")
    sampler = TextPolicySampler(renderer, digit_policy)
    with pytest.raises(OpenEnvCapacityError, match="limit of 2 concurrent sessions"):
        run_rollout_batch(batch(srv.url, renderer, groups=1, group_size=4), sampler, RolloutBudget(max_turns=4))
    assert srv.live_sessions_soon() == 0
    result = run_rollout_batch(
        batch(srv.url, renderer, groups=2, group_size=3, max_sessions=2),
        sampler,
        RolloutBudget(max_turns=4),
        max_wait_s=20,
    )
    assert [t.step_reward for g in result.groups for t in g.trajectories] == [2.0] * 6
    assert result.num_valve_flushes == 0  # queued episodes wait parked: the running ones are sampled without them
    assert srv.live_sessions_soon() == 0


def test_sessions_survive_a_generation_longer_than_the_servers_keepalive(server, renderer):
    srv = server("64", "0.3")  # the server pings every 0.3 s and drops a connection silent for 0.3 s more
    calls = []

    def slow_policy(prompt: str) -> str:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(2.0)  # a long generate call: it blocks the rollout loop's thread
        return digit_policy(prompt)

    result = run_rollout_batch(
        batch(srv.url, renderer), TextPolicySampler(renderer, slow_policy), RolloutBudget(max_turns=4)
    )
    assert [t.step_reward for g in result.groups for t in g.trajectories] == [2.0] * 6


def test_server_down_names_the_url(renderer):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(OpenEnvConnectionError, match=f"no OpenEnv server answers at {re.escape(url)}"):
        OpenEnvDatasetBuilder(renderer, url=url)


def test_trl_envs_eval_with_the_server_down_prints_one_line(tiny_model_path, capsys):
    from trl_envs.cli.commands import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    code = main(
        [
            "eval",
            "--model",
            tiny_model_path,
            "--env",
            "openenv",
            "--env_kwargs",
            json.dumps({"url": url}),
            "--num_problems",
            "2",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"trl-envs eval: error: no OpenEnv server answers at {url}" in err


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "exactly one of the options url"),
        ({"url": "http://x", "image": "img"}, "exactly one of the options url"),
        ({"url": "127.0.0.1:8000"}, "must start with http://"),
        ({"url": "http://x", "group_size": 0}, "'group_size' must be an integer >= 1"),
        ({"url": "http://x", "max_sessions": "4"}, "'max_sessions' must be an integer >= 1"),
        ({"url": "http://x", "reset_kwargs": [1]}, "'reset_kwargs' must be a JSON object"),
        ({"url": "http://x", "message_timeout_s": 0}, "'message_timeout_s' must be a finite number > 0"),
    ],
)
def test_bad_options_fail_before_any_connection(renderer, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        OpenEnvDatasetBuilder(renderer, **options)


def test_action_field_must_be_a_field_of_the_env(shared, renderer):
    srv = shared
    with pytest.raises(ValueError, match=r"action_field='text' is not a field .* \['message'\]"):
        OpenEnvDatasetBuilder(renderer, url=srv.url, action_field="text")


def test_a_forked_child_opens_its_own_sessions(shared):
    import multiprocessing

    assert _child_step(shared.url) == 1.0  # the parent's I/O thread is running now
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_child_step, (shared.url,)).get(timeout=60) == 1.0


def _child_step(url: str) -> float:
    import asyncio

    from trl_envs.openenv import OpenEnvSession

    async def one_step() -> float:
        async with OpenEnvSession(url) as session:
            await session.reset(seed=4)
            return (await session.step({"message": "4"})).reward

    return asyncio.run(one_step())


def test_importing_trl_envs_imports_no_openenv():
    code = (
        "import sys, trl_envs, trl_envs.openenv, trl_envs.envs; "
        "from trl_envs.registry import list_envs; assert 'openenv' in list_envs(); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'openenv', 'openenv_core', 'fastmcp'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_timed_out_rollouts_close_their_sessions(shared, renderer):
    from trl_envs import RolloutTimeoutError

    srv = shared
    with pytest.raises(RolloutTimeoutError):
        run_rollout_batch(
            batch(srv.url, renderer),
            TextPolicySampler(renderer, lambda p: "SLOW"),
            RolloutBudget(max_turns=4),
            FailFast(per_rollout_timeout=0.5),
        )
    assert srv.live_sessions_soon() == 0 and io_loop.open_sessions() == []


INTERRUPTED_RUN = """
import sys, time
from transformers import AutoTokenizer
from trl_envs import Renderer
from trl_envs.openenv import OpenEnvDatasetBuilder
from trl_envs.rollout.engine import RolloutBudget, run_rollout_batch
from trl_envs.rollout.event_loop import run_sync
from trl_envs.samplers.text_policy import TextPolicySampler

renderer = Renderer(AutoTokenizer.from_pretrained(sys.argv[2]))
train, _ = run_sync(OpenEnvDatasetBuilder(renderer, url=sys.argv[1], group_size=3, batch_size=2, num_test_batches=0))

calls = []

def policy(prompt):  # called once per episode of the sampling call
    if not calls:
        print("SAMPLING", flush=True)  # every episode has its session open now
        time.sleep(3)  # a generate call: Ctrl-C cancels the rollout once it returns
    calls.append(prompt)
    return "1"

try:
    run_rollout_batch(train.get_batch(0), TextPolicySampler(renderer, policy), RolloutBudget(max_turns=4))
except KeyboardInterrupt:  # as in a notebook: the process lives on, so only our cleanup can close the sessions
    import json, urllib.request
    deadline = time.monotonic() + 5
    while True:
        live = json.loads(urllib.request.urlopen(sys.argv[1] + "/test/sessions").read())["live"]
        if live == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    from trl_envs.openenv import io_loop
    print(f"INTERRUPTED, live sessions: {live}, open here: {len(io_loop.open_sessions())}", flush=True)
"""


def test_ctrl_c_mid_rollout_closes_every_session(shared, tiny_model_path):
    import signal

    srv = shared
    run = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_RUN, srv.url, tiny_model_path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    try:
        assert run.stdout.readline().strip() == "SAMPLING", run.stderr.read()
        assert srv.sessions()["live"] == 6
        run.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        out, err = run.communicate(timeout=60)
        assert time.monotonic() - interrupted < 20
    finally:
        if run.poll() is None:
            run.kill()
    assert out.strip() == "INTERRUPTED, live sessions: 0, open here: 0", out + err


def test_the_docs_server_example_trains_as_written(renderer):
    """docs/openenv.md's "A server in a few lines", served by uvicorn in this process, plays through env openenv."""
    import threading

    import uvicorn

    doc = (Path(__file__).parents[1] / "docs" / "openenv.md").read_text(encoding="utf-8")
    code = re.findall(r"```python\n(.*?)```", doc.split("## A server in a few lines")[1], re.S)[0]
    namespace: dict = {}
    exec(compile(code, "docs/openenv.md", "exec"), namespace)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(uvicorn.Config(namespace["app"], log_level="warning", lifespan="off"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not uv.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        result = run_rollout_batch(
            batch(url, renderer), TextPolicySampler(renderer, digit_policy), RolloutBudget(max_turns=4)
        )
        assert [t.step_reward for g in result.groups for t in g.trajectories] == [2.0] * 6
    finally:
        uv.should_exit = True
        thread.join(10)
        sock.close()


def test_a_connection_dropped_between_steps_is_an_error_not_a_fresh_session(shared, renderer):
    import asyncio

    from trl_envs.openenv import OpenEnvSession

    async def episode() -> None:
        async with OpenEnvSession(shared.url) as session:
            await session.reset(seed=1)
            await io_loop.call(lambda: session._client._ws.close())  # the connection drops while the model thinks
            with pytest.raises(OpenEnvConnectionError, match="connection was closed"):
                await session.step({"message": "1"})  # OpenEnv's client alone would step a new, never-reset session

    made = shared.sessions()["made"]
    asyncio.run(episode())
    assert shared.sessions()["made"] - made == 1 and shared.live_sessions_soon() == 0


def test_a_server_slower_than_message_timeout_names_the_timeout(shared, renderer):
    with pytest.raises(OpenEnvConnectionError, match=r"no reply to step within 0.3 s \(message_timeout_s\)"):
        run_rollout_batch(
            batch(shared.url, renderer, message_timeout_s=0.3),
            TextPolicySampler(renderer, lambda p: "SLOW"),
            RolloutBudget(max_turns=4),
        )
    assert shared.live_sessions_soon() == 0 and io_loop.open_sessions() == []


def test_the_sessions_bench_runs_and_counts_what_it_played(tiny_model_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "bench"))
    import openenv_sessions

    out = openenv_sessions.main(["--steps", "20", "--groups", "2", "--group_size", "3", "--max_sessions", "2"])
    assert out["step_ms_median"] > 0 and "headline: one OpenEnv step costs" in capsys.readouterr().out
    for run in (out["unlimited"], out["max_sessions=2"]):
        assert run["episodes"] == run["sessions"] == 6 and run["mean_reward"] == 2.0
