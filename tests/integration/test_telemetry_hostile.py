"""The scraper against hostile /metrics peers, in the running operator: pods of one CR answer
with a 100 MiB body, a 1 GiB stream, a body that trickles and never ends, and NaN counters;
a pod that is not the workload's but carries the CR's labels points at a peer that logs every
request. The operator's memory stays under the chart's limit, another CR's telemetry goes on
while the slow body still trickles, the stream is cut off at the byte limit, the NaN pod is
skipped with a reason logged once (no traceback), and the unowned pod is never read."""

from __future__ import annotations

import copy
import logging
import threading
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from specdeploy.controller.scrape import MAX_BYTES
from tests.metrics_server import serve_metrics

from .conftest import ROOT, Cluster, Operator, eventually
from .test_telemetry import FakeVllmMetrics, _pod, _serving, _speculation, add_pod

MiB = 1024 * 1024
CHUNK = b"# " + b"x" * (64 * 1024 - 3) + b"\n"  # comment lines: valid exposition text, any length
NAN_TEXT = (b"vllm:spec_decode_num_drafts_total{engine=\"0\"} NaN\n"
            b"vllm:spec_decode_num_draft_tokens_total{engine=\"0\"} 10\n")


class Peer:
    """One hostile /metrics server: `send(wfile, stop)` writes the answer; every request and
    the bytes it sent are recorded."""

    def __init__(self, send: Callable[[Any, threading.Event], None]):
        self.send, self.requests, self.sent = send, 0, 0
        self.stop = threading.Event()


def _big(wfile: Any, stop: threading.Event) -> int:
    """A declared 100 MiB body, sent until the reader hangs up."""
    return _stream(wfile, stop, 100 * MiB)


def _stream(wfile: Any, stop: threading.Event, total: int = 1024 * MiB) -> int:
    sent = 0
    while sent < total and not stop.is_set():
        wfile.write(CHUNK)
        sent += len(CHUNK)
    return sent


def _slow(wfile: Any, stop: threading.Event) -> int:
    """One byte every 50 ms, for ever (until the test ends): each read alone is quick."""
    sent = 0
    while not stop.wait(0.05):
        wfile.write(b"#")
        wfile.flush()
        sent += 1
    return sent


@contextmanager
def serve(peer: Peer, length: int | None = None) -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if length is not None else "HTTP/1.0"

        def do_GET(self) -> None:  # noqa: N802
            peer.requests += 1
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()
            try:
                peer.sent += peer.send(self.wfile, peer.stop)
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


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def _chart_memory_limit_kib() -> int:
    limit = yaml.safe_load((ROOT / "charts/specdeploy/values.yaml").read_text())["resources"]["limits"]["memory"]
    assert limit.endswith("Mi"), limit
    return int(limit[:-2]) * 1024


@pytest.fixture
def hostile_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEPLOY_TELEMETRY_INTERVAL_S", "0.2")
    monkeypatch.setenv("SPECDEPLOY_METRICS_TIMEOUT_S", "1")  # the slow peer costs 1 s of its own scrape


async def test_hostile_metrics_peers_cost_their_own_scrape_and_nothing_more(
    hostile_env: None, operator: Operator, cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    from .test_operator import LLAMA

    caplog.set_level(logging.INFO, logger="specdeploy.telemetry")
    peers = {"big": Peer(_big), "stream": Peer(_stream), "slow": Peer(_slow),
             "nan": Peer(lambda w, _: w.write(NAN_TEXT) or len(NAN_TEXT)), "intruder": Peer(_stream)}
    healthy, hostile_good = FakeVllmMetrics(k=3), FakeVllmMetrics(k=3)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here on: this test's peak
    except OSError:
        pass  # not allowed here: the peak then covers the whole test process, a stricter bound
    baseline = _rss_kib("VmRSS")
    with ExitStack() as stack:
        ports = {mode: stack.enter_context(serve(peer, 100 * MiB if mode == "big" else None)) for mode, peer in peers.items()}
        healthy_port = stack.enter_context(serve_metrics(healthy.body))
        hostile = copy.deepcopy(LLAMA)
        hostile["metadata"]["name"] = "hostile"
        # Its pod -0 answers well, so that its status (skippedPods) is written when it counts.
        name = await _serving(cluster, hostile, "uid-hostile", stack.enter_context(serve_metrics(hostile_good.body)), bystander=False)
        owner = await replica_set_uid(cluster, name)
        for mode in ("big", "stream", "slow", "nan"):
            await add_pod(cluster, _pod(name, f"{name}-{mode}", ports[mode], owner_uid=owner))
        await add_pod(cluster, _pod(name, f"{name}-intruder", ports["intruder"]))  # the CR's labels, no owner
        other = copy.deepcopy(LLAMA)
        other["metadata"]["name"] = "healthy"
        await _serving(cluster, other, "uid-healthy", healthy_port, bystander=False)

        await eventually(lambda: all(peers[m].requests >= 2 for m in ("big", "stream", "slow", "nan")), timeout=30,
                         what="two scrapes of every hostile pod")
        await eventually(lambda: healthy.requests >= 1, what="a first scrape of the healthy CR")
        healthy.step(drafts=400, accepted_lengths=[100, 100, 100])
        hostile_good.step(drafts=400, accepted_lengths=[100, 100, 100])
        await eventually(lambda: _speculation(cluster, "healthy").get("drafts") == 400, timeout=30, what="the healthy CR's telemetry")
        assert not peers["slow"].stop.is_set()  # ...while the slow body still trickles

        assert _rss_kib("VmHWM") < _chart_memory_limit_kib(), (baseline, _rss_kib("VmHWM"))
        assert peers["intruder"].requests == 0  # an unowned pod is never read
        # The 1 GiB stream and the 100 MiB body are cut off near the limit, never read whole.
        limit, scrapes = MAX_BYTES.get_int(), peers["stream"].requests
        assert peers["stream"].sent < scrapes * (limit + 16 * MiB), (peers["stream"].sent, scrapes)
        await eventually(lambda: _speculation(cluster, name).get("drafts") == 400, timeout=30, what="the hostile CR's good pod counted")

    reasons = {s["pod"]: s["reason"] for s in _speculation(cluster, name).get("skippedPods") or []}
    assert "over the limit" in reasons[f"{name}-stream"] and "over the limit" in reasons[f"{name}-big"]
    assert "within 1 s" in reasons[f"{name}-slow"]
    assert "vllm:spec_decode_num_drafts_total is nan" in reasons[f"{name}-nan"]
    assert f"{name}-intruder" not in reasons  # not the workload's: not even listed
    nan_logs = [r for r in caplog.records if f"{name}-nan" in r.getMessage()]
    assert len(nan_logs) == 1 and nan_logs[0].levelno == logging.INFO  # once, however many scrapes
    assert not [r for r in caplog.records if r.exc_info]  # no traceback


async def replica_set_uid(cluster: Cluster, name: str) -> str:
    return str(cluster.get("v1/pods", f"{name}-0")["metadata"]["ownerReferences"][0]["uid"])
