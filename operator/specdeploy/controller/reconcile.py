"""One reconcile for create, update and resume: parse -> resolve configs -> evaluate ->
render -> apply + prune -> status. The readiness mirror that keeps status in step with the
workload between reconciles, and `heal`, which puts back a child that drifted or vanished.

Every status write goes through `write_status`: the change is computed against the live
status inside the CR's writer lock (state.StatusWriters) and written there, as the API server
stores it (no nulls), so a reconcile of an unchanged object writes nothing and no writer puts
back conditions another just changed. The kopf wiring is in `main.py`.

Everything here runs on kopf's event loop: API calls are awaited, and the CPU-bound work
(spec parsing, config parsing, `pipeline.evaluate`) and the blocking Hub reads go to the
bounded pools of `offload.py`, so one CR's slow config never holds up another's reconcile.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

from specdeploy.api.parse import parse_spec
from specdeploy.api.spec import KIND, DraftSpec, ModelSource, SpeculativeDeploymentSpec
from specdeploy.controller.apply import Applied, apply_child, covers, owned_by, owned_children, prune
from specdeploy.controller.conditions import (
    Verdict,
    WorkloadState,
    merge_conditions,
    ready_verdict,
    verdicts_from,
    workload_verdicts,
)
from specdeploy.controller.kube import Kube, KubePermanentError, KubeTemporaryError, request_timeout
from specdeploy.controller.offload import BUDGET_ENV, OffLoop
from specdeploy.controller import preflight as gate
from specdeploy.controller import state
from specdeploy.controller.state import ConfigCache, DesiredChildren, EvaluationCache, Manifests, StatusWriters
from specdeploy.pipeline import Evaluation, ModelInputs, evaluate
from specdeploy.planning.plan import Plan
from specdeploy.preflight.request import judge_request
from specdeploy.render import endpoint, invalid_names, render_manifests, selector_string
from specdeploy.sources import SourceInvalid, SourceUnavailable, resolve_model
from specdeploy.findings import VALIDATION_STAGES, Severity

_WORKLOAD_KINDS = ("Deployment", "LeaderWorkerSet")
STALE_CONFIG = "ConfigRefreshRetrying"
OVER_BUDGET = "ReconcileTimeout"
# A ConfigMap read gives up sooner than other API calls: a read that hangs must end as
# "refresh retrying" (the last good config kept) well inside the reconcile's time budget.
CONFIG_READ_TIMEOUT_S = 10.0


@dataclass
class Result:
    """What a reconcile produced: status changes, events to post, and whether to retry."""

    status_patch: dict[str, Any]
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    retry: str | None = None  # message of a transient failure: the caller raises TemporaryError
    retry_kind: str = "source"  # "source" | "api" | "slow" | "preflight": picks the backoff schedule
    # Set by `write_status`: the CR as read under the lock (post Events on it) and its status
    # with the change applied.
    body: Mapping[str, Any] | None = None
    status: dict[str, Any] = field(default_factory=dict)


def stored(value: Any) -> Any:
    """`value` as the API server stores it: keys holding null dropped, at every depth."""
    if isinstance(value, dict):
        return {k: stored(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [stored(v) for v in value]
    return value


def merge_diff(old: Any, new: Any) -> Any:
    """The JSON merge patch turning `old` into `new` (null deletes a key no longer there)."""
    if isinstance(old, dict) and isinstance(new, dict):
        patch: dict[str, Any] = {k: None for k in old.keys() - new.keys()}
        for key, value in new.items():
            if key not in old:
                patch[key] = value
            elif old[key] != value:
                patch[key] = merge_diff(old[key], value)
        return patch
    return new


def _changes(previous: Mapping[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in stored(desired).items():
        if previous.get(key) != value:
            out[key] = merge_diff(previous.get(key), value)
    return out


def _events(previous: list[dict[str, Any]], current: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """Events for Warnings and meaningful transitions only: a condition's first appearance in
    its expected state (Validated/Planned True, Available/Ready False) is no news."""
    before = {c.get("type"): c for c in previous or []}
    events = []
    for cond in current:
        kind, status, old = cond["type"], cond["status"], before.get(cond["type"])
        message = f"{kind}={status}" + (f": {cond['message']}" if cond.get("message") else "")
        if kind == "Validated" and cond["reason"] == STALE_CONFIG and (old or {}).get("reason") != STALE_CONFIG:
            events.append(("Warning", cond["reason"], message))
            continue
        if kind == gate.PREFLIGHT and cond["reason"] == gate.COULD_NOT_RUN and (old or {}).get("reason") != gate.COULD_NOT_RUN:
            events.append(("Warning", cond["reason"], message))  # Unknown (BestEffort) or False (Required)
            continue
        if old is not None and old.get("status") == status:
            continue
        if kind in ("Validated", "Planned"):
            if status == "False":
                events.append(("Warning", cond["reason"], message))
            elif old is not None:
                events.append(("Normal", cond["reason"], message))
        elif kind in ("Available", "Ready"):
            if status == "True":
                events.append(("Normal", cond["reason"], message))
            elif old is not None and old.get("status") == "True":
                events.append(("Warning" if kind == "Available" else "Normal", cond["reason"], message))
        elif kind == "Stalled" and status == "True":
            events.append(("Warning", cond["reason"], message))
    return events


def _source_key(source: ModelSource | DraftSpec, namespace: str) -> tuple[str, ...]:
    if source.config_map_ref is not None:
        ref = source.config_map_ref
        return ("configmap", namespace, ref.name, ref.key)
    return ("model", source.model or "", source.revision or "")


class Reconciler:
    """The flow, with the client, the clock and the memory given to it (tests and the demo
    share it)."""

    def __init__(self, kube: Kube, logger: logging.Logger, *, desired: DesiredChildren | None = None,
                 configs: ConfigCache | None = None, evaluations: EvaluationCache | None = None,
                 offload: OffLoop | None = None, status: StatusWriters | None = None):
        self.kube = kube
        self.logger = logger
        memory = state.current()
        self.desired = desired if desired is not None else memory.desired
        self.configs = configs if configs is not None else memory.configs
        self.evaluations = evaluations if evaluations is not None else memory.evaluations
        self.offload = offload if offload is not None else memory.offload
        self.status = status if status is not None else memory.status
        self.slots = memory.slots

    async def write_status(self, namespace: str, name: str,
                           compute: Callable[[Mapping[str, Any]], Result | Awaitable[Result]], *,
                           copy: Mapping[str, Any] | None = None, seen: int | None = None) -> Result:
        """Compute a status change against the live CR and write it, one writer per CR at a
        time. `copy`: the CR as read when this process's write count for it was `seen`; it is
        used as is when no write came since, else the CR is read again."""
        slot = self.status.slot(namespace, name)
        async with slot.lock:
            live = copy if copy is not None and seen == slot.version else await self.kube.get(KIND, namespace, name)
            if live is None:
                return Result({})
            result = compute(live)
            if inspect.isawaitable(result):
                result = await result
            if result.status_patch:
                await self.kube.merge_patch(KIND, namespace, name, {"status": result.status_patch}, subresource="status")
                slot.version += 1
            result.body = live
            result.status = {**(live.get("status") or {}), **result.status_patch}
            return result

    async def reconcile(self, body: Mapping[str, Any], *, now: str, retry: int = 0) -> Result:
        meta = body.get("metadata") or {}
        name, namespace = meta["name"], meta["namespace"]
        # Compute against the live object, not the event's copy: after rapid edits the copy's
        # status may be one write behind, and the last edit must win.
        seen = self.status.slot(namespace, name).version
        live = await self.kube.get(KIND, namespace, name)
        if live is None:
            return Result({})
        body = live
        meta = body.get("metadata") or {}
        previous = dict(body.get("status") or {})
        generation = meta.get("generation")
        old_conditions = previous.get("conditions") or []
        verdicts = verdicts_from(old_conditions)
        desired: dict[str, Any] = {}
        if generation is not None:
            desired["observedGeneration"] = generation
        workload_live: list[dict[str, Any] | None] = []  # set when apply already read it
        extra_events: list[tuple[str, str, str]] = []

        async def finish(retry_message: str | None = None, kind: str = "source", progressing: Verdict | None = None) -> Result:
            async def compute(current: Mapping[str, Any]) -> Result:
                # Validated and Planned are this reconcile's; the workload's conditions come
                # from the status as it is now (the mirror may have written since our read).
                retry, retry_kind = retry_message, kind
                status = dict(current.get("status") or {})
                before = status.get("conditions") or []
                merged = verdicts_from(before)
                merged.update({k: v for k, v in verdicts.items() if k in ("Validated", "Planned", gate.PREFLIGHT)})
                try:
                    if workload_live:
                        live_wl = workload_live[0]
                        workload = WorkloadState.from_live(live_wl) if live_wl is not None else None
                    else:
                        workload = await self._live_workload(namespace, desired.get("workload") or status.get("workload"))
                except KubeTemporaryError as exc:  # keep the workload verdicts we had
                    retry, retry_kind = retry or str(exc), "api"
                else:
                    merged.update(workload_verdicts(workload, applied="workload" in desired or "workload" in status))
                    if progressing is not None:
                        merged["Progressing"] = progressing
                    merged["Ready"] = ready_verdict(merged, workload)
                    if workload is not None:
                        desired["replicas"], desired["readyReplicas"] = workload.replicas, workload.ready
                conditions = merge_conditions(before, merged, now=now, generation=generation)
                desired["conditions"] = conditions
                events = _events(before, conditions) + extra_events
                new_errors = desired.get("findings") not in (None, status.get("findings"))
                if merged["Validated"].status == "False" and new_errors and not any(e[0] == "Warning" for e in events):
                    events.append(("Warning", merged["Validated"].reason, merged["Validated"].message))
                return Result(_changes(status, desired), events, retry, retry_kind)

            return await self.write_status(namespace, name, compute, copy=live, seen=seen)

        # 1. parse
        spec, spec_findings = await self.offload.run(self.offload.cpu, None, lambda: parse_spec(dict(body.get("spec") or {})))
        if spec is None:
            desired["findings"] = [f.to_dict() for f in spec_findings]
            first = desired["findings"][0]
            verdicts["Validated"] = Verdict("False", "InvalidSpec", f"{first['field']}: {first['message']}")
            verdicts["Planned"] = Verdict("Unknown", "NotValidated", "the spec does not parse")
            return await finish()

        # 2. resolve configs (the last good ones when a read fails transiently)
        try:
            async with self.slots.released():  # a read may stall: not while holding a slot
                target, draft, stale = await self._resolve(spec, namespace)
        except SourceUnavailable as exc:
            why = f"{exc.field}: {exc.message}"
            current = previous.get("observedGeneration") == generation
            if current and verdicts.get("Validated", Verdict("Unknown", "")).status == "True":
                # Nothing changed in the spec: the verdict and the workload stand.
                verdicts["Validated"] = Verdict("True", STALE_CONFIG, f"the last good verdict stands; refreshing the config failed: {why} (retrying)")
                return await finish(retry_message=why)
            verdicts["Validated"] = Verdict("Unknown", "ConfigUnavailable", f"{why} (retrying)")
            return await finish(retry_message=why)
        except SourceInvalid as exc:
            desired["findings"] = [{"code": "config-invalid", "severity": "error", "stage": "config", "field": exc.field, "message": exc.message}]
            verdicts["Validated"] = Verdict("False", "ConfigInvalid", f"{exc.field}: {exc.message}")
            verdicts["Planned"] = Verdict("Unknown", "NotValidated", "the model config could not be read")
            return await finish()

        # 3. evaluate (validation + plan), by the release a preflight found in the image if any
        k_in_force = _k_in_force(previous)
        cpu = self.offload.cpu
        spec_body = dict(body.get("spec") or {})
        real_version = gate.judged_version(spec, previous)
        if real_version is not None:
            spec, spec_body = spec.model_copy(update={"vllm_version": real_version}), {**spec_body, "vllmVersion": real_version}
        key = await self.offload.run(cpu, None, lambda: EvaluationCache.key(
            spec_body, target.config, target.weight_bytes, draft.config if draft else None,
            draft.weight_bytes if draft else None, k_in_force))
        async with self.slots.released():
            evaluation = await self.evaluations.get_or_compute(key, lambda: self.offload.run(
                cpu, ("evaluate", key), lambda: evaluate(spec, target, draft, k_in_force=k_in_force)))
        desired["findings"] = [f.to_dict() for f in evaluation.findings]
        def summary(errors: list) -> str:
            return f"{errors[0].field}: {errors[0].message}" + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")

        errors = [f for f in evaluation.findings if f.severity is Severity.ERROR]
        if not evaluation.validated:
            verdicts["Validated"] = Verdict("False", "ValidationFailed", summary([f for f in errors if f.stage in VALIDATION_STAGES]))
            verdicts["Planned"] = Verdict("Unknown", "NotValidated", "fix the findings first")
            return await finish()
        if stale is not None:
            verdicts["Validated"] = Verdict("True", STALE_CONFIG, f"valid with the last config read; refreshing it failed: {stale.field}: {stale.message} (retrying)")
        else:
            verdicts["Validated"] = Verdict("True", "Valid", f"{spec.draft.method} draft is compatible with the target (vLLM {evaluation.vllm_version} rules)")
        if evaluation.plan is None or errors:
            verdicts["Planned"] = Verdict("False", "NoFeasiblePlan", summary(errors) if errors else "no layout fits; see findings")
            return await finish()
        plan = evaluation.plan
        verdicts["Planned"] = Verdict(
            "True", "Planned",
            f"tp={plan.tensor_parallel_size} pp={plan.pipeline_parallel_size} draftTp={plan.draft_tensor_parallel_size} "
            f"nodes/replica={plan.nodes_per_replica} gpus/pod={plan.gpus_per_pod}",
        )
        desired["plan"] = evaluation.plan_dict()
        retry_message = f"{stale.field}: {stale.message}" if stale is not None else None

        # 4. preflight: the image's own vLLM on the exact args, before a GPU workload
        decision = await self._preflight(spec, plan, evaluation, target, draft, body)
        if decision is not None:
            verdicts[gate.PREFLIGHT] = decision.preflight
            if decision.status is not None:
                desired["preflight"] = decision.status
            if decision.validated is not None:
                verdicts["Validated"] = decision.validated
            desired["findings"] += decision.findings
            extra_events += decision.events
            if not decision.proceed:
                return await finish(decision.retry, kind="preflight", progressing=decision.progressing)

        # 5. render, check names, apply, prune
        children = render_manifests(spec, plan, name=name, namespace=namespace)
        problems = invalid_names(children)
        if problems:
            return await finish(retry_message, progressing=Verdict("False", "InvalidChildNames", "; ".join(problems)[:2000]))
        for child in children:
            child["metadata"]["ownerReferences"] = [_owner_reference(body)]
        uid = meta["uid"]
        entry = self.desired.lock(namespace, name, uid)
        # A CR never applied before (no workload in status, nothing remembered): its children
        # are most likely missing, so create first (a 409 falls back to read + patch) and there
        # is nothing of ours to prune.
        first = "workload" not in previous and not entry.children
        async with entry.lock:
            # Record first: the watch events our own writes cause then compare equal.
            rendered_before = set(entry.children)
            entry.children = Manifests(children)
            try:
                applied = [await apply_child(self.kube, child, self.logger, assume_missing=first) for child in children]
                if not first and (not entry.pruned or set(entry.children) != rendered_before):
                    # What we own by label, whatever its name (an older operator's too).
                    owned = await owned_children(self.kube, namespace, name, uid)
                    await prune(self.kube, namespace, uid, owned, set(entry.children), self.logger)
                entry.pruned = True
            except KubeTemporaryError as exc:
                stuck = exc.slow or retry >= 1
                failed = Verdict("False", "ApplyFailed", f"{exc} (retrying)") if stuck else Verdict("Unknown", "ApplyRetrying", f"{exc} (retrying)")
                return await finish(str(exc), kind="slow" if exc.slow else "api", progressing=failed)
            except KubePermanentError as exc:
                return await finish(retry_message, progressing=Verdict("False", "ApplyFailed", str(exc)))
        workload = applied[0]
        workload_live.append(workload.live)
        desired.update(
            workload=f"{workload.kind}/{workload.name}",
            selector=selector_string(name),
            endpoint=endpoint(name, namespace),
        )
        return await finish(retry_message)

    async def _preflight(self, spec: SpeculativeDeploymentSpec, plan: Plan, evaluation: Evaluation, target: ModelInputs,
                         draft: ModelInputs | None, body: Mapping[str, Any]) -> gate.Decision | None:
        """The gate's decision; None when the operator runs no preflight (SPECDEPLOY_PREFLIGHT=false)."""
        if not gate.enabled():
            return None
        if spec.preflight.mode == "Disabled":
            return gate.disabled()
        request = await self.offload.run(self.offload.cpu, None, lambda: judge_request(spec, plan, target.config, draft.config if draft else None))
        meta = body["metadata"]
        return await gate.PreflightGate(self.kube, self.logger).check(
            spec, request, name=meta["name"], namespace=meta["namespace"], status=body.get("status") or {},
            owner=_owner_reference(body), fast_version=evaluation.vllm_version)

    def failed(self, body: Mapping[str, Any], error: BaseException, *, now: str) -> Result:
        """Status for a reconcile that raised unexpectedly (a bug, not a verdict): Ready=False
        and Stalled=True say so with the error, instead of no status at all. The children
        are left as they are; the caller retries with backoff."""
        previous = dict(body.get("status") or {})
        old_conditions = previous.get("conditions") or []
        verdicts = verdicts_from(old_conditions)
        message = f"the reconcile failed unexpectedly ({type(error).__name__}: {str(error)[:300]}); retrying"
        verdicts["Progressing"] = Verdict("False", "ReconcileError", message)
        verdicts["Ready"] = Verdict("False", "ReconcileError", message)
        generation = (body.get("metadata") or {}).get("generation")
        conditions = merge_conditions(old_conditions, verdicts, now=now, generation=generation)
        return Result(_changes(previous, {"conditions": conditions}), _events(old_conditions, conditions), message, "api")

    def over_budget(self, body: Mapping[str, Any], budget_s: float, *, now: str) -> Result:
        """Status for a reconcile cut off by its time budget: Progressing=False with reason
        ReconcileTimeout and one Warning Event; verdicts already given stand (a serving CR stays
        Ready: nothing changed in the cluster), a new CR says it is not judged yet. The caller
        retries with backoff; the slow job keeps running and the retry joins it. `body` is the
        live CR (`write_status`), so a retry sees the cut-off the previous attempt wrote."""
        previous = dict(body.get("status") or {})
        old_conditions = previous.get("conditions") or []
        verdicts = verdicts_from(old_conditions)
        message = (f"the reconcile took longer than its {budget_s:g} s budget ({BUDGET_ENV}); "
                   "the slow step keeps running and the reconcile is retried")
        verdicts["Progressing"] = Verdict("False", OVER_BUDGET, message)
        for kind in ("Validated", "Planned"):
            verdicts.setdefault(kind, Verdict("Unknown", OVER_BUDGET, message))
        if verdicts.get("Ready", Verdict("Unknown", "")).status != "True":
            verdicts["Ready"] = Verdict("Unknown", OVER_BUDGET, message)
        generation = (body.get("metadata") or {}).get("generation")
        conditions = merge_conditions(old_conditions, verdicts, now=now, generation=generation)
        before = next((c for c in old_conditions if c.get("type") == "Progressing"), {})
        events = [("Warning", OVER_BUDGET, message)] if before.get("reason") != OVER_BUDGET else []
        return Result(_changes(previous, {"conditions": conditions}), events, message, "api")

    async def _resolve(self, spec: SpeculativeDeploymentSpec, namespace: str) -> tuple[ModelInputs, ModelInputs | None, SourceUnavailable | None]:
        token = None
        if spec.hf_token_secret_ref is not None:
            ref = spec.hf_token_secret_ref
            token = await self.kube.read_secret_key(namespace, ref.name, ref.key)
        config_read_s = min(CONFIG_READ_TIMEOUT_S, request_timeout()[1])

        async def config_map_text(field: str, name: str, key: str) -> str:
            try:
                text = await self.kube.read_config_map_key(namespace, name, key, timeout=config_read_s)
            except KubeTemporaryError as exc:
                raise SourceUnavailable(field, str(exc)) from exc
            if text is None:  # may be created after the CR (GitOps ordering): retry
                raise SourceUnavailable(field, f"ConfigMap {namespace}/{name} or its key {key!r} does not exist yet")
            return text

        async def fetch(source: ModelSource | DraftSpec, where: str) -> ModelInputs:
            text = None
            if source.config is None and source.config_map_ref is not None:  # read on the loop, parse off it
                ref = source.config_map_ref
                text = await config_map_text(f"{where}.configMapRef", ref.name, ref.key)
            resolve = lambda: resolve_model(source, where, hf_token=token, configmap_reader=lambda _n, _k: text,  # noqa: E731
                                            local_files=False)
            if source.config is not None or text is not None:
                return await self.offload.run(self.offload.cpu, None, resolve)
            # A Hub read blocks on the network: the I/O pool, one job per (model, revision, token).
            who = hashlib.sha256(token.encode()).hexdigest()[:16] if token else ""
            return await self.offload.run(self.offload.io, ("hub", where, *_source_key(source, namespace), who), resolve)

        async def read(source: ModelSource | DraftSpec, where: str) -> tuple[ModelInputs, Exception | None]:
            if source.config is not None:
                return await fetch(source, where), None
            return await self.configs.read(_source_key(source, namespace), lambda: fetch(source, where), SourceUnavailable)

        target, stale = await read(spec.target, "spec.target")
        draft = None
        if spec.draft.has_own_checkpoint:
            draft, draft_stale = await read(spec.draft, "spec.draft")
            stale = stale or draft_stale
        return target, draft, stale  # type: ignore[return-value]

    async def _live_workload(self, namespace: str, ref: str | None) -> WorkloadState | None:
        if not ref or "/" not in ref:
            return None
        kind, name = ref.split("/", 1)
        live = await self.kube.get(kind, namespace, name) if kind in _WORKLOAD_KINDS else None
        return WorkloadState.from_live(live) if live is not None else None

    async def mirror_workload(self, child: Mapping[str, Any], event_type: str | None, *, now: str) -> Result:
        """A workload event: the parent's readiness conditions, written against its live status."""
        meta = child.get("metadata") or {}
        owner, namespace = owner_of(child), meta.get("namespace")
        if owner is None or not namespace:
            return Result({})
        serving = f"{child.get('kind')}/{meta.get('name')}"
        workload = None if event_type == "DELETED" else child

        def compute(parent: Mapping[str, Any]) -> Result:
            if (parent.get("status") or {}).get("workload") != serving:
                return Result({})  # not (or no longer) the workload this parent serves from
            return self.mirror(parent, workload, now=now)

        return await self.write_status(namespace, owner[0], compute)

    def mirror(self, parent: Mapping[str, Any], workload_body: Mapping[str, Any] | None, *, now: str) -> Result:
        """Status changes from a workload event, keeping Validated/Planned as they are."""
        previous = dict(parent.get("status") or {})
        old_conditions = previous.get("conditions") or []
        verdicts = verdicts_from(old_conditions)
        if "Validated" not in verdicts or "Planned" not in verdicts:
            return Result({})  # the first reconcile has not run yet: it will write everything
        workload = WorkloadState.from_live(dict(workload_body)) if workload_body else None
        verdicts.update(workload_verdicts(workload, applied=workload is not None))
        verdicts["Ready"] = ready_verdict(verdicts, workload)
        generation = (parent.get("metadata") or {}).get("generation")
        conditions = merge_conditions(old_conditions, verdicts, now=now, generation=generation)
        desired: dict[str, Any] = {"conditions": conditions}
        if workload is not None:
            desired["replicas"], desired["readyReplicas"] = workload.replicas, workload.ready
        return Result(_changes(previous, desired), _events(old_conditions, conditions))

    async def heal(self, child: Mapping[str, Any], event_type: str | None) -> Applied | None:
        """A child event: put back what drifted or vanished, delete what we own and no longer
        render. Does nothing for CRs this process has not reconciled yet (resume will)."""
        meta = child.get("metadata") or {}
        owner = owner_of(child)
        namespace, kind, name = meta.get("namespace"), child.get("kind"), meta.get("name")
        if owner is None or not namespace or not kind or not name:
            return None
        parent, uid = owner
        entry = self.desired.get(namespace, parent)
        if entry is None or entry.uid != uid or not entry.children:
            return None
        want = entry.children.get((kind, name))
        gone = event_type == "DELETED"
        if want is not None and not gone and covers(dict(child), want):
            return None  # as rendered: the common case costs no request
        async with entry.lock:
            if want is not None:
                return await apply_child(self.kube, want, self.logger)  # re-reads the live object first
            if not gone and owned_by(dict(child), uid):  # ours, under a name we no longer render
                return (await prune(self.kube, namespace, uid, [dict(child)], set(entry.children), self.logger) or [None])[0]
        return None


def owner_of(child: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the SpeculativeDeployment that controls `child`, if any. The owner label
    may be a shortened name; the ownerReference has the real one."""
    for ref in (child.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") == KIND and ref.get("controller") and ref.get("uid"):
            return str(ref.get("name")), str(ref["uid"])
    return None


def _k_in_force(status: Mapping[str, Any]) -> int | None:
    """With numSpeculativeTokens auto: the k the telemetry chose (it stamps when it did);
    `evaluate` ignores it for a spec that sets k itself."""
    speculation = status.get("speculation") or {}
    k = speculation.get("numSpeculativeTokens")
    return k if isinstance(k, int) and speculation.get("numSpeculativeTokensChangedAt") else None


def _owner_reference(body: Mapping[str, Any]) -> dict[str, Any]:
    """Garbage collection deletes the children with the parent: no finalizer, no delete handler."""
    meta = body["metadata"]
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
