"""The scraper's trust rules, pure or on loopback: which pods are the workload's (owner chain by
uid), which counters are numbers, and what a read refuses (status, encoding, size)."""

from __future__ import annotations

import gzip
from typing import Any

import pytest
from aiohttp import web

from specdeploy.controller.scrape import ScrapeError, owned_pods, read_metrics, session
from specdeploy.telemetry.metrics import RUNNING, MetricsError, parse_counters, parse_sample


def _obj(kind: str, uid: str, owner: tuple[str, str] | None = None, controller: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{kind.lower()}-{uid}", "uid": uid}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "uid": owner[1], "name": "x", "controller": controller}]
    return {"kind": kind, "metadata": meta}


def test_only_pods_whose_owner_chain_leads_to_the_deployment_are_its_pods() -> None:
    deployment = _obj("Deployment", "d1")
    ours, foreign = _obj("ReplicaSet", "rs1", ("Deployment", "d1")), _obj("ReplicaSet", "rs2", ("Deployment", "d-other"))
    pods = [_obj("Pod", "p1", ("ReplicaSet", "rs1")), _obj("Pod", "p2", ("ReplicaSet", "rs2")),
            _obj("Pod", "p3"),  # labels only
            _obj("Pod", "p4", ("ReplicaSet", "rs-made-up")),  # an ownerReference to no ReplicaSet of ours
            _obj("Pod", "p5", ("ReplicaSet", "rs1"), controller=False)]  # not the controller
    assert [p["metadata"]["uid"] for p in owned_pods(pods, [ours, foreign], deployment)] == ["p1"]


def test_a_leaderworkersets_pods_are_those_of_its_leader_statefulset() -> None:
    lws = _obj("LeaderWorkerSet", "l1")
    leaders = _obj("StatefulSet", "s1", ("LeaderWorkerSet", "l1"))
    pods = [_obj("Pod", "p1", ("StatefulSet", "s1")), _obj("Pod", "p2", ("ReplicaSet", "s1"))]
    assert [p["metadata"]["uid"] for p in owned_pods(pods, [leaders], lws)] == ["p1"]
    assert owned_pods(pods, [leaders], {"kind": "LeaderWorkerSet", "metadata": {}}) == []  # no uid: nothing is its


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
