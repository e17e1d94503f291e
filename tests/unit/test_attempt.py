"""One reconcile as every caller runs it (`attempt.reconcile_once`): the budget counts only the
operator's own work, a cut-off keeps the reconcile's progress for the retry to join, the status
note and its Event are written once per episode, and a slot never outnumbers the connections.

The reconcile itself is scripted (each pass waits on events the test sets), against a client
that records what it writes; a one-millisecond budget makes every unpaused wait a cut-off."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

import pytest

from specdeploy.controller.reconcile import state
from specdeploy.controller.reconcile.attempt import Outcome, reconcile_once
from specdeploy.controller.reconcile.budget import waiting
from specdeploy.controller.reconcile.offload import Slots
from specdeploy.controller.reconcile.steps import Reconciler, Result

BUDGET_S = 0.001


def cr(generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"namespace": "ns", "name": "sd", "uid": "u1", "generation": generation}, "spec": {}}


class RecordingKube:
    """The live CR for the notes' reads; every status patch kept."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return cr()

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any], *, subresource: str | None = None) -> dict[str, Any]:
        self.patches.append(patch)
        return {}


class Scripted(Reconciler):
    """Each pass: `api` (a request held by the API server), then `work` (the operator's own)."""

    def __init__(self, kube: RecordingKube) -> None:
        super().__init__(kube, logging.getLogger("test"))  # type: ignore[arg-type]
        self.api, self.work = asyncio.Event(), asyncio.Event()
        self.api.set()
        self.work.set()
        self.passes = 0
        self.error: Exception | None = None

    async def reconcile(self, body: Mapping[str, Any], *, now: str, retry: int = 0) -> Result:
        self.passes += 1
        with waiting():
            await self.api.wait()
        await self.work.wait()
        if self.error is not None:
            raise self.error
        return Result({}, body=cr(), status={})


@pytest.fixture
def reconciler() -> Scripted:
    state.fresh()
    return Scripted(RecordingKube())


class Posted(list):  # type: ignore[type-arg]
    def __call__(self, body: Mapping[str, Any], events: list[tuple[str, str, str]]) -> None:
        self.extend(events)


async def once(reconciler: Scripted, posted: Posted, body: dict[str, Any] | None = None, **kwargs: Any) -> Outcome:
    return await reconcile_once(reconciler, body or cr(), budget_s=BUDGET_S, logger=logging.getLogger("test"), post=posted, **kwargs)


async def test_time_waiting_on_the_api_server_is_not_spent_from_the_budget(reconciler: Scripted) -> None:
    reconciler.api.clear()
    posted = Posted()
    caller = asyncio.create_task(once(reconciler, posted))
    await asyncio.sleep(50 * BUDGET_S)  # fifty budgets on a request the API server holds
    reconciler.api.set()
    outcome = await caller
    assert outcome.result is not None and outcome.retry is None
    assert reconciler.kube.patches == [] and posted == []  # no note, no Event


async def test_a_cut_off_keeps_its_progress_and_says_so_once(reconciler: Scripted) -> None:
    reconciler.work.clear()  # the operator's own work outlasts the budget
    posted = Posted()
    first = await once(reconciler, posted)
    assert first.result is None and first.retry
    assert [e[1] for e in posted] == ["ReconcileTimeout"] and len(reconciler.kube.patches) == 1
    second = await once(reconciler, posted)  # kopf's retry: joins the reconcile at work
    assert second.result is None and reconciler.passes == 1
    assert len(posted) == 1 and len(reconciler.kube.patches) == 1  # no second note, no second Event
    reconciler.work.set()
    third = await once(reconciler, posted)
    assert third.result is not None and third.retry is None and reconciler.passes == 1
    reconciler.work.clear()  # slow again, after a reconcile finished: a new episode, said again
    await once(reconciler, posted)
    assert len(posted) == 2 and len(reconciler.kube.patches) == 2


async def test_news_during_a_pass_makes_one_more_and_a_retry_none(reconciler: Scripted) -> None:
    reconciler.api.clear()
    posted = Posted()
    started = asyncio.create_task(once(reconciler, posted))
    while reconciler.passes == 0:
        await asyncio.sleep(0)
    joined = asyncio.create_task(once(reconciler, posted))  # same generation, nothing new: joins
    woken = asyncio.create_task(once(reconciler, posted, news=True))  # its preflight Job changed
    await asyncio.sleep(0)
    reconciler.api.set()
    outcomes = await asyncio.gather(started, joined, woken)
    assert all(o.result is not None for o in outcomes)
    assert reconciler.passes == 2


async def test_a_newer_generation_stops_the_run_of_the_older(reconciler: Scripted) -> None:
    reconciler.work.clear()
    posted = Posted()
    await once(reconciler, posted)  # cut off, still at work on generation 1
    reconciler.work.set()
    outcome = await once(reconciler, posted, cr(generation=2))
    assert outcome.result is not None and reconciler.passes == 2


async def test_deleting_a_cr_stops_its_run_not_that_of_a_cr_made_again_under_its_name(reconciler: Scripted) -> None:
    reconciler.work.clear()
    posted = Posted()
    await once(reconciler, posted)  # cut off: the run of uid u1 goes on
    reconciler.runs.forget("ns", "sd", "an-earlier-uid")  # the DELETED event of an earlier CR of that name
    run = reconciler.runs.get(("ns", "sd"))
    assert run is not None and not run.task.cancelled()
    reconciler.runs.forget("ns", "sd", "u1")
    outcome = await asyncio.gather(run.task, return_exceptions=True)
    assert run.task.cancelled() and reconciler.runs.get(("ns", "sd")) is None, outcome


async def test_a_bug_is_noted_once_until_a_reconcile_finishes(reconciler: Scripted) -> None:
    reconciler.error = ValueError("boom")
    posted = Posted()
    for _ in range(3):
        outcome = await once(reconciler, posted)
        assert outcome.result is None and outcome.retry and "boom" in outcome.retry
    assert len(reconciler.kube.patches) == 1
    reconciler.error = None
    assert (await once(reconciler, posted)).result is not None
    reconciler.error = ValueError("boom")
    await once(reconciler, posted)
    assert len(reconciler.kube.patches) == 2


def test_reconcile_slots_never_outnumber_the_api_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Slots().n == 16
    monkeypatch.setenv("SPECDEPLOY_MAX_RECONCILES", "64")
    monkeypatch.setenv("SPECDEPLOY_API_CONNECTIONS", "8")
    assert Slots().n == 8
    monkeypatch.setenv("SPECDEPLOY_MAX_RECONCILES", "4")
    assert Slots().n == 4
