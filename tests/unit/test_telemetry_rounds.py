"""Each object's telemetry round is its own task: a slow object delays only itself. Counted per
tick, not timed: the loop's ticks are called here, /metrics peers that never answer are held
on an event, and the test waits on the good object's round, never on the clock."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator

import pytest
from aiohttp import web

from specdeploy.controller.telemetry import MAX_OBJECT_SCRAPES, Telemetry

TEXT = ("# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 30\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 12\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 6\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 4\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 2\n'
        "process_start_time_seconds 1000\n")


class Peer:
    """/metrics on loopback: `good` answers at once; `stalled` holds every request until released."""

    def __init__(self) -> None:
        self.requests = {"good": 0, "stalled": 0}
        self.waiting = 0  # stalled requests being held now
        self.most_waiting = 0
        self.release = asyncio.Event()

    async def good(self, request: web.Request) -> web.Response:
        self.requests["good"] += 1
        return web.Response(text=TEXT)

    async def stalled(self, request: web.Request) -> web.Response:
        self.requests["stalled"] += 1
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            await self.release.wait()
        finally:
            self.waiting -= 1
        return web.Response(text=TEXT)


@pytest.fixture
async def peer() -> AsyncIterator[tuple[Peer, dict[str, int]]]:
    """The peer's two endpoints: {"good": port, "stalled": port}."""
    peer, runners, ports = Peer(), [], {}
    for kind in ("good", "stalled"):
        app = web.Application()
        app.router.add_get("/metrics", getattr(peer, kind))
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        ports[kind] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield peer, ports
    peer.release.set()
    for runner in runners:
        await runner.cleanup()


class Cluster:
    """The API calls of a round: each object's Deployment, its ReplicaSet, its ready pods."""

    def __init__(self, ports: dict[str, int]) -> None:
        self.ports = ports
        self.pods: dict[str, list[str]] = {}  # object -> the kind of peer each of its pods is

    def add(self, name: str, kinds: list[str]) -> dict[str, Any]:
        self.pods[name] = kinds
        return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
                "spec": {"draft": {"numSpeculativeTokens": 3}},
                "status": {"plan": {"method": "eagle3", "numSpeculativeTokens": 3}, "workload": f"Deployment/{name}"}}

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return {"kind": kind, "metadata": {"name": name, "uid": f"deploy-{name}"}} if kind == "Deployment" else None

    async def list(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        name = next(n for n in self.pods if n in selector)
        if kind == "ReplicaSet":
            return [{"metadata": {"uid": f"rs-{name}", "ownerReferences": [{"kind": "Deployment", "uid": f"deploy-{name}", "controller": True}]}}]
        owner = [{"kind": "ReplicaSet", "uid": f"rs-{name}", "controller": True}]
        return [{"metadata": {"name": f"{name}-{i:02d}", "ownerReferences": owner},
                 "spec": {"containers": [{"name": "vllm", "ports": [{"name": "http", "containerPort": self.ports[peer]}]}]},
                 "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
                for i, peer in enumerate(self.pods[name])]


def telemetry_for(cluster: Cluster) -> Telemetry:
    return Telemetry(cluster, logging.getLogger("test"))  # type: ignore[arg-type]


def _round(tasks: list[asyncio.Task[None]], name: str) -> asyncio.Task[None]:
    return next(t for t in tasks if t.get_name().endswith(f"/{name}"))


async def test_three_slow_objects_cost_a_good_one_nothing(peer: tuple[Peer, dict[str, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, one tick scraped the objects one after another: the good object waited for each
    slow one's deadline (13.3 s between its scrapes at a 2 s interval with three). Now it is
    scraped at every tick, and a slow object is not started again while its round runs."""
    monkeypatch.setenv("SPECDEPLOY_METRICS_TIMEOUT_S", "600")  # no deadline ends a round here: the test does
    server, ports = peer
    cluster = Cluster(ports)
    telemetry = telemetry_for(cluster)
    for name in ("slow-a", "slow-b", "slow-c"):
        telemetry.track(cluster.add(name, ["stalled"]), deleted=False)
    telemetry.track(cluster.add("good", ["good"]), deleted=False)
    slow_rounds: list[asyncio.Task[None]] = []
    for tick in range(10):
        started = telemetry.tick(now_s=tick * 2.0)
        slow_rounds += [t for t in started if "slow" in t.get_name()]
        await _round(started, "good")
        assert server.requests["good"] == tick + 1  # one scrape per tick: 1.0x its interval
    assert len(slow_rounds) == 3 and server.requests["stalled"] == 3  # one round each, still in flight
    server.release.set()
    await asyncio.gather(*slow_rounds)
    started = telemetry.tick(now_s=20.0)
    assert sorted(t.get_name().rsplit("/", 1)[1] for t in started) == ["good", "slow-a", "slow-b", "slow-c"]
    await asyncio.gather(*started)
    assert server.requests["stalled"] == 6
    await telemetry.close()


async def test_an_object_with_many_stalled_pods_holds_at_most_half_the_read_slots(peer: tuple[Peer, dict[str, int]],
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEPLOY_METRICS_TIMEOUT_S", "600")
    server, ports = peer
    cluster = Cluster(ports)
    telemetry = telemetry_for(cluster)
    telemetry.track(cluster.add("crowd", ["stalled"] * 12), deleted=False)
    telemetry.track(cluster.add("good", ["good"]), deleted=False)
    for tick in range(3):
        await _round(telemetry.tick(now_s=float(tick)), "good")
    assert server.requests["good"] == 3
    assert server.most_waiting == server.waiting == MAX_OBJECT_SCRAPES  # the rest wait for the crowd's own slots
    await telemetry.close()


async def test_reads_past_the_objects_deadline_are_skipped_with_the_reason(peer: tuple[Peer, dict[str, int]],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """12 stalled pods, 4 read at a time, each read cut at 0.2 s: the third four cannot start
    before 0.4 s, the object's deadline (twice a read's), and are skipped saying so."""
    monkeypatch.setenv("SPECDEPLOY_METRICS_TIMEOUT_S", "0.2")
    server, ports = peer
    cluster = Cluster(ports)
    telemetry = telemetry_for(cluster)
    body = cluster.add("crowd", ["stalled"] * 12)
    telemetry.track(body, deleted=False)
    (only,) = telemetry.tick(now_s=0.0)
    await only
    skipped = dict(telemetry._tracked["ns", "crowd"].skip_logged)
    assert len(skipped) == 12
    late = [pod for pod, why in skipped.items() if "not read within this object's scrape deadline of 0.4 s" in why]
    assert len(late) >= MAX_OBJECT_SCRAPES and all("within 0.2 s" in skipped[p] for p in set(skipped) - set(late))
    await telemetry.close()
