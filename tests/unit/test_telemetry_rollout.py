"""The auto-k rollout when its reconciles do not finish: k goes back when the new k does not
plan, and a reconcile cut off after that (over budget, an API error) is owed to the next scrape,
until one finishes. The reconciles are scripted here; the integration suite runs them for real
(test_telemetry: a rollout that stalls, a k that does not plan)."""

from __future__ import annotations

import logging
from typing import Any

from specdeploy.controller.scraping.telemetry import Telemetry, _Tracked
from specdeploy.telemetry import Window
from specdeploy.telemetry.auto_k import KChange


class RecordingKube:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def merge_patch(self, kind: str, namespace: str, name: str, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        self.patches.append(body)
        return body

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return None  # no workload, so no pods to scrape: a scrape only runs what is owed

    async def list(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        return []


def telemetry_with(reconciles: list[tuple[bool, int | None]]) -> tuple[Telemetry, RecordingKube, list[int]]:
    kube = RecordingKube()
    telemetry = Telemetry(kube, logging.getLogger("test"), budget_s=1.0)  # type: ignore[arg-type]
    calls: list[int] = []

    async def scripted(namespace: str, name: str) -> tuple[bool, int | None]:
        calls.append(1)
        return reconciles.pop(0)

    telemetry._reconcile = scripted  # type: ignore[method-assign]
    return telemetry, kube, calls


def serving() -> _Tracked:
    body = {"metadata": {"name": "sd", "namespace": "ns"}, "spec": {"draft": {"numSpeculativeTokens": "auto"}},
            "status": {"plan": {"method": "eagle3", "numSpeculativeTokens": 3}, "workload": {"kind": "Deployment", "name": "sd"}}}
    return _Tracked(body, Window(60.0), k=3)


async def test_a_k_that_does_not_plan_goes_back_and_a_cut_off_settle_is_run_at_the_next_scrape() -> None:
    # The rollout's reconcile finishes with k 3 (k 1 did not plan); the settle after k goes back
    # is cut off twice, then finishes.
    telemetry, kube, calls = telemetry_with([(True, 3), (False, None), (False, None), (True, 3)])
    tracked = serving()
    await telemetry._roll_out(tracked, "ns", "sd", KChange(1, "auto: k 3 -> 1"), old_k=3)
    (back,) = kube.patches
    speculation = back["status"]["speculation"]
    assert speculation["numSpeculativeTokens"] == 3
    assert speculation["numSpeculativeTokensReason"] == "auto: k 1 did not plan (see conditions and findings); k 3 stays"
    assert len(calls) == 2 and tracked.owed is not None  # the settle did not finish: owed
    await telemetry.observe(tracked, 1.0)  # the next scrape
    assert len(calls) == 3 and tracked.owed is not None
    await telemetry.observe(tracked, 2.0)
    assert len(calls) == 4 and tracked.owed is None  # finished: nothing owed
    assert len(kube.patches) == 1  # k went back once, however often the settle ran


async def test_a_rollout_cut_off_is_run_again_whole_at_the_next_scrape() -> None:
    telemetry, kube, calls = telemetry_with([(False, None), (True, 5)])
    tracked = serving()
    await telemetry._roll_out(tracked, "ns", "sd", KChange(5, "auto: k 3 -> 5"), old_k=3)
    assert tracked.owed is not None and kube.patches == []
    await telemetry.observe(tracked, 1.0)
    assert len(calls) == 2 and tracked.owed is None and kube.patches == []  # k 5 planned: nothing to undo
