"""The scraper's trust rules, pure or on loopback: which pods are the workload's (owner chain by
uid), which counters are numbers, and what a read refuses (status, encoding, size)."""

from __future__ import annotations

import gzip
from typing import Any

import pytest
from aiohttp import web

from specdeploy.controller.scraping.scrape import PodIndex, ScrapeError, controlled_uids, controller_uid, read_metrics, session, slim_pod
from specdeploy.render.labels import LWS_WORKER_INDEX_LABEL, labels
from specdeploy.telemetry.metrics import RUNNING, MetricsError, parse_counters, parse_sample


def _obj(kind: str, uid: str, owner: tuple[str, str] | None = None, controller: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{kind.lower()}-{uid}", "uid": uid}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "uid": owner[1], "name": "x", "controller": controller}]
    return {"kind": kind, "metadata": meta}


def test_only_pods_whose_owner_chain_leads_to_the_deployment_are_its_pods() -> None:
    deployment = _obj("Deployment", "d1")
    ours, foreign = _obj("ReplicaSet", "rs1", ("Deployment", "d1")), _obj("ReplicaSet", "rs2", ("Deployment", "d-other"))
    owners = controlled_uids([ours, foreign], deployment)
    assert owners == {"rs1"}
    pods = [_obj("Pod", "p1", ("ReplicaSet", "rs1")), _obj("Pod", "p2", ("ReplicaSet", "rs2")),
            _obj("Pod", "p3"),  # labels only
            _obj("Pod", "p4", ("ReplicaSet", "rs-made-up")),  # an ownerReference to no ReplicaSet of ours
            _obj("Pod", "p5", ("ReplicaSet", "rs1"), controller=False)]  # not the controller
    assert [p["metadata"]["uid"] for p in pods if controller_uid(p, "ReplicaSet") in owners] == ["p1"]


def test_a_leaderworkersets_pods_are_those_of_its_leader_statefulset() -> None:
    lws = _obj("LeaderWorkerSet", "l1")
    owners = controlled_uids([_obj("StatefulSet", "s1", ("LeaderWorkerSet", "l1"))], lws)
    pods = [_obj("Pod", "p1", ("StatefulSet", "s1")), _obj("Pod", "p2", ("ReplicaSet", "s1"))]
    assert [p["metadata"]["uid"] for p in pods if controller_uid(p, "StatefulSet") in owners] == ["p1"]
    assert controlled_uids([_obj("StatefulSet", "s1", ("LeaderWorkerSet", "l1"))], {"kind": "LeaderWorkerSet", "metadata": {}}) == set()
    assert controlled_uids([_obj("StatefulSet", "s1", ("Job", "l1"))], _obj("Job", "l1")) == set()  # not a workload kind


def _pod(name: str, cr: str, **meta: object) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels(cr), **meta},
            "spec": {"containers": [{"name": "vllm", "env": [{"name": "X", "value": "y" * 100}],
                                     "ports": [{"name": "metrics", "containerPort": 9}, {"name": "http", "containerPort": 8001}]}]},
            "status": {"podIP": "10.0.0.7", "hostIP": "10.1.0.1",
                       "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}]}}


def test_the_pod_index_follows_the_watch_by_the_cr_the_pods_serve() -> None:
    index = PodIndex()
    index.observe(_pod("a-0", "a"), None)  # listed when the watch started
    index.observe(_pod("a-1", "a"), "ADDED")
    index.observe(_pod("b-0", "b"), "ADDED")
    index.observe({**_pod("x-0", "a"), "metadata": {"name": "x-0", "namespace": "ns", "labels": {"app": "other"}}}, "ADDED")
    assert sorted(p["metadata"]["name"] for p in index.of("ns", "a")) == ["a-0", "a-1"]
    assert index.of("other-ns", "a") == [] and index.of("ns", "nobody") == []
    index.observe(_pod("a-1", "b"), "MODIFIED")  # relabelled: it now serves b
    index.observe(_pod("a-0", "a"), "DELETED")
    assert index.of("ns", "a") == []
    assert sorted(p["metadata"]["name"] for p in index.of("ns", "b")) == ["a-1", "b-0"]


def test_the_pod_index_keeps_only_what_the_scraper_reads() -> None:
    pod = _pod("a-0", "a", deletionTimestamp="2026-12-06T00:00:00Z", managedFields=[{"x": "y" * 1000}],
               ownerReferences=[{"kind": "ReplicaSet", "uid": "rs1", "controller": True, "name": "a-5d"}, {"kind": "Node", "uid": "n1"}])
    pod["metadata"]["labels"][LWS_WORKER_INDEX_LABEL] = "0"
    assert slim_pod(pod) == {
        "metadata": {"name": "a-0", "labels": {LWS_WORKER_INDEX_LABEL: "0"}, "deletionTimestamp": "2026-12-06T00:00:00Z",
                     "ownerReferences": [{"kind": "ReplicaSet", "uid": "rs1", "controller": True}]},
        "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8001}]}]},
        "status": {"podIP": "10.0.0.7", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_resync_drops_only_pods_the_list_lacks_and_no_event_touched_since() -> None:
    index = PodIndex()
    for name in ("a-0", "a-1", "a-2"):
        index.observe(_pod(name, "a"), "ADDED")
    index.observe({**_pod("c-0", "c"), "metadata": {**_pod("c-0", "c")["metadata"], "namespace": "elsewhere"}}, "ADDED")
    mark = index.mark()
    index.observe(_pod("a-3", "a"), "ADDED")  # created after the LIST began: not in it, kept
    index.observe(_pod("a-2", "a"), "MODIFIED")  # seen since: kept
    assert index.resync("ns", [_pod("a-0", "a"), _pod("gone-meanwhile", "a")], mark) == 1  # a-1 only; nothing added
    assert sorted(p["metadata"]["name"] for p in index.of("ns", "a")) == ["a-0", "a-2", "a-3"]
    assert [p["metadata"]["name"] for p in index.of("elsewhere", "c")] == ["c-0"]  # another namespace's LIST


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-1"])
def test_a_counter_that_is_not_a_finite_count_is_refused_by_name(value: str) -> None:
    with pytest.raises(MetricsError, match="vllm:spec_decode_num_drafts_total is .*: a count is a finite number >= 0"):
        parse_counters(f'vllm:spec_decode_num_drafts_total{{engine="0"}} {value}\n')


def test_a_running_requests_gauge_that_is_not_a_finite_count_is_refused() -> None:
    text = ('vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
            f'{RUNNING}{{engine="0"}} NaN\n')
    with pytest.raises(MetricsError, match=f"{RUNNING} is nan: a count is a finite number >= 0"):
        parse_sample(text)


def test_a_draft_position_beyond_any_k_is_refused() -> None:
    text = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1000000000"} 1\n'
    with pytest.raises(MetricsError, match="a draft position is from 0 to 63"):
        parse_counters(text)


async def _serve(handler: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/metrics"


@pytest.mark.parametrize("answer, why", [
    (lambda: web.Response(status=500, text="boom"), "HTTP 500"),
    (lambda: web.Response(body=gzip.compress(b"x" * 4096), headers={"Content-Encoding": "gzip"}), "only identity is read"),
    (lambda: web.Response(body=b"x" * 4096), "body of 4096 bytes is over the limit of 2048"),
])
async def test_a_read_refuses_what_it_cannot_trust(answer: Any, why: str) -> None:
    async def handler(request: web.Request) -> web.Response:
        return answer()

    runner, url = await _serve(handler)
    try:
        async with session() as client:
            with pytest.raises(ScrapeError, match=why):
                await read_metrics(client, url, max_bytes=2048, timeout_s=5)
    finally:
        await runner.cleanup()


async def test_a_body_within_the_limit_is_read_whole() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=b"y" * 2048)

    runner, url = await _serve(handler)
    try:
        async with session() as client:
            assert await read_metrics(client, url, max_bytes=2048, timeout_s=5) == b"y" * 2048
    finally:
        await runner.cleanup()
