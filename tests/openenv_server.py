"""A small OpenEnv env server for the tests, written with OpenEnv's own server API (``Environment``, ``create_app``).

    python tests/openenv_server.py [MAX_CONCURRENT_ENVS [WS_PING_INTERVAL_S [PORT]]]

Binds 127.0.0.1 on PORT (default 0: a port the OS picks; a given one restarts a server where a killed one was) and
prints ``PORT <n>`` once it accepts connections. The env: reset with a
seed asks ``Say <seed % 10>.``; each step rewards 1.0 when the reply contains that digit, 0.0 otherwise, and the
episode ends after two steps. A reply containing ``REJECT`` makes ``step`` raise (the env rejects the action); one
containing ``SLOW`` takes a second. ``GET /test/sessions`` reports the env instances alive (sessions open) and made so
far.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app

COUNTS = {"live": 0, "made": 0}
_lock = threading.Lock()


class SayAction(Action):
    message: str


class SayObservation(Observation):
    prompt: str


class SayEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        with _lock:
            COUNTS["live"] += 1
            COUNTS["made"] += 1
        self._closed = False
        self._state = State(step_count=0)
        self.target = 0

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.target = (seed or 0) % 10
        self._state = State(episode_id=episode_id, step_count=0)
        return SayObservation(prompt=f"Say {self.target}.")

    def step(self, action, timeout_s=None, **kwargs):
        if "REJECT" in action.message:
            raise ValueError(f"cannot say {action.message!r}")
        if "SLOW" in action.message:
            time.sleep(1.0)
        self._state.step_count += 1
        done = self._state.step_count >= 2
        reward = 1.0 if str(self.target) in action.message else 0.0
        return SayObservation(
            prompt=f"Again: say {self.target}.", reward=reward, done=done, metadata={"said": action.message}
        )

    @property
    def state(self):
        return self._state

    def close(self):
        with _lock:
            if not self._closed:
                self._closed = True
                COUNTS["live"] -= 1


def main() -> None:
    max_envs = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    ping = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0  # uvicorn's default keepalive: ping every 20 s
    app = create_fastapi_app(SayEnv, SayAction, SayObservation, max_concurrent_envs=max_envs)

    @app.get("/test/sessions")
    def sessions() -> dict:
        with _lock:
            return dict(COUNTS)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(sys.argv[3]) if len(sys.argv) > 3 else 0))
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", ws_ping_interval=ping, ws_ping_timeout=ping)
    )
    original_startup = server.startup

    async def startup(sockets=None):
        await original_startup(sockets=sockets)
        print(f"PORT {sock.getsockname()[1]}", flush=True)

    server.startup = startup
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
