"""The scraper against hostile /metrics peers, in the running operator: pods of one CR answer
with a 100 MiB body, a 1 GiB stream, a body that trickles and never ends, and NaN counters;
a pod that is not the workload's but carries the CR's labels points at a peer that logs every
request. The operator's memory stays under the chart's limit, another CR's telemetry goes on
while the slow body still trickles, the stream is cut off at the byte limit, the NaN pod is
skipped with a reason logged once (no traceback), and the unowned pod is never read."""

from __future__ import annotations

import copy
import logging
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from specdeploy.controller.scraping.scrape import MAX_BYTES
from tests.metrics_server import MiB, Peer, big_body, endless_body, nan_body, serve_hostile, serve_metrics, slow_body

from .conftest import ROOT, Cluster, Operator, eventually
from .test_telemetry import FakeVllmMetrics, _pod, _serving, _speculation, add_pod


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
    peers = {"big": Peer(big_body, length=100 * MiB), "stream": Peer(endless_body), "slow": Peer(slow_body),
             "nan": Peer(nan_body), "intruder": Peer(endless_body)}
    healthy, hostile_good = FakeVllmMetrics(k=3), FakeVllmMetrics(k=3)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here on: this test's peak
    except OSError:
        pass  # not allowed here: the peak then covers the whole test process, a stricter bound
    baseline = _rss_kib("VmRSS")
    with ExitStack() as stack:
        ports = {mode: stack.enter_context(serve_hostile(peer)) for mode, peer in peers.items()}
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

        await eventually(lambda: all(peers[m].requests >= 2 for m in ("big", "stream", "slow", "nan")),
                         what="two scrapes of every hostile pod")
        await eventually(lambda: healthy.requests >= 1, what="a first scrape of the healthy CR")
        healthy.step(drafts=400, accepted_lengths=[100, 100, 100])
        hostile_good.step(drafts=400, accepted_lengths=[100, 100, 100])
        await eventually(lambda: _speculation(cluster, "healthy").get("drafts") == 400, what="the healthy CR's telemetry")
        assert not peers["slow"].stop.is_set()  # ...while the slow body still trickles

        assert _rss_kib("VmHWM") < _chart_memory_limit_kib(), (baseline, _rss_kib("VmHWM"))
        assert peers["intruder"].requests == 0  # an unowned pod is never read
        # The 1 GiB stream and the 100 MiB body are cut off near the limit, never read whole.
        limit, scrapes = MAX_BYTES.get_int(), peers["stream"].requests
        assert limit <= peers["stream"].sent < scrapes * (limit + 16 * MiB), (peers["stream"].sent, scrapes)
        await eventually(lambda: _speculation(cluster, name).get("drafts") == 400, what="the hostile CR's good pod counted")
        # Logged while the peers still answer (the operator's own thread scrapes on after they stop,
        # and a peer that is gone is a new reason, logged once more).
        while_serving = list(caplog.records)

    reasons = {s["pod"]: s["reason"] for s in _speculation(cluster, name).get("skippedPods") or []}
    assert "over the limit" in reasons[f"{name}-stream"] and "over the limit" in reasons[f"{name}-big"]
    assert "within 1 s" in reasons[f"{name}-slow"]
    assert "vllm:spec_decode_num_drafts_total is nan" in reasons[f"{name}-nan"]
    assert f"{name}-intruder" not in reasons  # not the workload's: not even listed
    nan_logs = [r for r in while_serving if f"{name}-nan" in r.getMessage()]
    assert len(nan_logs) == 1 and nan_logs[0].levelno == logging.INFO  # once, however many scrapes
    assert not [r for r in caplog.records if r.exc_info]  # no traceback


async def replica_set_uid(cluster: Cluster, name: str) -> str:
    return str(cluster.get("v1/pods", f"{name}-0")["metadata"]["ownerReferences"][0]["uid"])
