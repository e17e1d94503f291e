"""A workload that turns Ready while the reconcile that created it runs sends no further event:
its readiness must still reach the CR, whether the mirror saw the event before the reconcile's
write named the workload or the reconcile's write carried the older 0/1 after the mirror's
(found at 1000 CRs on the real control plane: CRs stuck at 0/1 while their Deployments were 1/1)."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

from specdeploy.api.conditions import SPEC_CONDITIONS
from specdeploy.api.spec import KIND
from specdeploy.controller.reconcile.steps import Reconciler, Result
from specdeploy.controller.reconcile.state import DesiredChildren, StatusWriters

NOW = "2026-12-06T00:00:00Z"
SERVING = "Deployment/sd-1"


class StatusOnlyKube:
    """One CR: get returns a copy, a status merge patch updates it."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert kind == KIND
        return copy.deepcopy(self.body)

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.body.setdefault("status", {}).update(patch["status"])
        return copy.deepcopy(self.body)


def _parent() -> dict[str, Any]:
    conditions = [{"type": kind, "status": "True", "reason": "Valid", "message": "", "lastTransitionTime": NOW} for kind in SPEC_CONDITIONS]
    return {"kind": KIND, "metadata": {"name": "sd-1", "namespace": "ns", "uid": "u1", "generation": 1},
            "status": {"conditions": conditions}}


def _deployment(ready: int) -> dict[str, Any]:
    return {"kind": "Deployment", "metadata": {"name": "sd-1", "namespace": "ns", "generation": 1,
                                               "ownerReferences": [{"kind": KIND, "name": "sd-1", "uid": "u1", "controller": True}]},
            "spec": {"replicas": 1}, "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": ready, "updatedReplicas": 1}}


def _names_the_workload(_parent: Any) -> Result:
    """What the reconcile's write does: names the workload, with the readiness it read (0/1)."""
    return Result({"workload": SERVING, "replicas": 1, "readyReplicas": 0})


async def _race(ready_event_first: bool) -> dict[str, Any]:
    kube = StatusOnlyKube(_parent())
    reconciler = Reconciler(kube, logging.getLogger("test"), desired=DesiredChildren(), status=StatusWriters())  # type: ignore[arg-type]
    if ready_event_first:
        assert (await reconciler.mirror_workload(_deployment(ready=1), "MODIFIED", now=NOW)).status_patch == {}
    result = await reconciler.write_status("ns", "sd-1", _names_the_workload)
    await reconciler._apply_unmirrored("ns", "sd-1", result, NOW)
    return kube.body["status"]


def test_a_ready_event_before_the_workload_is_named_reaches_the_cr() -> None:
    status = asyncio.run(_race(ready_event_first=True))
    assert status["readyReplicas"] == 1
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"


def test_without_a_held_event_the_reconciles_own_reading_stands() -> None:
    status = asyncio.run(_race(ready_event_first=False))
    assert status["readyReplicas"] == 0 and "Ready" not in {c["type"] for c in status["conditions"]}


async def _stale_reconcile_write() -> dict[str, Any]:
    """The mirror writes Ready while a reconcile runs; the reconcile then writes the 0/1 it read
    before. The newer reading must win."""
    parent = _parent()
    parent["status"]["workload"] = SERVING
    kube = StatusOnlyKube(parent)
    reconciler = Reconciler(kube, logging.getLogger("test"), desired=DesiredChildren(), status=StatusWriters())  # type: ignore[arg-type]
    slot = reconciler.status.slot("ns", "sd-1")
    slot.reconciling += 1  # as Reconciler.reconcile does around its steps
    await reconciler.mirror_workload(_deployment(ready=1), "MODIFIED", now=NOW)
    assert kube.body["status"]["readyReplicas"] == 1
    result = await reconciler.write_status("ns", "sd-1", _names_the_workload)
    assert kube.body["status"]["readyReplicas"] == 0  # the stale write
    slot.reconciling -= 1
    await reconciler._apply_unmirrored("ns", "sd-1", result, NOW)
    return kube.body["status"]


def test_a_reconciles_stale_reading_does_not_undo_the_mirrors_newer_one() -> None:
    status = asyncio.run(_stale_reconcile_write())
    assert status["readyReplicas"] == 1
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
