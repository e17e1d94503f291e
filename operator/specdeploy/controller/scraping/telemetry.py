"""The scraper: every interval, read the /metrics of each ready serving pod (the leader of each
LeaderWorkerSet group) at its IP, and write `status.speculation` plus the
SpeculationEffective condition when the counters moved.

One loop for every SpeculativeDeployment the operator sees, not a kopf timer per object: kopf
puts a finalizer on objects with timers or daemons, and this operator keeps deletion free of
finalizers (docs/install.md). The objects come from a watch-event handler; the loop runs as an
asyncio task from startup to cleanup: its API calls are the operator's asyncio client, and the
pods' /metrics reads are bounded asyncio reads (`controller.scrape`: only the workload's own pods,
a byte limit and a total deadline per read); parsing runs in a thread.

Each object's round (its pods, read them, write its status) is a task of its own, and each
object has a slot: the interval is cut into up to MAX_SLOTS slots of at least SLOT_S, the loop
ticks once per slot, and a tick starts the rounds of its slot's objects whose last round has
ended. So a pass spreads its objects evenly over the interval (new objects join the emptiest
slot), a slow object delays only its own next round, and the work at any moment is a slot's.
A round's pods come from the operator's pod watch (`scrape.PodIndex`, fed by a handler here), not
from a LIST per object; their owners are read only when a pod names one not seen yet. Its reads
together have one deadline (twice SPECDEPLOY_METRICS_TIMEOUT_S: a read, and as long to wait for
a slot) within the operator-wide cap of MAX_PARALLEL_SCRAPES reads at a time, of which
MAX_PARALLEL_BODIES receive a body at once (what bounds the bytes in memory) and one object
holds at most MAX_OBJECT_SCRAPES: one slow object costs another at most its own deadline.

The rules (parsing, the window, the goodput model, the verdict) are in `specdeploy.telemetry`;
this module only fetches, remembers the window between scrapes, and writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import datetime
import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

import kopf

from specdeploy.api.spec import API_GROUP, API_VERSION, KIND, PLURAL
from specdeploy.api.conditions import SPECULATION_EFFECTIVE, Reason, Verdict
from specdeploy.controller.reconcile.attempt import Events, reconcile_once
from specdeploy.controller.scraping.canary_telemetry import CanaryWatch, arm_status, canary_round, decision_status
from specdeploy.controller.reconcile.conditions import condition_entry
from specdeploy.controller.process.env import Number
from specdeploy.controller.process.kube import Kube, KubePermanentError, KubeTemporaryError
from specdeploy.controller.reconcile.offload import reconcile_budget
from specdeploy.controller.reconcile.steps import Reconciler
from specdeploy.controller.scraping.scrape import (
    MAX_BYTES,
    TIMEOUT_S,
    PodIndex,
    ScrapeError,
    controller_uid,
    pod_owner_kind,
    read_metrics,
    session,
    workload_owners,
)
from specdeploy.render.labels import HTTP_PORT, LWS_WORKER_INDEX_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from specdeploy.telemetry import Window, analyse
from specdeploy.telemetry.cost import CostModelError
from specdeploy.telemetry.load import LoadAnalysis, analyse_load, verdict_at_load
from specdeploy.telemetry.auto_k import KChange, decide_k
from specdeploy.telemetry.metrics import MetricsError, Sample, parse_sample
from specdeploy.telemetry.model import Analysis, draft_cost
from specdeploy.telemetry.report import load_summary, speculation_status
from specdeploy.telemetry.window import LoadWindow, NotARestart

INTERVAL_ENV = "SPECDEPLOY_TELEMETRY_INTERVAL_S"
WINDOW_ENV = "SPECDEPLOY_TELEMETRY_WINDOW_S"
DEFAULT_INTERVAL_S = 60.0
DEFAULT_WINDOW_S = 600.0
INTERVAL = Number(INTERVAL_ENV, DEFAULT_INTERVAL_S, minimum=0, exclusive=True)
WINDOW = Number(WINDOW_ENV, DEFAULT_WINDOW_S, minimum=0, exclusive=True)
MAX_PARALLEL_SCRAPES = 64  # reads at a time, operator-wide (a connection each)
MAX_PARALLEL_BODIES = 8  # of which receiving a body (each holds up to MAX_BYTES)
MAX_OBJECT_SCRAPES = 4  # of which one object's: never every slot
SLOT_S = 1.0  # a pass is spread over slots of at least this long...
MAX_SLOTS = 60  # ...and at most this many per interval
RESYNC_PASSES = 10  # every this many passes, the pod index is checked against a LIST (PodIndex.resync)
CONDITION = SPECULATION_EFFECTIVE
_K_FINDINGS = ("k-auto", "k-default")  # the plan's word on why k is what it is



def _parse(body: bytes) -> tuple[Sample | None, str | None]:
    """The sample of a /metrics body, or why not (the pod is skipped with that reason)."""
    try:
        return parse_sample(body.decode("utf-8", errors="replace")), None
    except MetricsError as exc:
        return None, str(exc)


def _utc(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return None


def scrape_targets(pods: list[Mapping[str, Any]]) -> list[tuple[str, str | None, str | None]]:
    """(pod, metrics URL or None, why skipped) for the pods that serve HTTP: every pod of a
    Deployment, only the leader (worker index 0) of a LeaderWorkerSet group."""
    out = []
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        name = meta.get("name", "")
        if (meta.get("labels") or {}).get(LWS_WORKER_INDEX_LABEL, "0") != "0":
            continue  # LWS workers run headless: only the leader serves /metrics
        if meta.get("deletionTimestamp"):
            out.append((name, None, "terminating"))
            continue
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if not ready:
            out.append((name, None, "not ready"))
            continue
        ip = status.get("podIP")
        if not ip:
            out.append((name, None, "no pod IP yet"))
            continue
        host = f"[{ip}]" if ":" in ip else ip
        out.append((name, f"http://{host}:{_metrics_port(pod)}/metrics", None))
    return out


def _metrics_port(pod: Mapping[str, Any]) -> int:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "http" and port.get("containerPort"):
                return int(port["containerPort"])
    return HTTP_PORT


def set_condition(conditions: list[dict[str, Any]], verdict: Verdict, *, now: str, generation: int | None) -> list[dict[str, Any]]:
    """The conditions with SpeculationEffective set; the others untouched (the reconcile owns them)."""
    old = next((c for c in conditions if c.get("type") == CONDITION), None)
    new = condition_entry(CONDITION, verdict, old, now=now, generation=generation)
    if old is not None and {**old, "observedGeneration": None} == {**new, "observedGeneration": None}:
        return conditions
    return [c for c in conditions if c.get("type") != CONDITION] + [new]


def _merge_patch(previous: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """desired, plus explicit nulls for keys it dropped (a merge patch would keep them)."""
    return {**{k: None for k in previous if k not in desired}, **desired}


@dataclass
class _Tracked:
    body: dict[str, Any]
    window: Window
    k: int | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # Why each pod was last skipped, as logged: a reason is logged once, not at every scrape.
    skip_logged: dict[str, str] = field(default_factory=dict)
    # A k rollout whose reconcile did not finish (over budget, an API error): the next scrape
    # runs it again (kopf does not: the spec did not change).
    owed: Callable[[], Awaitable[None]] | None = None
    slot: int = 0  # which tick of a pass starts its round
    # The uids of its workload's ReplicaSets/StatefulSets, as last read, and the workload they are of.
    owners: frozenset[str] = frozenset()
    owners_of: str | None = None
    load: LoadWindow = field(init=False)  # batch sizes over the same window as the counters
    samples: dict[str, Sample] = field(default_factory=dict)  # this round's samples of the stable arm, by pod
    canary: CanaryWatch | None = None  # a draft canary's per-arm counts (controller/scraping/canary_telemetry.py)

    def __post_init__(self) -> None:
        self.load = LoadWindow(self.window.seconds)


class Telemetry:
    """Windows per SpeculativeDeployment and the write rule: a status write only when the
    counters moved and a rounded value changed, so at most one per interval and none while
    the pods count nothing."""

    def __init__(self, kube: Kube, logger: logging.Logger, *, window_s: float = DEFAULT_WINDOW_S, budget_s: float | None = None,
                 interval_s: float = DEFAULT_INTERVAL_S, pods: PodIndex | None = None):
        self.kube = kube
        self.logger = logger
        self.window_s = window_s
        self.budget_s = budget_s if budget_s is not None else reconcile_budget()
        self.interval_s = interval_s
        self.slots = max(1, min(MAX_SLOTS, int(interval_s // SLOT_S)))
        self.pods = pods if pods is not None else PodIndex()
        self._lock = threading.Lock()
        self._tracked: dict[tuple[str, str], _Tracked] = {}
        self._slot_load = [0] * self.slots  # objects per slot
        self._next_slot = 0
        self._passes = 0
        self._rounds: dict[tuple[str, str], asyncio.Task[None]] = {}  # each object's round in flight
        self._resync: asyncio.Task[None] | None = None
        self._reads = asyncio.Semaphore(MAX_PARALLEL_SCRAPES)
        self._bodies = asyncio.Semaphore(MAX_PARALLEL_BODIES)

    def track(self, body: Mapping[str, Any], deleted: bool) -> None:
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        slim = _slim(body)
        with self._lock:
            if deleted:
                gone = self._tracked.pop(key, None)
                if gone is not None:
                    self._slot_load[gone.slot] -= 1
            elif key in self._tracked:
                self._tracked[key].body = slim
            else:
                slot = min(range(self.slots), key=self._slot_load.__getitem__)
                self._slot_load[slot] += 1
                self._tracked[key] = _Tracked(slim, Window(self.window_s), slot=slot)

    def tick(self, now_s: float | None = None) -> list[asyncio.Task[None]]:
        """Start a round for every object of this tick's slot whose last round has ended (the
        loop ticks `slots` times per interval); an object still in its round is left to it.
        The rounds started."""
        now_s = time.time() if now_s is None else now_s
        slot, self._next_slot = self._next_slot, (self._next_slot + 1) % self.slots
        if slot == 0:
            self._passes += 1
            if self._passes % RESYNC_PASSES == 0 and (self._resync is None or self._resync.done()):
                self._resync = asyncio.create_task(self.resync_pods(), name="specdeploy-telemetry resync")
        with self._lock:
            items = [(key, tracked) for key, tracked in self._tracked.items() if tracked.slot == slot and key not in self._rounds]
        started = []
        for key, tracked in items:
            task = asyncio.create_task(self._round(key, tracked, now_s), name=f"specdeploy-telemetry {key[0]}/{key[1]}")
            self._rounds[key] = task
            task.add_done_callback(functools.partial(self._round_ended, key))
            started.append(task)
        return started

    def _round_ended(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        if self._rounds.get(key) is task:
            del self._rounds[key]

    async def resync_pods(self) -> None:
        """One LIST of our pods per namespace with objects: what the pod watch missed while it
        was down is dropped from the index (PodIndex.resync)."""
        with self._lock:
            namespaces = sorted({namespace for namespace, _ in self._tracked})
        for namespace in namespaces:
            mark = self.pods.mark()
            try:
                listed = await self.kube.list("Pod", namespace, f"{MANAGED_BY_LABEL}={MANAGED_BY}")
            except (KubeTemporaryError, KubePermanentError) as exc:
                self.logger.warning("telemetry: could not list the pods of %s to check the pod index: %s", namespace, exc)
                continue
            gone = self.pods.resync(namespace, listed, mark)
            if gone:
                self.logger.info("telemetry: dropped %d pods of %s that the pod watch did not report deleted", gone, namespace)

    async def _round(self, key: tuple[str, str], tracked: _Tracked, now_s: float) -> None:
        try:
            await self.observe(tracked, now_s)
        except (KubeTemporaryError, KubePermanentError) as exc:
            self.logger.warning("telemetry for %s/%s: %s", *key, exc)
        except Exception:  # one object's odd status must not stop the others' telemetry
            self.logger.exception("telemetry for %s/%s failed", *key)

    async def close(self) -> None:
        """Cancel the rounds in flight (at cleanup)."""
        rounds = list(self._rounds.values()) + ([self._resync] if self._resync is not None else [])
        for task in rounds:
            task.cancel()
        await asyncio.gather(*rounds, return_exceptions=True)
        self._rounds.clear()

    async def observe(self, tracked: _Tracked, now_s: float) -> dict[str, Any] | None:
        """Scrape one object's pods; returns the status patch it wrote, if any."""
        body = tracked.body
        meta, status = body.get("metadata") or {}, dict(body.get("status") or {})
        plan = status.get("plan") or {}
        if not plan or not status.get("workload"):
            return None  # nothing serving yet
        namespace, name = meta["namespace"], meta["name"]
        if tracked.owed is not None:
            owed, tracked.owed = tracked.owed, None
            await owed()
        k = plan.get("numSpeculativeTokens")
        if tracked.k != k:  # a new k means new pods: acceptance of the old k says nothing of it
            tracked.window, tracked.k = Window(self.window_s), k
        moved, skipped, read = await self._scrape(tracked, namespace, name, now_s)
        await self._judge_canary(tracked, namespace, name, now_s)
        if not moved:
            return None
        cost, cost_source = draft_cost(plan.get("method", ""), plan)
        analysis = analyse(tracked.window.increase(now_s), method=plan.get("method"), cost=cost, cost_source=cost_source, k=k)
        load, load_status = _at_load(analysis, plan, tracked.load.batch_sizes(now_s))
        if load is not None:
            analysis = dataclasses.replace(analysis, verdict=verdict_at_load(analysis, load))
        change = None
        if _spec_k(body) == "auto" and k:
            previous = status.get("speculation") or {}
            change = decide_k(analysis, current_k=k, last_change_s=_seconds(previous.get("numSpeculativeTokensChangedAt")), now_s=now_s,
                              load=load)
        patch = await self._write(body, status, analysis, read, skipped, now_s, change, load_status)
        if change is not None:
            await self._roll_out(tracked, namespace, name, change, old_k=k)
        return patch

    async def _judge_canary(self, tracked: _Tracked, namespace: str, name: str, now_s: float) -> None:
        """A draft canary's decision from both arms' counts; one other than Wait runs the
        reconcile at once (it promotes or rolls back: controller/reconcile/canary.py)."""
        tracked.canary, decision = await canary_round(self.kube, self.pods, self._read_all, scrape_targets, tracked.canary,
                                                      body=tracked.body, stable_samples=tracked.samples, now_s=now_s)
        if decision is None:
            return
        rollout = (tracked.body.get("status") or {}).get("rollout") or {}
        margin = float((((tracked.body.get("spec") or {}).get("rollout") or {}).get("canary") or {}).get("margin", 0.1))
        figures = {"stable": arm_status(decision.stable), "canary": arm_status(decision.canary),
                   "decision": decision_status(decision, margin)}
        if {k: rollout.get(k) for k in figures} != figures:
            await self.kube.merge_patch(KIND, namespace, name, {"status": {"rollout": _merge_patch(
                {k: rollout.get(k) for k in figures if rollout.get(k) is not None}, figures)}}, subresource="status")
            tracked.body.setdefault("status", {}).setdefault("rollout", {}).update(figures)
        if decision.action != "Wait":
            # The watch is kept: until the reconcile has moved the phase on (one that did not finish,
            # over budget or an API error), each round decides the same again and runs it again.
            self.logger.info("%s/%s: canary %s (%s): %s", namespace, name, decision.action, decision.why, decision.message)
            await self._reconcile(namespace, name)

    async def _roll_out(self, tracked: _Tracked, namespace: str, name: str, change: KChange, old_k: int) -> None:
        """Re-run the reconcile with the new k in force: it renders it into --speculative-config
        and the workload rolls out as for any spec change. The spec itself is never written.
        If the new k does not plan (it changes the memory fit of some drafts), k goes back, and
        the hourly limit keeps auto from trying again at once. A reconcile that does not finish
        is run again at the next scrape."""
        done, planned = await self._reconcile(namespace, name)
        if not done:
            tracked.owed = lambda: self._roll_out(tracked, namespace, name, change, old_k)
            return
        if planned is None or planned == change.k:
            self.logger.info("%s/%s: %s", namespace, name, change.reason)
            return
        now = _utc(time.time())
        why = f"auto: k {change.k} did not plan (see conditions and findings); k {old_k} stays"
        await self.kube.merge_patch(KIND, namespace, name, {"status": {"speculation": {
            "numSpeculativeTokens": old_k, "numSpeculativeTokensReason": why, "numSpeculativeTokensChangedAt": now}}},
            subresource="status")
        self.logger.warning("%s/%s: %s", namespace, name, why)
        await self._settle(tracked, namespace, name)

    async def _settle(self, tracked: _Tracked, namespace: str, name: str) -> None:
        """The reconcile after a k went back, run again at the next scrape until it finishes."""
        done, _ = await self._reconcile(namespace, name)
        if not done:
            tracked.owed = lambda: self._settle(tracked, namespace, name)

    async def _reconcile(self, namespace: str, name: str) -> tuple[bool, int | None]:
        """One reconcile of the live object, run as kopf's handlers run it (a reconcile slot,
        the time budget, a status note when cut off: `attempt.reconcile_once`), so a CR whose
        reconcile stalls holds up neither this loop nor the others' reconciles. (finished, the
        k it planned: None when the CR is gone, -1 when it did not plan)."""
        fresh = await self.kube.get(KIND, namespace, name)
        if fresh is None:
            return True, None
        outcome = await reconcile_once(Reconciler(self.kube, self.logger), fresh, budget_s=self.budget_s,
                                       logger=self.logger, post=self._post, news=True)
        if outcome.result is None:
            self.logger.warning("%s/%s: the reconcile for the new k did not finish (%s); retrying at the next scrape",
                                namespace, name, outcome.retry)
            return False, None
        if outcome.result.body is None:
            return True, None
        status = outcome.result.status
        planned = next((c for c in status.get("conditions") or [] if c.get("type") == "Planned"), {})
        return True, (status.get("plan") or {}).get("numSpeculativeTokens") if planned.get("status") == "True" else -1

    async def _post(self, body: Mapping[str, Any], events: Events) -> None:
        for type_, reason, message in events:
            await self._event(body, type_, reason, message, _utc(time.time()))

    async def _owned_pods(self, tracked: _Tracked, namespace: str, name: str) -> list[Mapping[str, Any]]:
        """The object's pods in the index whose controller is one of its workload's ReplicaSets
        or StatefulSets. Those owners are read again (two reads) only when a pod names one not
        read yet or the workload changed (a rollout's new ReplicaSet, a re-created Deployment):
        otherwise a round makes no API call before its reads."""
        workload = str((tracked.body.get("status") or {}).get("workload") or "")
        workload_kind, _, workload_name = workload.partition("/")
        owner_kind = pod_owner_kind(workload_kind)
        if owner_kind is None:
            return []
        pods = self.pods.of(namespace, name)
        named = {controller_uid(pod, owner_kind) for pod in pods} - {None}
        if not named:
            return []
        if tracked.owners_of != workload or not named <= tracked.owners:
            tracked.owners = await workload_owners(self.kube, namespace, name, workload_kind, workload_name)
            tracked.owners_of = workload
        return [pod for pod in pods if controller_uid(pod, owner_kind) in tracked.owners]

    async def _scrape(self, tracked: _Tracked, namespace: str, name: str, now_s: float) -> tuple[bool, list[tuple[str, str]], int]:
        targets = scrape_targets(await self._owned_pods(tracked, namespace, name))
        skipped = [(pod, why) for pod, url, why in targets if url is None]
        wanted = [(pod, url) for pod, url, _ in targets if url is not None]
        results = await self._read_all([url for _, url in wanted])
        moved, read = False, 0
        tracked.samples = {}
        for (pod, _), (sample, why) in zip(wanted, results):
            if sample is None:
                skipped.append((pod, why or "unreadable"))
                continue
            tracked.samples[pod] = sample
            counters = sample.counters
            if tracked.k and counters.num_speculative_tokens != tracked.k:
                skipped.append((pod, f"runs k={counters.num_speculative_tokens}, the plan k={tracked.k} (rolling out)"))
                continue
            try:
                moved = tracked.window.observe(pod, now_s, counters, sample.started) or moved
            except NotARestart as exc:
                skipped.append((pod, str(exc)))
                continue
            read += 1
            tracked.load.observe(now_s, sample.running)
        self._log_skips(tracked, namespace, skipped)
        return moved, sorted(skipped), read

    async def _read_all(self, urls: list[str]) -> list[tuple[Sample | None, str | None]]:
        """(sample, None) or (None, why) per URL. Each read has its own timeout; together they
        have the object's deadline (twice that: one read, and as long to wait for a slot of its
        object's and of the operator's); the reads it cuts off say so."""
        ours, max_bytes, timeout_s = asyncio.Semaphore(MAX_OBJECT_SCRAPES), MAX_BYTES.get_int(), TIMEOUT_S.get()
        if not urls:
            return []
        async with session() as client:
            async def read_one(url: str) -> tuple[Sample | None, str | None]:
                async with ours, self._reads:
                    try:
                        body = await read_metrics(client, url, max_bytes=max_bytes, timeout_s=timeout_s, body_slot=self._bodies)
                    except ScrapeError as exc:
                        return None, str(exc)
                return await asyncio.to_thread(_parse, body)

            tasks = [asyncio.create_task(read_one(url)) for url in urls]
            done, pending = await asyncio.wait(tasks, timeout=2 * timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        late = f"not read within this object's scrape deadline of {2 * timeout_s:g} s (its reads wait for a free slot)"
        return [task.result() if task in done else (None, late) for task in tasks]

    def _log_skips(self, tracked: _Tracked, namespace: str, skipped: list[tuple[str, str]]) -> None:
        """One INFO line per pod and reason (a hostile or broken pod would otherwise log at every
        scrape); forgotten when the pod is read again or gone, so the record stays this small."""
        now = dict(skipped)
        for pod, why in now.items():
            if tracked.skip_logged.get(pod) != why:
                self.logger.info("telemetry: skipped pod %s/%s: %s", namespace, pod, why)
        tracked.skip_logged = now

    async def _write(self, body: Mapping[str, Any], status: dict[str, Any], analysis: Analysis, read: int,
               skipped: list[tuple[str, str]], now_s: float, change: KChange | None = None,
               load_status: dict[str, Any] | None = None) -> dict[str, Any] | None:
        meta = body["metadata"]
        previous = status.get("speculation") or {}
        now = _utc(now_s)
        auto = _spec_k(body) == "auto"
        speculation = speculation_status(analysis, window_s=self.window_s, observed_at=now, pods=read, skipped=skipped,
                                         k_reason=_k_reason(body, previous),
                                         k_changed_at=previous.get("numSpeculativeTokensChangedAt") if auto else None,
                                         load=load_status)
        if change is not None:  # the k in force from now on: the reconcile reads it from here
            speculation.update(numSpeculativeTokens=change.k, numSpeculativeTokensReason=change.reason,
                               numSpeculativeTokensChangedAt=now)
        old_conditions = list(status.get("conditions") or [])
        conditions = set_condition(old_conditions, analysis.verdict, now=now, generation=meta.get("generation"))
        patch: dict[str, Any] = {}
        if {**speculation, "observedAt": None} != {**previous, "observedAt": None}:
            patch["speculation"] = _merge_patch(previous, speculation)
        if conditions != old_conditions:
            # A merge patch replaces the whole list, and the reconcile owns every other condition:
            # rebuild it from the live object, and let the API server refuse (409) if the object
            # moves between this read and the write (the next interval tries again).
            live = await self.kube.get(KIND, meta["namespace"], meta["name"])
            if live is None:
                return None
            live_conditions = list((live.get("status") or {}).get("conditions") or [])
            patch["conditions"] = set_condition(live_conditions, analysis.verdict, now=now, generation=meta.get("generation"))
            old_conditions = live_conditions
        if not patch:
            return None
        body_patch: dict[str, Any] = {"status": patch}
        if "conditions" in patch:
            body_patch["metadata"] = {"resourceVersion": live["metadata"].get("resourceVersion")}
        await self.kube.merge_patch(KIND, meta["namespace"], meta["name"], body_patch, subresource="status")
        if change is not None:
            await self._event(body, "Normal", Reason.SPECULATIVE_TOKENS_CHANGED, change.reason, now)
        before = next((c for c in old_conditions if c.get("type") == CONDITION), {})
        if before.get("status") != analysis.verdict.status and analysis.verdict.status != "Unknown":
            await self._event(body, "Warning" if analysis.verdict.status == "False" else "Normal", analysis.verdict.reason,
                        f"{CONDITION}={analysis.verdict.status}: {analysis.verdict.message}", now)
        return patch

    async def _event(self, body: Mapping[str, Any], type_: str, reason: str, message: str, now: str) -> None:
        """A core/v1 Event on the object (kopf.event needs a handler's context; this loop has none)."""
        meta = body["metadata"]
        event = {
            "apiVersion": "v1", "kind": "Event",
            # The API server names it (truncating the prefix to fit): a CR name may be 253 characters.
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": body.get("apiVersion", f"{API_GROUP}/{API_VERSION}"), "kind": KIND,
                               "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
            "type": type_, "reason": reason, "message": message[:1024],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": "specdeploy"}, "reportingComponent": "specdeploy",
        }
        try:
            await self.kube.create(event)
        except (KubeTemporaryError, KubePermanentError) as exc:
            self.logger.warning("could not post event %s on %s: %s", reason, meta["name"], exc)


def _slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the scraper reads of a CR, kept for every CR between scrapes, in containers of its
    own: not the spec, whose inline configs would make this a second copy of every object, and
    of the status only what `observe` and `_write` read. A shallow copy of the status would
    keep the watch event's conditions, findings and plan alive for every CR (≈ 85 KiB of RSS
    per CR at 500 CRs, bench/RESULTS.md)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    plan, slim_status = status.get("plan") or {}, {}
    if plan:
        memory = plan.get("memory") or {}
        slim_status["plan"] = {
            **{k: plan[k] for k in ("method", "numSpeculativeTokens", "compute") if k in plan},
            "memory": {k: memory[k] for k in ("targetWeightsGiB", "draftWeightsGiB") if k in memory},
        }
    if status.get("workload"):
        slim_status["workload"] = copy.deepcopy(status["workload"])
    if status.get("speculation"):
        slim_status["speculation"] = copy.deepcopy(status["speculation"])
    rollout = status.get("rollout") or {}
    if rollout.get("phase") == "Canary":  # what canary_round reads and _judge_canary compares
        slim_status["rollout"] = {k: copy.deepcopy(rollout[k]) for k in ("phase", "draft", "canaryWorkload", "stable", "canary", "decision")
                                  if k in rollout}
    # Only the condition the scraper owns (set_condition leaves the others alone) and the
    # findings that say why k is what it is (_k_reason).
    slim_status["conditions"] = [dict(c) for c in status.get("conditions") or [] if c.get("type") == CONDITION]
    slim_status["findings"] = [{"code": f.get("code"), "message": f.get("message", "")} for f in status.get("findings") or []
                               if isinstance(f, dict) and f.get("code") in _K_FINDINGS]
    return {
        "apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "generation") if k in meta},
        "spec": {"draft": {"numSpeculativeTokens": _spec_k(body)}, **_canary_settings(body)},
        "status": slim_status,
    }


def _at_load(analysis: Analysis, plan: Mapping[str, Any], batch_sizes: list[float]) -> tuple[LoadAnalysis | None, dict[str, Any]]:
    """The cost model at the observed load, and its part of status.speculation (or why it could not run)."""
    try:
        load = analyse_load(analysis, plan, batch_sizes)
    except CostModelError as exc:
        return None, {"costModel": str(exc)}
    return load, load_summary(load, analysis.k)


def _canary_settings(body: Mapping[str, Any]) -> dict[str, Any]:
    """spec.rollout's margin and minDrafts, kept only under strategy Canary (canary_round reads them)."""
    rollout = (body.get("spec") or {}).get("rollout") or {}
    if rollout.get("strategy") != "Canary":
        return {}
    canary = rollout.get("canary") or {}
    return {"rollout": {"canary": {k: canary[k] for k in ("margin", "minDrafts") if k in canary}}}


def _spec_k(body: Mapping[str, Any]) -> Any:
    return ((body.get("spec") or {}).get("draft") or {}).get("numSpeculativeTokens")


def _k_reason(body: Mapping[str, Any], previous: Mapping[str, Any]) -> str:
    """Why the k in force is in force: auto's last decision, else what the plan said (the
    k-auto / k-default finding), else the spec."""
    if _spec_k(body) == "auto" and previous.get("numSpeculativeTokensChangedAt") and previous.get("numSpeculativeTokensReason"):
        return str(previous["numSpeculativeTokensReason"])
    for finding in (body.get("status") or {}).get("findings") or []:
        if finding.get("code") in _K_FINDINGS:
            return str(finding.get("message", ""))
    return "set in spec.draft.numSpeculativeTokens"


def register(registry: kopf.OperatorRegistry) -> None:
    """The hook into the kopf wiring: track objects from watch events, run the loop."""

    @kopf.on.event(API_GROUP, API_VERSION, PLURAL, id="telemetry-track", registry=registry)
    async def track(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
        telemetry: Telemetry | None = getattr(memo, "telemetry", None)
        if telemetry is not None:
            telemetry.track(dict(body), deleted=type == "DELETED")

    @kopf.on.event("", "v1", "pods", labels={MANAGED_BY_LABEL: MANAGED_BY}, id="telemetry-pods", registry=registry)
    async def track_pod(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
        """The pod watch (one stream, shared with the scheduling handler) keeps the pod index."""
        telemetry: Telemetry | None = getattr(memo, "telemetry", None)
        if telemetry is not None:
            telemetry.pods.observe(body, type)

    @kopf.on.startup(registry=registry)
    async def start_telemetry(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
        memo.telemetry = Telemetry(memo.kube, logging.getLogger("specdeploy.telemetry"),
                                   window_s=WINDOW.get(), budget_s=memo.budget_s, interval_s=INTERVAL.get())
        memo.telemetry_task = asyncio.create_task(_loop(memo.telemetry), name="specdeploy-telemetry")

    @kopf.on.cleanup(registry=registry)
    async def stop_telemetry(memo: kopf.Memo, **_: Any) -> None:
        task = getattr(memo, "telemetry_task", None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await memo.telemetry.close()


async def _loop(telemetry: Telemetry) -> None:
    """A tick per slot, on a fixed schedule: a slow tick does not push the later ones back."""
    loop = asyncio.get_running_loop()
    step, start, ticks = telemetry.interval_s / telemetry.slots, loop.time(), 0
    while True:
        ticks += 1
        await asyncio.sleep(max(0.0, start + ticks * step - loop.time()))
        telemetry.tick()
