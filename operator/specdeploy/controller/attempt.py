"""One reconcile as every caller runs it: kopf's handlers (create, update, resume) and the
telemetry's auto-k rollout. One rule for all of them, so that no path lets one slow CR starve
the others:

- it waits for one of the reconcile slots (`offload.Slots`), and waiting is not its time;
- it runs within the per-reconcile time budget (SPECDEPLOY_RECONCILE_BUDGET_S); cut off, it
  says so in status (`Reconciler.over_budget`: Progressing=False ReconcileTimeout, one Warning
  Event), and the slow step keeps running for the retry to join;
- a bug says so in status (`Reconciler.failed`) instead of leaving none;
- the metrics count it by result.

The caller decides how to retry (kopf: `TemporaryError` with its backoff; the telemetry: at
its next scrape) and how Events are posted (`post`).
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from specdeploy.api.conditions import SPEC_CONDITIONS
from specdeploy.controller.kube import KubePermanentError, KubeTemporaryError
from specdeploy.controller.metrics import METRICS
from specdeploy.controller.reconcile import Reconciler, Result

Events = list[tuple[str, str, str]]  # (type, reason, message)
Post = Callable[[Mapping[str, Any], Events], "Awaitable[None] | None"]


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Outcome:
    """`result`: the finished reconcile (None when it was cut off, failed, or could not read
    the CR; `result.body` None: the CR is gone). `retry`: why to try again, `retry_kind` the
    backoff schedule ("source" | "api" | "slow")."""

    result: Result | None
    retry: str | None = None
    retry_kind: str = "api"


async def reconcile_once(reconciler: Reconciler, body: Mapping[str, Any], *, budget_s: float, logger: Any,
                         post: Post, retry: int = 0) -> Outcome:
    """Reconcile `body` once, in a slot and within `budget_s`; Events posted through `post`."""
    with METRICS.duration.time():
        try:
            async with reconciler.slots.held():  # waiting for a slot is not the CR's time
                result = await asyncio.wait_for(reconciler.reconcile(body, now=utc_now(), retry=retry), budget_s)
        except asyncio.TimeoutError:  # over budget: say so, retry later; the others go on
            METRICS.reconciles.labels("timeout").inc()
            logger.warning("Reconcile took longer than its %g s budget; retrying", budget_s)
            note = await _note(reconciler, body, logger, post, lambda live: reconciler.over_budget(live, budget_s, now=utc_now()))
            return Outcome(None, note.retry or "over budget")
        except KubeTemporaryError as exc:  # reading the CR itself failed: nothing decided yet
            METRICS.reconciles.labels("retry").inc()
            return Outcome(None, str(exc), "slow" if exc.slow else "api")
        except Exception as exc:  # a bug: say so in status rather than leave none
            METRICS.reconciles.labels("error").inc()
            logger.exception("Reconcile failed unexpectedly")
            note = await _note(reconciler, body, logger, post, lambda live, error=exc: reconciler.failed(live, error, now=utc_now()))
            return Outcome(None, note.retry or str(exc))
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


async def _note(reconciler: Reconciler, body: Mapping[str, Any], logger: Any, post: Post,
                compute: Callable[[Mapping[str, Any]], Result]) -> Result:
    """Write a failure note (over budget, unexpected error) against the live status; a note
    that cannot be written is logged, and the retry tries again."""
    meta = body.get("metadata") or {}
    try:
        result = await reconciler.write_status(meta["namespace"], meta["name"], compute)
    except (KubeTemporaryError, KubePermanentError) as exc:
        logger.warning("Could not write the status: %s", exc)
        return Result({})
    await _posted(post, result.body or body, result.events)
    return result


async def _posted(post: Post, body: Mapping[str, Any], events: Events) -> None:
    if events:
        posted = post(body, events)
        if inspect.isawaitable(posted):
            await posted

