"""Each object's telemetry round is its own task: a slow object delays only itself. Counted per
tick, not timed: the loop's ticks are called here, /metrics peers that never answer are held
on an event, and the test waits on the good object's round, never on the clock."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator

import pytest
from aiohttp import web

from specdeploy.controller.process.kube import KubeTemporaryError
from specdeploy.controller.scraping.telemetry import MAX_OBJECT_SCRAPES, MAX_PARALLEL_BODIES, MAX_SLOTS, RESYNC_PASSES, Telemetry
from specdeploy.render.labels import labels

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
    """The API calls a round may make (each object's Deployment, its ReplicaSets; our pods for a
    resync), counted; each object's pods go to the telemetry's pod index as the watch would."""

    def __init__(self, ports: dict[str, int]) -> None:
        self.ports = ports
        self.pods: dict[str, list[str]] = {}  # object -> the kind of peer each of its pods is
        self.calls: list[tuple[str, str]] = []  # (verb, kind)

    def add(self, name: str, kinds: list[str]) -> dict[str, Any]:
        self.pods[name] = kinds
        return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
                "spec": {"draft": {"numSpeculativeTokens": 3}},
                "status": {"plan": {"method": "eagle3", "numSpeculativeTokens": 3}, "workload": f"Deployment/{name}"}}

    def pod_objects(self, name: str, owner: str | None = None) -> list[dict[str, Any]]:
        """The object's pods as the API server lists them, owned by its ReplicaSet (or `owner`)."""
        refs = [{"kind": "ReplicaSet", "uid": owner or f"rs-{name}", "controller": True}]
        return [{"metadata": {"name": f"{name}-{i:02d}", "namespace": "ns", "labels": labels(name), "ownerReferences": refs},
                 "spec": {"containers": [{"name": "vllm", "ports": [{"name": "http", "containerPort": self.ports[peer]}]}]},
                 "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
                for i, peer in enumerate(self.pods[name])]

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", kind))
        return {"kind": kind, "metadata": {"name": name, "uid": f"deploy-{name}"}} if kind == "Deployment" else None

    async def list(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.calls.append(("list", kind))
        if kind == "Pod":
            return [pod for name in self.pods for pod in self.pod_objects(name)]
        name = next(n for n in self.pods if f"instance={n}," in selector)
        return [{"metadata": {"uid": f"rs-{name}", "ownerReferences": [{"kind": "Deployment", "uid": f"deploy-{name}", "controller": True}]}}]


def telemetry_for(cluster: Cluster, interval_s: float = 1.0) -> Telemetry:
    """At a 1 s interval a pass is one slot: each tick starts every object's round."""
    return Telemetry(cluster, logging.getLogger("test"), interval_s=interval_s)  # type: ignore[arg-type]


def serve(telemetry: Telemetry, cluster: Cluster, name: str, kinds: list[str]) -> None:
    """Track the object and let the pod watch report its pods."""
    telemetry.track(cluster.add(name, kinds), deleted=False)
    for pod in cluster.pod_objects(name):
        telemetry.pods.observe(pod, "ADDED")


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
        serve(telemetry, cluster, name, ["stalled"])
    serve(telemetry, cluster, "good", ["good"])
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


async def test_an_object_with_many_stalled_pods_holds_at_most_its_share_of_the_read_slots(peer: tuple[Peer, dict[str, int]],
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEPLOY_METRICS_TIMEOUT_S", "600")
    server, ports = peer
    cluster = Cluster(ports)
    telemetry = telemetry_for(cluster)
    serve(telemetry, cluster, "crowd", ["stalled"] * 12)
    serve(telemetry, cluster, "good", ["good"])
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
    serve(telemetry, cluster, "crowd", ["stalled"] * 12)
    (only,) = telemetry.tick(now_s=0.0)
    await only
    skipped = dict(telemetry._tracked["ns", "crowd"].skip_logged)
    assert len(skipped) == 12
    late = [pod for pod, why in skipped.items() if "not read within this object's scrape deadline of 0.4 s" in why]
    assert len(late) >= MAX_OBJECT_SCRAPES and all("within 0.2 s" in skipped[p] for p in set(skipped) - set(late))
    await telemetry.close()


async def test_a_pass_spreads_its_objects_evenly_over_the_interval(peer: tuple[Peer, dict[str, int]]) -> None:
    """At 60 s, 60 slots: 150 objects start 2 or 3 rounds per tick, each object once per pass,
    not 150 at the first tick. A deleted object frees its slot, and a new one takes the emptiest."""
    _, ports = peer
    cluster = Cluster(ports)
    telemetry = telemetry_for(cluster, interval_s=60.0)
    assert telemetry.slots == MAX_SLOTS
    for i in range(150):
        serve(telemetry, cluster, f"sd-{i:03d}", [])  # no pods: a round that reads nothing
    for _ in range(2):
        per_tick = []
        for _ in range(MAX_SLOTS):
            started = telemetry.tick(now_s=0.0)
            await asyncio.gather(*started)
            per_tick.append(sorted(t.get_name() for t in started))
        assert sorted(len(names) for names in per_tick) == [2] * 30 + [3] * 30
        assert len({name for names in per_tick for name in names}) == 150  # each object once
    full = max(i for i, names in enumerate(per_tick) if len(names) == 3)
    for task_name in per_tick[full][:2]:
        telemetry.track(cluster.add(task_name.rsplit("/", 1)[1], []), deleted=True)
    telemetry.track(cluster.add("newcomer", []), deleted=False)
    assert telemetry._tracked["ns", "newcomer"].slot == full  # the one slot of 1
    assert cluster.calls == []  # no pods named an owner: no API call at all
    await telemetry.close()


async def test_a_round_reads_pods_from_the_index_and_their_owners_only_when_a_new_one_appears(
        peer: tuple[Peer, dict[str, int]]) -> None:
    """Five passes, one Deployment GET and one ReplicaSet LIST (before: three reads per object per
    pass, the pods LIST among them). A pod of a new ReplicaSet (a rollout) reads the owners again;
    a pod that names an owner of someone else's is never read, and costs a read of the owners
    per pass; a pod with the CR's labels and no owner costs nothing."""
    server, ports = peer
    cluster = Cluster(ports)
    telemetry = telemetry_for(cluster)
    serve(telemetry, cluster, "good", ["good"])
    for tick in range(5):
        await asyncio.gather(*telemetry.tick(now_s=float(tick)))
    assert server.requests["good"] == 5 and cluster.calls == [("get", "Deployment"), ("list", "ReplicaSet")]
    cluster.pods["good"] = ["good", "stalled", "stalled"]
    forged, unowned = cluster.pod_objects("good", owner="rs-someone-else")[1:]
    unowned["metadata"]["ownerReferences"] = []
    for pod in (forged, unowned):
        pod["metadata"]["name"] += "-x"
        telemetry.pods.observe(pod, "ADDED")
    for tick in range(5, 8):
        await asyncio.gather(*telemetry.tick(now_s=float(tick)))
    assert server.requests == {"good": 8, "stalled": 0}
    assert cluster.calls.count(("list", "ReplicaSet")) == 1 + 3  # the forged owner is looked up at each pass
    telemetry.pods.observe(forged, "DELETED")
    moved = cluster.add("good", ["good"])
    moved["status"]["workload"] = "Deployment/good-v2"  # another workload: the pods' ReplicaSet is not its
    telemetry.track(moved, deleted=False)
    await asyncio.gather(*telemetry.tick(now_s=8.0))
    assert cluster.calls[-2:] == [("get", "Deployment"), ("list", "ReplicaSet")] and server.requests["good"] == 8
    assert len(cluster.calls) == 2 + 3 * 2 + 2
    await telemetry.close()


async def test_a_resync_that_cannot_list_keeps_the_index_and_says_so(peer: tuple[Peer, dict[str, int]],
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    _, ports = peer
    cluster = Cluster(ports)
    telemetry = telemetry_for(cluster)
    serve(telemetry, cluster, "good", ["good"])

    async def refused(kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        raise KubeTemporaryError("GET Pod ns/None: HTTP 503: busy")

    cluster.list = refused  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="test"):
        await telemetry.resync_pods()
    assert [p["metadata"]["name"] for p in telemetry.pods.of("ns", "good")] == ["good-00"]
    assert "could not list the pods of ns to check the pod index: GET Pod ns/None: HTTP 503: busy" in caplog.text


async def test_pods_that_never_answer_hold_connections_not_the_body_slots(peer: tuple[Peer, dict[str, int]],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Three objects with four pods each that never send a header: twelve reads wait, more than
    the bodies received at once, and the good object is still read at every tick (before, eight
    read slots in all: two such objects and a half took them all)."""
    monkeypatch.setenv("SPECDEPLOY_METRICS_TIMEOUT_S", "600")
    server, ports = peer
    cluster = Cluster(ports)
    telemetry = telemetry_for(cluster)
    for name in ("dead-a", "dead-b", "dead-c"):
        serve(telemetry, cluster, name, ["stalled"] * MAX_OBJECT_SCRAPES)
    serve(telemetry, cluster, "good", ["good"])
    for tick in range(3):
        await _round(telemetry.tick(now_s=float(tick)), "good")
    assert server.requests["good"] == 3
    assert server.waiting == 3 * MAX_OBJECT_SCRAPES > MAX_PARALLEL_BODIES
    await telemetry.close()


async def test_every_tenth_pass_drops_pods_the_watch_missed(peer: tuple[Peer, dict[str, int]]) -> None:
    """A pod deleted while the watch was down is still in the index; the LIST of the tenth pass
    no longer holds it, and it is dropped: not read again."""
    server, ports = peer
    cluster = Cluster(ports)
    telemetry = telemetry_for(cluster)
    serve(telemetry, cluster, "good", ["good"])
    ghost = cluster.pod_objects("good")[0]
    ghost["metadata"]["name"] = "good-ghost"
    telemetry.pods.observe(ghost, "ADDED")  # deleted since; the DELETED event never came
    for tick in range(RESYNC_PASSES - 1):
        await asyncio.gather(*telemetry.tick(now_s=float(tick)))
    assert server.requests["good"] == 2 * (RESYNC_PASSES - 1) and ("list", "Pod") not in cluster.calls
    await asyncio.gather(*telemetry.tick(now_s=float(RESYNC_PASSES)))
    assert telemetry._resync is not None
    await telemetry._resync
    assert cluster.calls.count(("list", "Pod")) == 1
    assert [p["metadata"]["name"] for p in telemetry.pods.of("ns", "good")] == ["good-00"]
    before = server.requests["good"]
    await asyncio.gather(*telemetry.tick(now_s=float(RESYNC_PASSES + 1)))
    assert server.requests["good"] == before + 1
    await telemetry.close()
