"""One reconcile as every caller runs it: kopf's handlers (create, update, resume), the watch of
preflight Jobs and the telemetry's auto-k rollout. One rule for all of them, so that no path
lets one slow CR starve the others and no slow API server multiplies the requests:

- the reconcile runs as the CR's own task (`state.Run`), in one of the reconcile slots
  (`offload.Slots`, no more than the API connections); waiting for a slot is not its time;
- its time budget (SPECDEPLOY_RECONCILE_BUDGET_S) counts the operator's own work: the clock
  stops while a request waits on the API server (`budget.Budget`);
- cut off, the caller says so in status once (`Reconciler.over_budget`: Progressing=False
  ReconcileTimeout, one Warning Event) and returns; the reconcile keeps its progress and goes
  on, and the next caller (the retry) joins it rather than reading the CR and starting over;
- a bug says so in status (`Reconciler.failed`) instead of leaving none, once per error;
- the metrics count it by result.

The caller decides how to retry (kopf: `TemporaryError` with its backoff; the Job watch: the
same backoff in its handler; the telemetry: at its next scrape). Events go through the `post`
of the caller that started the reconcile, once.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from specdeploy.api.conditions import SPEC_CONDITIONS
from specdeploy.controller.reconcile.budget import Budget
from specdeploy.controller.process.kube import KubePermanentError, KubeTemporaryError
from specdeploy.controller.process.metrics import METRICS
from specdeploy.controller.reconcile.steps import Reconciler, Result, RetryKind
from specdeploy.controller.reconcile.state import Key, Run

Events = list[tuple[str, str, str]]  # (type, reason, message)
Post = Callable[[Mapping[str, Any], Events], "Awaitable[None] | None"]
OVER_BUDGET = "over budget"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Outcome:
    """`result`: the finished reconcile (None when it was cut off, failed, or could not read
    the CR; `result.body` None: the CR is gone). `retry`: why to try again, `retry_kind` its
    backoff schedule."""

    result: Result | None
    retry: str | None = None
    retry_kind: RetryKind = RetryKind.API


async def reconcile_once(reconciler: Reconciler, body: Mapping[str, Any], *, budget_s: float, logger: Any,
                         post: Post, retry: int = 0, news: bool = False) -> Outcome:
    """Reconcile `body` once, in a slot and within `budget_s` of own work; Events posted through
    `post`. `news`: something outside the CR changed (its preflight Job, a k the telemetry
    wrote), so a reconcile already at work makes one more pass."""
    meta = body.get("metadata") or {}
    key: Key = (meta["namespace"], meta["name"])
    run = _joined(reconciler, key, meta, news)
    if run is None:
        run = Run(Budget(budget_s), meta.get("uid"), meta.get("generation"))
        run.task = asyncio.create_task(_attempt(reconciler, body, run, logger=logger, post=post, retry=retry),
                                       name=f"specdeploy-reconcile-{key[0]}/{key[1]}")
        reconciler.runs.put(key, run)
    expiry = asyncio.ensure_future(run.budget.expired.wait())
    try:
        await asyncio.wait({run.task, expiry}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        expiry.cancel()
    if not run.task.done():
        return await _cut_off(reconciler, body, run, budget_s=budget_s, logger=logger, post=post)
    reconciler.runs.drop(key, run)
    if run.task.cancelled():  # for a newer generation, or the CR deleted: the retry reads it again
        return Outcome(None, "the reconcile was stopped for a newer one")
    return run.task.result()


def _joined(reconciler: Reconciler, key: Key, meta: Mapping[str, Any], news: bool) -> Run | None:
    """The run this caller joins (None: start one): the CR's run in flight, or the outcome of
    one that ended after its caller was cut off. A run for another uid or an older generation
    is stopped (its offloaded reads and verdicts go on for the next one)."""
    run = reconciler.runs.get(key)
    if run is None:
        return None
    uid, generation = meta.get("uid"), meta.get("generation")
    if (uid is not None and run.uid is not None and uid != run.uid) or (
            generation is not None and run.generation is not None and generation > run.generation):
        run.task.cancel()
        reconciler.runs.drop(key, run)
        return None
    news = news or (generation is not None and run.generation is None)  # it may have read an older one
    if run.task.done():
        if news:
            reconciler.runs.drop(key, run)
            return None
        return run
    run.again = run.again or news
    run.budget.renew()
    return run


async def _attempt(reconciler: Reconciler, body: Mapping[str, Any], run: Run, *, logger: Any, post: Post, retry: int) -> Outcome:
    """The CR's run: its passes in a slot on the budget's clock, then its Events and metrics."""
    key: Key = (body["metadata"]["namespace"], body["metadata"]["name"])
    with METRICS.duration.time():
        try:
            async with reconciler.slots.held():  # waiting for a slot is not the CR's time
                run.budget.start()
                result = await _passes(reconciler, body, run, post=post, retry=retry)
        except KubeTemporaryError as exc:  # reading the CR itself failed: nothing decided yet
            METRICS.reconciles.labels("retry").inc()
            return Outcome(None, str(exc), RetryKind.after(exc))
        except Exception as exc:  # a bug: say so in status rather than leave none
            METRICS.reconciles.labels("error").inc()
            logger.exception("Reconcile failed unexpectedly")
            if not reconciler.runs.note(key, f"error: {exc}"):
                return Outcome(None, str(exc))
            note = await _note(reconciler, body, logger, post, lambda live, error=exc: reconciler.failed(live, error, now=utc_now()))
            return Outcome(None, note.retry or str(exc))
        finally:
            run.budget.close()
    reconciler.runs.settled(key)
    return await _finished(result, post)


async def _passes(reconciler: Reconciler, body: Mapping[str, Any], run: Run, *, post: Post, retry: int) -> Result:
    """Reconcile, and again while news came during the pass (each pass reads the live CR)."""
    while True:
        run.again = run.written = False
        result = await reconciler.reconcile(body, now=utc_now(), retry=retry)
        run.written = True  # before any await: a cut-off note computed after this sees it
        if not run.again or result.body is None:
            return result
        await _posted(post, result.body, result.events)


async def _finished(result: Result, post: Post) -> Outcome:
    """The Events and metrics of a finished reconcile, and whether to retry it."""
    if result.body is None:
        return Outcome(result)  # the CR is gone
    meta = result.body.get("metadata") or {}
    METRICS.state.observe(meta.get("namespace", ""), meta.get("name", ""), result.status)
    await _posted(post, result.body, result.events)
    if result.retry is not None:
        METRICS.reconciles.labels("retry").inc()
        return Outcome(result, result.retry, result.retry_kind)
    valid = all(c.get("status") == "True" for c in result.status.get("conditions") or [] if c.get("type") in SPEC_CONDITIONS)
    METRICS.reconciles.labels("ok" if valid else "invalid").inc()
    return Outcome(result)


async def _cut_off(reconciler: Reconciler, body: Mapping[str, Any], run: Run, *, budget_s: float, logger: Any, post: Post) -> Outcome:
    """Over budget: the run goes on for the retry to join; the status says so once per episode
    (not over the status the run wrote meanwhile)."""
    METRICS.reconciles.labels("timeout").inc()
    logger.warning("Reconcile took longer than its %g s budget of own work; retrying", budget_s)
    if not reconciler.runs.note((body["metadata"]["namespace"], body["metadata"]["name"]), OVER_BUDGET):
        return Outcome(None, OVER_BUDGET)

    def compute(live: Mapping[str, Any]) -> Result:
        return Result({}) if run.written else reconciler.over_budget(live, budget_s, now=utc_now())

    note = await _note(reconciler, body, logger, post, compute)
    return Outcome(None, note.retry or OVER_BUDGET)


async def _note(reconciler: Reconciler, body: Mapping[str, Any], logger: Any, post: Post,
                compute: Callable[[Mapping[str, Any]], Result]) -> Result:
    """Write a failure note (over budget, unexpected error) against the live status; a note
    that cannot be written is logged, and the retry tries again."""
    meta = body.get("metadata") or {}
    try:
        result = await reconciler.write_status(meta["namespace"], meta["name"], compute)
    except (KubeTemporaryError, KubePermanentError) as exc:
        logger.warning("Could not write the status: %s", exc)
        reconciler.runs.settled((meta["namespace"], meta["name"]))  # not written: the next one tries
        return Result({})
    await _posted(post, result.body or body, result.events)
    return result


async def _posted(post: Post, body: Mapping[str, Any], events: Events) -> None:
    if events:
        posted = post(body, events)
        if inspect.isawaitable(posted):
            await posted
