"""The telemetry keeps a copy of every CR between scrapes: it must hold what the scraper reads
and share no container with the watch event, or the operator holds every CR twice (bench/RESULTS.md)."""

from __future__ import annotations

import copy
from typing import Any

from specdeploy.controller.scraping.telemetry import CONDITION, _slim


def watched_cr() -> dict[str, Any]:
    return {
        "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
        "metadata": {"name": "llama", "namespace": "ns", "uid": "u1", "generation": 3, "managedFields": [{"big": "x" * 1000}]},
        "spec": {"target": {"config": {"hidden_size": 4096}}, "draft": {"numSpeculativeTokens": "auto", "config": {"x": 1}}},
        "status": {
            "plan": {"method": "eagle3", "numSpeculativeTokens": 3, "tensorParallelSize": 1,
                     "memory": {"targetWeightsGiB": 15.0, "draftWeightsGiB": 0.8, "kvCacheGiB": 40.0}},
            "workload": {"kind": "Deployment", "name": "llama"},
            "speculation": {"acceptanceRate": 0.5, "numSpeculativeTokensReason": "auto: started at 3"},
            "conditions": [{"type": "Ready", "status": "True"}, {"type": CONDITION, "status": "True", "reason": "Pays"}],
            "findings": [{"code": "k-auto", "message": "auto: starts at k=3", "field": "spec.draft"},
                         {"code": "mla-head-dim", "message": "long message " * 100}],
        },
    }


def _containers(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [id(value), *(i for v in value.values() for i in _containers(v))]
    if isinstance(value, list):
        return [id(value), *(i for v in value for i in _containers(v))]
    return []


def test_the_copy_keeps_what_the_scraper_reads() -> None:
    body = watched_cr()
    slim = _slim(body)
    assert slim["metadata"] == {"name": "llama", "namespace": "ns", "uid": "u1", "generation": 3}
    assert slim["spec"] == {"draft": {"numSpeculativeTokens": "auto"}}
    status = slim["status"]
    assert status["plan"] == {"method": "eagle3", "numSpeculativeTokens": 3,
                              "memory": {"targetWeightsGiB": 15.0, "draftWeightsGiB": 0.8}}
    assert status["workload"] == body["status"]["workload"]
    assert status["speculation"] == body["status"]["speculation"]
    assert [c["type"] for c in status["conditions"]] == [CONDITION]
    assert status["findings"] == [{"code": "k-auto", "message": "auto: starts at k=3"}]


def test_the_copy_shares_no_container_with_the_watch_event() -> None:
    body = watched_cr()
    slim = _slim(body)
    shared = set(_containers(body)) & set(_containers(slim))
    assert not shared
    before = copy.deepcopy(slim)
    body["status"]["speculation"]["acceptanceRate"] = 0.1
    body["status"]["conditions"][1]["status"] = "False"
    assert slim == before


def test_a_cr_with_no_status_yet() -> None:
    body = watched_cr()
    del body["status"]
    assert _slim(body)["status"] == {"conditions": [], "findings": []}
