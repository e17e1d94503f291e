"""A local stand-in for the Hugging Face Hub's file endpoints, on loopback.

Serves `/{repo}/resolve/{revision}/{file}` with the headers huggingface_hub reads (commit,
ETag, size) and the `X-Error-Code` values it maps to its error types, so the real
huggingface_hub client in specdeploy.sources runs unchanged against it."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self) -> None:
        self.files: dict[tuple[str, str], bytes] = {}  # (repo, filename) -> body
        self.status_override: int | None = None  # e.g. 503 to play a Hub outage
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, authorization)
        # Repos whose answers stall until `release` is set (a Hub that hangs, for some repos).
        self.stalled: set[str] = set()
        self.release = threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, with_body: bool) -> None:
                hub.requests.append((self.command, self.path, self.headers.get("authorization")))
                if any(self.path.startswith(f"/{repo}/") for repo in hub.stalled):
                    hub.release.wait(60)
                if hub.status_override:
                    self.send_response(hub.status_override)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return self._error(404, "RepoNotFound")
                repo, filename = f"{parts[0]}/{parts[1]}", "/".join(parts[4:])
                if not any(r == repo for r, _ in hub.files):
                    return self._error(404, "RepoNotFound")
                body = hub.files.get((repo, filename))
                if body is None:
                    return self._error(404, "EntryNotFound")
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha1(body).hexdigest()}"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if with_body:
                    self.wfile.write(body)

            def _error(self, status: int, code: str) -> None:
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self) -> None:
                self._answer(with_body=False)

            def do_GET(self) -> None:
                self._answer(with_body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add_json(self, repo: str, filename: str, data: dict[str, Any]) -> None:
        self.files[(repo, filename)] = json.dumps(data).encode()

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def serve_as_hub(self, monkeypatch: Any, cache_dir: Any, *, read_timeout_s: float = 120.0) -> None:
        """Point huggingface_hub (and so the operator's Hub reads, in this process) at this
        stand-in, with its own file cache. `read_timeout_s` replaces the operator's 10 s read
        timeout: a stall lasts until the test releases it, even on a slow machine (where 10 s
        would end it, and the retry would read again)."""
        from huggingface_hub import constants

        from specdeploy.sources import hub

        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", self.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache_dir))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(hub, "DIRECT_TIMEOUT_S", read_timeout_s)

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
