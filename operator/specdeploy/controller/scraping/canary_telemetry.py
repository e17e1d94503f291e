"""The telemetry's part of a draft canary: per-arm counts over the canary's life, the decision
(rollout/decision.py) and status.rollout's figures; a decision other than Wait runs the
reconcile, which promotes or rolls back (controller/reconcile/canary.py).

The stable arm's samples are the ones the ordinary round read (its workload's pods), counted from
the canary's first round (while it still loads). The canary's pods are the canary Deployment's, by
owner uid, read here, each counted from its own process start: the Service sends a pod nothing
before it is Ready, so all it counted is the canary's serving (no baseline scrape to wait for).
Each arm has a Window that never forgets (restart-aware, telemetry/window.py): the decision is a
function of the counts, never of how long they took."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

from specdeploy.controller.process.kube import Kube
from specdeploy.controller.scraping.scrape import PodIndex, controller_uid, workload_owners
from specdeploy.rollout.arms import failed, ready
from specdeploy.rollout.decision import Arm, ArmFigures, Decision, decide
from specdeploy.telemetry import Window, analyse
from specdeploy.telemetry.cost import CostModelError
from specdeploy.telemetry.load import analyse_load
from specdeploy.telemetry.metrics import Counters, Sample
from specdeploy.telemetry.model import draft_cost
from specdeploy.telemetry.window import LoadWindow, NotARestart
from specdeploy.vllm.methods import drafting

Reader = Callable[[list[str]], Awaitable[list[tuple[Sample | None, str | None]]]]
Targets = Callable[[list[Mapping[str, Any]]], list[tuple[str, str | None, str | None]]]
DIGITS = 4


@dataclass
class CanaryWatch:
    """One canary's counts: made at its first round (while it loads), dropped when its draft changes."""

    draft: str
    started_s: float
    stable: Window = field(default_factory=lambda: Window(math.inf))
    canary: Window = field(default_factory=lambda: Window(math.inf))
    stable_load: LoadWindow = field(default_factory=lambda: LoadWindow(math.inf))
    canary_load: LoadWindow = field(default_factory=lambda: LoadWindow(math.inf))
    was_ready: bool = False


def _observe(window: Window, load: LoadWindow, pod: str, sample: Sample, now_s: float) -> None:
    try:
        window.observe(pod, now_s, sample.counters, sample.started)
    except NotARestart:
        return  # the ordinary round logged it for the stable arm; a canary pod's is not counted either
    load.observe(now_s, sample.running)


def _restarts(pods: list[Mapping[str, Any]]) -> str | None:
    """A canary container that restarted since the canary was Ready: it cannot serve steadily."""
    for pod in pods:
        for container in (pod.get("status") or {}).get("containerStatuses") or ():
            count = container.get("restartCount") if isinstance(container, dict) else None
            if isinstance(count, int) and count > 0:
                return f"pod {(pod.get('metadata') or {}).get('name', '?')} restarted its container {count} time(s)"
    return None


def _arm(counters: Counters, load: LoadWindow, plan: Mapping[str, Any], now_s: float, started_s: float, **kw: Any) -> Arm:
    """The arm as decide() reads it; the cost model's speedup at the arm's typical batch where it runs."""
    method = str(plan.get("method") or "")
    cost, _ = draft_cost(method, plan)
    k = counters.num_speculative_tokens
    batches = load.batch_sizes(now_s)
    at_load = None
    if counters.drafts > 0 and k:
        try:
            analysis = analyse(counters, method=method or None, cost=cost, k=k)
            modelled = analyse_load(analysis, plan, batches)
            if modelled.observed is not None:
                at_load = modelled.work.speedup(modelled.observed.typical, k)
        except CostModelError:
            at_load = None
    running = sum(batches) / len(batches) if batches else None
    return Arm(counters, k=k, cost=cost, parallel=drafting(method) == "parallel", seconds=now_s - started_s, running=running,
               speedup_at_load=at_load, **kw)


def _round(value: float | None, digits: int = DIGITS) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def arm_status(f: ArmFigures) -> dict[str, Any]:
    out = {"drafts": round(f.drafts), "acceptanceRate": _round(f.acceptance_rate), "meanAcceptedLength": _round(f.mean_accepted_length),
           "speedup": _round(f.speedup), "speedupAtLoad": _round(f.speedup_at_load),
           "outputTokensPerSecondPerRequest": _round(f.output_tokens_per_second_per_request, 2),
           "responses": round(f.responses), "serverErrors": round(f.server_errors)}
    return {k: v for k, v in out.items() if v is not None}


def decision_status(d: Decision, margin: float) -> dict[str, Any]:
    out = {"action": d.action, "reason": d.why, "message": d.message[:4096], "margin": margin, "difference": _round(d.difference, 6),
           "lowerBound": _round(d.lower, 6), "upperBound": _round(d.upper, 6)}
    return {k: v for k, v in out.items() if v is not None}


async def canary_round(kube: Kube, pods: PodIndex, read: Reader, targets: Targets, watch: CanaryWatch | None, *,
                       body: Mapping[str, Any], stable_samples: Mapping[str, Sample], now_s: float) -> tuple[CanaryWatch | None, Decision | None]:
    """Add both arms' samples and decide. (the watch to keep, the decision; None: no canary to judge)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    rollout = status.get("rollout") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    kind, _, canary = str(rollout.get("canaryWorkload") or "").partition("/")
    if rollout.get("phase") != "Canary" or kind != "Deployment" or not canary:
        return None, None
    if watch is None or watch.draft != rollout.get("draft"):
        # From the canary's first round, while it loads: the stable arm's counts then cover the canary's whole life.
        watch = CanaryWatch(str(rollout.get("draft")), now_s)
    for pod, sample in stable_samples.items():
        _observe(watch.stable, watch.stable_load, pod, sample, now_s)
    live = await kube.get("Deployment", namespace, canary)
    if live is None:
        return watch, None
    owners = await workload_owners(kube, namespace, name, "Deployment", canary)  # by uid: only the canary's ReplicaSets
    # The pod index keeps no labels: the canary's pods are its ReplicaSets' (the arm label is for people and selectors).
    arm_pods = [p for p in pods.of(namespace, name) if controller_uid(p, "ReplicaSet") in owners]
    wanted = [(pod, url) for pod, url, _ in targets(arm_pods) if url is not None]
    for (pod, _), (sample, _) in zip(wanted, await read([url for _, url in wanted])):
        if sample is not None:
            if pod not in watch.canary.pods:
                # A canary pod's process is the canary's: everything it counted is the canary's (no baseline to wait for).
                _observe(watch.canary, watch.canary_load, pod, Sample(Counters(), (), sample.started), now_s - 1e-3)
            _observe(watch.canary, watch.canary_load, pod, sample, now_s)
    plan = status.get("plan") or {}
    settings = ((body.get("spec") or {}).get("rollout") or {}).get("canary") or {}
    margin, min_drafts = float(settings.get("margin", 0.1)), int(settings.get("minDrafts", 100))
    is_ready = ready(live)
    watch.was_ready = watch.was_ready or is_ready
    # Ready once and no longer: worse, as a canary that serves errors is.
    why_failed = failed(live) or _restarts(arm_pods) or ("the canary was Ready and is not any more" if watch.was_ready and not is_ready else None)
    canary_arm = _arm(watch.canary.increase(now_s), watch.canary_load, plan, now_s, watch.started_s, ready=is_ready, failed=why_failed)
    stable_arm = _arm(watch.stable.increase(now_s), watch.stable_load, plan, now_s, watch.started_s)
    return watch, decide(canary_arm, stable_arm, margin=margin, min_drafts=min_drafts)
