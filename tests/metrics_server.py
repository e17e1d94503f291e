"""A local stand-in for a vLLM server's /metrics endpoint, over real HTTP, for the tests that
read metrics the way the operator and `specdeploy advise` do (a thread, a free port); and
hostile ones (huge, endless, trickling bodies) that count what they were asked and sent."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

MiB = 1024 * 1024
CHUNK = b"# " + b"x" * (64 * 1024 - 3) + b"\n"  # comment lines: valid exposition text, any length
NAN_TEXT = (b'vllm:spec_decode_num_drafts_total{engine="0"} NaN\n'
            b'vllm:spec_decode_num_draft_tokens_total{engine="0"} 10\n')


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


class Peer:
    """One hostile /metrics server: `body(stop)` yields the chunks to send; `length`, when set,
    is the Content-Length it declares. Requests and the bytes sent are counted."""

    def __init__(self, body: Callable[[threading.Event], Iterator[bytes]], length: int | None = None):
        self.body, self.length = body, length
        self.requests, self.sent = 0, 0
        self.stop = threading.Event()


def endless_body(stop: threading.Event, total: int = 1024 * MiB) -> Iterator[bytes]:
    """1 GiB as fast as the reader takes it."""
    for _ in range(total // len(CHUNK)):
        if stop.is_set():
            return
        yield CHUNK


def big_body(stop: threading.Event) -> Iterator[bytes]:
    """100 MiB (declare it with Peer(length=100 * MiB))."""
    return endless_body(stop, 100 * MiB)


def slow_body(stop: threading.Event) -> Iterator[bytes]:
    """One byte every 50 ms until the server stops: each read alone is quick, the body never ends."""
    while not stop.wait(0.05):
        yield b"#"


def nan_body(stop: threading.Event) -> Iterator[bytes]:
    yield NAN_TEXT


@contextmanager
def serve_hostile(peer: Peer) -> Iterator[int]:
    """Serve `peer` at http://127.0.0.1:PORT/ (any path); yields PORT."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if peer.length is not None else "HTTP/1.0"

        def do_GET(self) -> None:  # noqa: N802
            peer.requests += 1
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            if peer.length is not None:
                self.send_header("Content-Length", str(peer.length))
            self.end_headers()
            try:
                for chunk in peer.body(peer.stop):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    peer.sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the reader hung up: what the operator should do

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        peer.stop.set()
        server.shutdown()
        server.server_close()
