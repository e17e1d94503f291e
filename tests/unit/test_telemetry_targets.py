"""Which pods the telemetry reads, and at which address: only pods that serve HTTP and are ready."""

from __future__ import annotations

from typing import Any

from specdeploy.api.status import Condition
from specdeploy.controller.scraping.telemetry import scrape_targets, set_condition
from specdeploy.render.labels import LWS_WORKER_INDEX_LABEL
from specdeploy.api.conditions import Verdict


def pod(name: str, *, ip: str | None = "10.0.0.7", ready: bool = True, worker: str | None = None,
        port: int | None = 8000, deleting: bool = False) -> dict[str, Any]:
    labels = {LWS_WORKER_INDEX_LABEL: worker} if worker is not None else {}
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T06:00:00Z"
    ports = [{"name": "http", "containerPort": port}] if port else []
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "spec": {"containers": [{"name": "vllm", "ports": ports}]}, "status": status}


def test_every_ready_pod_of_a_deployment_and_only_the_leader_of_an_lws_group() -> None:
    pods = [pod("dep-a"), pod("lws-0", worker="0"), pod("lws-0-1", worker="1"), pod("v6", ip="fd00::7", port=9000)]
    assert scrape_targets(pods) == [
        ("dep-a", "http://10.0.0.7:8000/metrics", None),
        ("lws-0", "http://10.0.0.7:8000/metrics", None),
        ("v6", "http://[fd00::7]:9000/metrics", None),
    ]


def test_pods_that_cannot_answer_are_skipped_with_the_reason() -> None:
    pods = [pod("starting", ready=False), pod("no-ip", ip=None), pod("going", deleting=True), pod("bare", port=None)]
    assert scrape_targets(pods) == [
        ("bare", "http://10.0.0.7:8000/metrics", None),  # no named port: vLLM's default 8000
        ("going", None, "terminating"),
        ("no-ip", None, "no pod IP yet"),
        ("starting", None, "not ready"),
    ]


def test_set_condition_touches_only_speculation_effective_and_keeps_its_transition_time() -> None:
    ready = Condition(type="Ready", status="True", reason="Serving", last_transition_time="t0").model_dump(by_alias=True, exclude_none=True)
    first = set_condition([ready], Verdict("False", "AcceptanceCollapsed", "m1"), now="t1", generation=3)
    assert first[0] == ready and first[1]["lastTransitionTime"] == "t1" and first[1]["status"] == "False"
    same_status = set_condition(first, Verdict("False", "AcceptanceCollapsed", "m2"), now="t2", generation=3)
    assert same_status[1]["lastTransitionTime"] == "t1" and same_status[1]["message"] == "m2"
    unchanged = set_condition(same_status, Verdict("False", "AcceptanceCollapsed", "m2"), now="t3", generation=4)
    assert unchanged is same_status  # nothing to write
    flipped = set_condition(same_status, Verdict("True", "Effective", "ok"), now="t4", generation=4)
    assert flipped[1]["lastTransitionTime"] == "t4"
