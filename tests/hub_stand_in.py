"""A local stand-in for the Hugging Face Hub's HTTP API: just the endpoints ``huggingface_hub`` calls for
``HfApi.create_repo`` + ``HfApi.upload_folder`` (read from huggingface_hub 2.x), so tests push through the real
upload code offline.

* ``POST /api/repos/create`` (JSON ``{name, organization, type, ...}``) -> ``{"url": ...}``; 409 if it exists.
* ``POST /api/validate-yaml`` (README.md metadata) -> no errors.
* ``POST /api/models/{ns}/{name}/preupload/{revision}`` -> every file ``uploadMode: "regular"``, so the commit carries
  the bytes inline (no LFS / Xet transfer to imitate).
* ``POST /api/models/{ns}/{name}/commit/{revision}`` (NDJSON: a header line, then one ``file`` line per file with
  base64 content) -> ``{"commitUrl", "commitOid"}``; the files are stored per repo.
* ``POST /api/models/{ns}/{name}/branch/{branch}`` -> ok; ``GET /api/whoami-v2`` -> the token's user.
* ``GET /api/agent-harnesses`` (huggingface_hub fetches it for its user agent, unauthenticated) -> 404.

Every request is recorded (method, path, and whether it carried the bearer token); anything else is answered 404 and
listed in ``unexpected``, so a test can assert the client used nothing more.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USER = "local-user"
TOKEN = "hf_stand_in_token"

_REPO = r"/api/models/(?P<repo>[^/]+/[^/]+)"


@dataclass
class Repo:
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[dict] = field(default_factory=list)
    private: bool | None = None


class HubStandIn:
    """A threaded HTTP server on 127.0.0.1; use as a context manager. ``url`` is the endpoint to point
    ``huggingface_hub`` at (``HF_ENDPOINT`` or ``HfApi(endpoint=...)``)."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, bool]] = []
        self.unexpected: list[str] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                self._dispatch("GET")

            def do_POST(self):
                self._dispatch("POST")

            def _dispatch(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                authorized = self.headers.get("Authorization") == f"Bearer {TOKEN}"
                with hub.lock:
                    hub.requests.append((method, path, authorized))
                    status, payload = hub._route(method, path, body, authorized)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _route(self, method: str, path: str, body: bytes, authorized: bool) -> tuple[int, dict]:
        if method == "GET" and path == "/api/agent-harnesses":  # huggingface_hub's user-agent registry, not uploads
            return 404, {"error": "not served by the stand-in"}
        if method == "GET" and path == "/api/whoami-v2":
            return (200, {"name": USER, "type": "user", "auth": {}}) if authorized else (401, {"error": "bad token"})
        if not authorized:
            return 401, {"error": "Invalid credentials in Authorization header"}
        if method == "POST" and path == "/api/repos/create":
            request = json.loads(body)
            repo_id = f"{request.get('organization') or USER}/{request['name']}"
            if repo_id in self.repos:
                return 409, {"error": "You already created this model repo", "url": f"{self.url}/{repo_id}"}
            self.repos[repo_id] = Repo(private=request.get("visibility") == "private" or request.get("private"))
            return 200, {"url": f"{self.url}/{repo_id}", "name": repo_id}
        if method == "POST" and path == "/api/validate-yaml":
            return 200, {"errors": [], "warnings": []}
        if m := re.fullmatch(_REPO + r"/branch/(?P<branch>[^/]+)", path):
            return (200, {}) if m["repo"] in self.repos else (404, {"error": "Repository not found"})
        if m := re.fullmatch(_REPO + r"/preupload/(?P<revision>[^/]+)", path):
            if m["repo"] not in self.repos:
                return 404, {"error": "Repository not found"}
            files = json.loads(body)["files"]
            return 200, {
                "files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None} for f in files
                ]
            }
        if m := re.fullmatch(_REPO + r"/commit/(?P<revision>[^/]+)", path):
            repo = self.repos.get(m["repo"])
            if repo is None:
                return 404, {"error": "Repository not found"}
            lines = [json.loads(line) for line in body.splitlines() if line.strip()]
            header = next(line["value"] for line in lines if line["key"] == "header")
            for line in lines:
                if line["key"] == "file":
                    value = line["value"]
                    assert value["encoding"] == "base64", value
                    repo.files[value["path"]] = base64.b64decode(value["content"])
                elif line["key"] != "header":
                    self.unexpected.append(f"commit operation {line['key']}")
            oid = hashlib.sha1(body).hexdigest()
            repo.commits.append({"summary": header["summary"], "revision": m["revision"], "oid": oid})
            return 200, {"commitUrl": f"{self.url}/{m['repo']}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}
        self.unexpected.append(f"{method} {path}")
        return 404, {"error": f"not implemented by the stand-in: {method} {path}"}
