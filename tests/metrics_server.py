"""A local stand-in for a vLLM server's /metrics endpoint, over real HTTP, for the tests that
read metrics the way the operator and `specdeploy advise` do (a thread, a free port)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator


@contextmanager
def serve_metrics(body: Callable[[], bytes]) -> Iterator[int]:
    """Serve `body()` (called per request) at http://127.0.0.1:PORT/metrics, 404 elsewhere;
    yields PORT and shuts the server down on exit."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            found = self.path == "/metrics"
            payload = body() if found else b"not found\n"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
