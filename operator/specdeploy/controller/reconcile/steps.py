"""One reconcile for create, update and resume, as named steps: parse -> resolve configs ->
judge (validation + plan) -> preflight (the image's own vLLM on the exact args, once per
combination: controller/reconcile/preflight_gate.py) -> apply (render, apply, prune) -> status. Each step
reads and fills one `Pass`; a step that settles the verdict (an invalid spec, a config not
readable yet, a refusal, a failed apply) stops the pass, and the status step always runs. A new step goes in
`Reconciler.steps`, in flow order. The readiness mirror keeps status in step with the workload
between reconciles, and `heal` puts back a child that drifted or vanished.

Every status write goes through `write_status`: the change is computed against the live
status inside the CR's writer lock (state.StatusWriters) and written there, as the API server
stores it (no nulls), so a reconcile of an unchanged object writes nothing and no writer puts
back conditions another just changed. The kopf wiring is in `main.py`.

Everything here runs on kopf's event loop: API calls are awaited, and the CPU-bound work
(spec parsing, config parsing, `pipeline.evaluate`) and the blocking Hub reads go to the
bounded pools of `offload.py`, so one CR's slow config never holds up another's reconcile.
"""

from __future__ import annotations

import functools
import inspect
import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Awaitable, Callable, Mapping

from specdeploy.api.conditions import PLANNED, PREFLIGHT, PROGRESSING, READY, ROLLOUT, SPEC_CONDITIONS, UNKNOWN, VALIDATED, Reason, Verdict
from specdeploy.api.parse import parse_spec
from specdeploy.api.spec import KIND, SpeculativeDeploymentSpec
from specdeploy.controller.reconcile.canary import arms
from specdeploy.rollout.phase import promotion_done
from specdeploy.controller.reconcile import preflight_gate as gate
from specdeploy.controller.reconcile import state
from specdeploy.controller.reconcile.apply import Applied, apply_child, covers, owned_by, owned_children, prune
from specdeploy.controller.reconcile.config_reads import ConfigReads
from specdeploy.controller.reconcile.conditions import (
    Event,
    Verdicts,
    WorkloadState,
    condition_events,
    finding_events,
    merge_conditions,
    ready_verdict,
    scheduling_problem,
    verdict_line,
    verdicts_from,
    workload_verdicts,
)
from specdeploy.controller.process.kube import Kube, KubePermanentError, KubeTemporaryError
from specdeploy.controller.reconcile.offload import BUDGET_ENV, OffLoop
from specdeploy.controller.reconcile.state import ConfigCache, DesiredChildren, EvaluationCache, Manifests, StatusSlot, StatusWriters
from specdeploy.findings import VALIDATION_STAGES, Finding, Severity
from specdeploy.pipeline import Evaluation, ModelInputs, evaluate
from specdeploy.planning.plan import Plan
from specdeploy.preflight.request import judge_request
from specdeploy.render import endpoint, invalid_names, render_manifests, selector_string
from specdeploy.render.labels import OWNER_LABEL, label_value
from specdeploy.sources import SourceInvalid, SourceUnavailable

_WORKLOAD_KINDS = ("Deployment", "LeaderWorkerSet")


class RetryKind(str, Enum):
    """Which backoff schedule a retry takes (controller/process/main.py BACKOFF). Every retry names its
    kind where it is decided; API, the default, is also what a retry with no better word gets."""

    API = "api"  # the API server failed or the reconcile was cut off: retry soon
    SOURCE = "source"  # a model's config could not be read (the Hub, a ConfigMap): retry later
    SLOW = "slow"  # a refusal a person fixes (RBAC, a missing CRD): retry slowly

    @classmethod
    def after(cls, exc: KubeTemporaryError) -> RetryKind:
        return cls.SLOW if exc.slow else cls.API


@dataclass
class Result:
    """What a reconcile produced: status changes, events to post, and whether to retry."""

    status_patch: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    retry: str | None = None  # message of a transient failure: the caller raises TemporaryError
    retry_kind: RetryKind = RetryKind.API
    # Set by `write_status`: the CR as read under the lock (post Events on it) and its status
    # with the change applied.
    body: Mapping[str, Any] | None = None
    status: dict[str, Any] = field(default_factory=dict)
    judged: Mapping[str, Any] | None = None  # the live CR whose spec the steps judged


@dataclass
class Pass:
    """One reconcile's working state: the live CR it started from, and what each step decided.
    `verdicts` holds Validated, Planned and Preflight; `desired` the status fields the steps set."""

    body: Mapping[str, Any]
    now: str
    attempt: int  # kopf's retry count: a second failed apply is reported as stuck
    seen: int  # this process's status-write count for the CR when it was read
    verdicts: Verdicts
    desired: dict[str, Any] = field(default_factory=dict)
    spec: SpeculativeDeploymentSpec | None = None
    target: ModelInputs | None = None
    draft: ModelInputs | None = None
    stale: SourceUnavailable | None = None  # a config refresh failed: the last good one is used
    evaluation: Evaluation | None = None
    guess: Evaluation | None = None  # guessed rules refused: their evaluation, while the preflight judges `evaluation`
    progressing: Verdict | None = None  # set by apply when it failed
    applied: Applied | None = None  # the workload as apply left it (saves a read)
    events: list[Event] = field(default_factory=list)  # posted beside the conditions' own
    retry: str | None = None
    retry_kind: RetryKind = RetryKind.API

    @property
    def name(self) -> str:
        return self.body["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.body["metadata"]["namespace"]

    @property
    def generation(self) -> int | None:
        return self.body["metadata"].get("generation")

    @property
    def previous(self) -> Mapping[str, Any]:
        """The status as it was when the pass began."""
        return self.body.get("status") or {}

    def stop(self, retry: str | None = None, kind: RetryKind = RetryKind.API) -> bool:
        """End the pass here (the status step still runs), retrying later when `retry` says why."""
        self.retry, self.retry_kind = retry, kind
        return False


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


def _layout_summary(plan: Plan) -> str:
    return (f"tp={plan.tensor_parallel_size} pp={plan.pipeline_parallel_size} draftTp={plan.draft_tensor_parallel_size} "
            f"nodes/replica={plan.nodes_per_replica} gpus/pod={plan.gpus_per_pod}")


def _first_reconcile_done(status: Mapping[str, Any]) -> bool:
    """Every spec condition written: a mirror has conditions to keep."""
    verdicts = verdicts_from(status.get("conditions") or [])
    return all(kind in verdicts for kind in SPEC_CONDITIONS)


def _summary(errors: list[Finding]) -> str:
    """The first error, and how many more there are."""
    return f"{errors[0].field}: {errors[0].message}" + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")


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
        self.unschedulable = memory.unschedulable
        self.runs = memory.runs
        self.preflight_waits = memory.preflight

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

    @property
    def steps(self) -> tuple[Callable[[Pass], Awaitable[bool]], ...]:
        """The steps of a pass, in flow order; each returns False to stop the pass."""
        return (self.parse, self.resolve, self.judge, self.preflight, self.apply)

    async def reconcile(self, body: Mapping[str, Any], *, now: str, retry: int = 0) -> Result:
        """Run the steps on the live CR, then write the status they decided."""
        meta = body.get("metadata") or {}
        name, namespace = meta["name"], meta["namespace"]
        # Compute against the live object, not the event's copy: after rapid edits the copy's
        # status may be one write behind, and the last edit must win.
        slot = self.status.slot(namespace, name)
        slot.reconciling += 1
        try:
            return await self._reconcile(slot, namespace, name, now=now, retry=retry)
        finally:
            slot.reconciling -= 1

    async def _reconcile(self, slot: StatusSlot, namespace: str, name: str, *, now: str, retry: int) -> Result:
        seen = slot.version
        live = await self.kube.get(KIND, namespace, name)
        if live is None:
            return Result({})
        run = Pass(live, now, retry, seen, verdicts_from((live.get("status") or {}).get("conditions") or []))
        if run.generation is not None:
            run.desired["observedGeneration"] = run.generation
        for step in self.steps:
            if not await step(run):
                break
        result = await self.write_status(namespace, name, functools.partial(self._status_change, run), copy=live, seen=seen)
        result = await self._apply_unmirrored(namespace, name, result, now)
        result.judged = live
        if result.body is not None:  # INFO: a logged warning would post a second Event through kopf
            self.logger.info("Reconciled %s %s/%s: %s", KIND, namespace, name, verdict_line(result.status.get("conditions") or []))
        return result

    async def parse(self, run: Pass) -> bool:
        """The spec as the pure core reads it; findings when it does not parse."""
        spec, findings = await self.offload.run(self.offload.cpu, None, functools.partial(parse_spec, dict(run.body.get("spec") or {})))
        if spec is None:
            run.desired["findings"] = [f.to_dict() for f in findings]
            first = findings[0]
            run.verdicts[VALIDATED] = Verdict("False", Reason.INVALID_SPEC, f"{first.field}: {first.message}")
            run.verdicts[PLANNED] = Verdict("Unknown", Reason.NOT_VALIDATED, "the spec does not parse")
            return run.stop()
        run.spec = spec
        return True

    async def resolve(self, run: Pass) -> bool:
        """Both models' configs; the last good ones when a read fails transiently."""
        assert run.spec is not None
        try:
            async with self.slots.released():  # a read may stall: not while holding a slot
                reads = ConfigReads(self.kube, self.offload, self.configs, run.namespace)
                run.target, run.draft, run.stale = await reads.pair(run.spec)
        except SourceUnavailable as exc:
            why = f"{exc.field}: {exc.message}"
            unchanged = run.previous.get("observedGeneration") == run.generation
            if unchanged and run.verdicts.get(VALIDATED, UNKNOWN).status == "True":
                # Nothing changed in the spec: the verdict and the workload stand.
                run.verdicts[VALIDATED] = Verdict("True", Reason.CONFIG_REFRESH_RETRYING,
                                                  f"the last good verdict stands; refreshing the config failed: {why} (retrying)")
            else:
                run.verdicts[VALIDATED] = Verdict("Unknown", Reason.CONFIG_UNAVAILABLE, f"{why} (retrying)")
            return run.stop(why, RetryKind.SOURCE)
        except SourceInvalid as exc:
            run.desired["findings"] = [exc.finding().to_dict()]
            run.verdicts[VALIDATED] = Verdict("False", Reason.CONFIG_INVALID, f"{exc.field}: {exc.message}")
            run.verdicts[PLANNED] = Verdict("Unknown", Reason.NOT_VALIDATED, "the model config could not be read")
            return run.stop()
        return True

    async def judge(self, run: Pass) -> bool:
        """Validated and Planned from `pipeline.evaluate` (cached by what it reads)."""
        evaluation = run.evaluation = await self._evaluate(run)
        assert run.spec is not None
        if evaluation.image_plan is not None and gate.runs_for(run.spec):
            return self._judge_guess(run, evaluation, evaluation.image_plan)
        run.desired["findings"] = [f.to_dict() for f in evaluation.findings]
        errors = [f for f in evaluation.findings if f.severity is Severity.ERROR]
        if not evaluation.validated:
            run.verdicts[VALIDATED] = Verdict("False", Reason.VALIDATION_FAILED, _summary([f for f in errors if f.stage in VALIDATION_STAGES]))
            run.verdicts[PLANNED] = Verdict("Unknown", Reason.NOT_VALIDATED, "fix the findings first")
            return run.stop()
        stale = run.stale
        if stale is not None:
            run.verdicts[VALIDATED] = Verdict("True", Reason.CONFIG_REFRESH_RETRYING,
                                              f"valid with the last config read; refreshing it failed: {stale.field}: {stale.message} (retrying)")
        else:
            judged = (f"the fast rules (vLLM {evaluation.vllm_version}) find nothing wrong; only the preflight can judge method {run.spec.draft.method}"
                      if evaluation.needs_preflight else f"{run.spec.draft.method} draft is compatible with the target (vLLM {evaluation.vllm_version} rules)")
            run.verdicts[VALIDATED] = Verdict("True", Reason.VALID, judged)
        plan = evaluation.plan
        if plan is None or errors:
            run.verdicts[PLANNED] = Verdict("False", Reason.NO_FEASIBLE_PLAN, _summary(errors) if errors else "no layout fits; see findings")
            return run.stop()
        run.verdicts[PLANNED] = Verdict("True", Reason.PLANNED, _layout_summary(plan))
        run.desired["plan"] = evaluation.plan_dict()
        run.retry = f"{stale.field}: {stale.message}" if stale is not None else None
        run.retry_kind = RetryKind.SOURCE  # the stale config is refreshed on the source schedule
        return True

    def _judge_guess(self, run: Pass, guess: Evaluation, image_plan: Evaluation) -> bool:
        """The rules judging are a guess (the image is no release we have rules for) and they
        refuse: no verdict yet. Their errors are reported as the guess they are, and the preflight
        judges the image's own plan (pipeline.plan_for_image), whose pods run if it accepts."""
        assert run.spec is not None and image_plan.plan is not None
        run.guess, run.evaluation = guess, image_plan
        run.desired["findings"] = [f.to_dict() for f in guess.as_guess()]
        errors = [f for f in guess.findings if f.severity is Severity.ERROR]
        run.verdicts[VALIDATED] = Verdict("Unknown", Reason.GUESSED_REFUSAL, (
            f"{run.spec.image} is no release with rules here; vLLM {guess.vllm_version}'s rules, a guess, refuse it: "
            f"{_summary(errors)}; the preflight of the image decides"))
        plan = image_plan.plan
        run.verdicts[PLANNED] = Verdict("True", Reason.PLANNED, f"{_layout_summary(plan)} (vLLM {plan.vllm_version}'s rules, for the image to judge)")
        run.desired["plan"] = image_plan.plan_dict()
        run.retry = f"{run.stale.field}: {run.stale.message}" if run.stale is not None else None
        run.retry_kind = RetryKind.SOURCE
        return True

    async def _evaluate(self, run: Pass) -> Evaluation:
        """`evaluate` in the CPU pool; one job per content, shared by CRs of the same models."""
        spec, target, draft = run.spec, run.target, run.draft
        assert spec is not None and target is not None
        k_in_force = _k_in_force(run.previous)
        cpu = self.offload.cpu
        spec_body = dict(run.body.get("spec") or {})
        real_version = gate.judged_version(spec, run.previous)  # the image's release replaces the tag's guess
        if real_version is not None:
            spec, spec_body = spec.model_copy(update={"vllm_version": real_version}), {**spec_body, "vllmVersion": real_version}
        key = await self.offload.run(cpu, None, functools.partial(
            EvaluationCache.key, spec_body, target.config, target.weight_bytes,
            draft.config if draft else None, draft.weight_bytes if draft else None, k_in_force))
        job = functools.partial(evaluate, spec, target, draft, k_in_force=k_in_force)
        async with self.slots.released():
            return await self.evaluations.get_or_compute(key, functools.partial(self.offload.run, cpu, ("evaluate", key), job))

    async def preflight(self, run: Pass) -> bool:
        """The image's own vLLM on the exact args before a GPU workload; the Preflight condition.
        No gate when the operator runs no preflight (SPECDEPLOY_PREFLIGHT=false)."""
        spec, evaluation, target, draft = run.spec, run.evaluation, run.target, run.draft
        assert spec is not None and evaluation is not None and evaluation.plan is not None and target is not None
        if not gate.runs_for(spec):
            self.preflight_waits.done(run.namespace, run.name)
            if evaluation.needs_preflight:  # the last good workload, if any, stays as it is
                decision = gate.needed(spec, operator_runs_none=not gate.enabled())
                run.verdicts[PREFLIGHT], run.progressing = decision.preflight, decision.progressing
                return run.stop()
            if gate.enabled():
                run.verdicts[PREFLIGHT] = gate.disabled().preflight
            return True
        request = await self.offload.run(self.offload.cpu, None, functools.partial(
            judge_request, spec, evaluation.plan, target.config, draft.config if draft else None))
        try:
            decision = await gate.PreflightGate(self.kube, self.logger, self.preflight_waits).check(
                spec, request, name=run.name, namespace=run.namespace, status=run.previous,
                owner=_owner_reference(run.body), fast_version=evaluation.vllm_version, required=evaluation.needs_preflight,
                guess=_summary([f for f in run.guess.findings if f.severity is Severity.ERROR]) if run.guess else None)
        except KubeTemporaryError as exc:  # reading or writing the Job: the workload waits
            run.progressing = Verdict("Unknown", Reason.APPLY_RETRYING, f"preflight: {exc} (retrying)")
            return run.stop(str(exc), RetryKind.after(exc))
        run.verdicts[PREFLIGHT] = decision.preflight
        if decision.status is not None:
            run.desired["preflight"] = decision.status
        if decision.validated is not None:
            run.verdicts[VALIDATED] = decision.validated
            if run.guess is not None:  # the image's verdict replaces the guess's refusal
                run.desired["findings"] = [f.to_dict() for f in run.guess.findings if f.severity is not Severity.ERROR]
        run.desired["findings"] = run.desired.get("findings", []) + decision.findings
        run.events += decision.events
        if decision.proceed:
            return True
        run.progressing = decision.progressing
        return run.stop(run.retry, run.retry_kind)  # a Job that may still change wakes the CR through its watch

    async def apply(self, run: Pass) -> bool:
        """Render the children, check their names, apply them and prune what is no longer rendered."""
        assert run.spec is not None and run.evaluation is not None and run.evaluation.plan is not None
        children = render_manifests(run.spec, run.evaluation.plan, name=run.name, namespace=run.namespace)
        try:
            both = await arms(self.kube, run.spec, children, namespace=run.namespace, previous=run.previous)
        except KubeTemporaryError as exc:
            run.progressing = Verdict("Unknown", Reason.APPLY_RETRYING, f"{exc} (retrying)")
            return run.stop(str(exc), "api")
        children = both.children
        if both.verdict is not None:
            run.verdicts[ROLLOUT] = both.verdict
            run.desired["rollout"] = both.status
            run.events += [both.event] if both.event else []
        problems = invalid_names(children)
        if problems:
            run.progressing = Verdict("False", Reason.INVALID_CHILD_NAMES, "; ".join(problems)[:2000])
            return run.stop(run.retry, run.retry_kind)
        for child in children:
            child["metadata"]["ownerReferences"] = [_owner_reference(run.body)]
        try:
            run.applied = await self._apply_children(run, children)
        except KubeTemporaryError as exc:
            stuck = exc.slow or run.attempt >= 1
            reason = Reason.APPLY_FAILED if stuck else Reason.APPLY_RETRYING
            run.progressing = Verdict("False" if stuck else "Unknown", reason, f"{exc} (retrying)")
            return run.stop(str(exc), RetryKind.after(exc))
        except KubePermanentError as exc:
            run.progressing = Verdict("False", Reason.APPLY_FAILED, str(exc))
            return run.stop(run.retry, run.retry_kind)
        run.desired.update(
            workload=f"{run.applied.kind}/{run.applied.name}",
            selector=selector_string(run.name),
            endpoint=endpoint(run.name, run.namespace),
        )
        return True

    async def _apply_children(self, run: Pass, children: list[dict[str, Any]]) -> Applied:
        """Apply every child under the CR's lock; returns the workload (the first child)."""
        uid = run.body["metadata"]["uid"]
        entry = self.desired.lock(run.namespace, run.name, uid)
        # A CR never applied before (no workload in status, nothing remembered): its children
        # are most likely missing, so create first (a 409 falls back to read + patch) and there
        # is nothing of ours to prune.
        first = "workload" not in run.previous and not entry.children
        async with entry.lock:
            # Record first: the watch events our own writes cause then compare equal.
            rendered_before = set(entry.children)
            entry.children = Manifests(children)
            applied = [await apply_child(self.kube, child, self.logger, assume_missing=first) for child in children]
            if not first and (not entry.pruned or set(entry.children) != rendered_before):
                # What we own by label, whatever its name (an older operator's too).
                owned = await owned_children(self.kube, run.namespace, run.name, uid)
                await prune(self.kube, run.namespace, uid, owned, set(entry.children), self.logger)
            entry.pruned = True
        return applied[0]

    async def _status_change(self, run: Pass, current: Mapping[str, Any]) -> Result:
        """The status step: the pass's Validated and Planned, the workload's conditions from
        the status as it is now (the mirror may have written since the pass began)."""
        retry, retry_kind = run.retry, run.retry_kind
        status = dict(current.get("status") or {})
        before = status.get("conditions") or []
        desired = dict(run.desired)
        verdicts = verdicts_from(before)
        verdicts.update({k: v for k, v in run.verdicts.items() if k in SPEC_CONDITIONS or k in (PREFLIGHT, ROLLOUT)})
        try:
            workload = await self._workload_now(run, status)
        except KubeTemporaryError as exc:  # keep the workload verdicts we had
            retry, retry_kind = retry or str(exc), RetryKind.API
        else:
            verdicts.update(workload_verdicts(workload, applied="workload" in desired or "workload" in status))
            if run.progressing is not None:
                verdicts[PROGRESSING] = run.progressing
            verdicts[READY] = ready_verdict(verdicts, workload)
            if workload is not None:
                desired["replicas"], desired["readyReplicas"] = workload.replicas, workload.ready
        conditions = desired["conditions"] = merge_conditions(before, verdicts, now=run.now, generation=run.generation)
        per_finding, said = finding_events(desired.get("findings"), status.get("findings"), verdicts) if "findings" in desired else ([], frozenset())
        events = condition_events(before, conditions, said=said) + per_finding + run.events
        return Result(_changes(status, desired), events, retry, retry_kind)

    async def _workload_now(self, run: Pass, status: Mapping[str, Any]) -> WorkloadState | None:
        """The workload as apply left it, else as the API server has it now."""
        if run.applied is not None:
            return self._workload_state(run.applied.live, run.namespace, run.name)
        live = await self._live_workload_body(run.namespace, run.desired.get("workload") or status.get("workload"))
        return self._workload_state(live, run.namespace, run.name)

    def failed(self, body: Mapping[str, Any], error: BaseException, *, now: str) -> Result:
        """Status for a reconcile that raised unexpectedly (a bug, not a verdict): Ready=False
        and Stalled=True say so with the error, instead of no status at all. The children
        are left as they are; the caller retries with backoff."""
        previous = dict(body.get("status") or {})
        old_conditions = previous.get("conditions") or []
        verdicts = verdicts_from(old_conditions)
        message = f"the reconcile failed unexpectedly ({type(error).__name__}: {str(error)[:300]}); retrying"
        verdicts[PROGRESSING] = Verdict("False", Reason.RECONCILE_ERROR, message)
        verdicts[READY] = Verdict("False", Reason.RECONCILE_ERROR, message)
        generation = (body.get("metadata") or {}).get("generation")
        conditions = merge_conditions(old_conditions, verdicts, now=now, generation=generation)
        return Result(_changes(previous, {"conditions": conditions}), condition_events(old_conditions, conditions), message, RetryKind.API)

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
        cut_off = Verdict("Unknown", Reason.RECONCILE_TIMEOUT, message)
        verdicts[PROGRESSING] = Verdict("False", Reason.RECONCILE_TIMEOUT, message)
        for kind in SPEC_CONDITIONS:
            verdicts.setdefault(kind, cut_off)
        if verdicts.get(READY, UNKNOWN).status != "True":
            verdicts[READY] = cut_off
        generation = (body.get("metadata") or {}).get("generation")
        conditions = merge_conditions(old_conditions, verdicts, now=now, generation=generation)
        before = next((c for c in old_conditions if c.get("type") == PROGRESSING), {})
        events = [("Warning", Reason.RECONCILE_TIMEOUT, message)] if before.get("reason") != Reason.RECONCILE_TIMEOUT else []
        return Result(_changes(previous, {"conditions": conditions}), events, message, RetryKind.API)

    def _workload_state(self, live: Mapping[str, Any] | None, namespace: str, cr_name: str) -> WorkloadState | None:
        """The workload's readiness, with what the scheduler said of the CR's pods."""
        if live is None:
            return None
        return WorkloadState.from_live(dict(live), self.unschedulable.message((namespace, label_value(cr_name))))

    async def _live_workload_body(self, namespace: str, ref: str | None) -> dict[str, Any] | None:
        if not ref or "/" not in ref:
            return None
        kind, name = ref.split("/", 1)
        return await self.kube.get(kind, namespace, name) if kind in _WORKLOAD_KINDS else None

    async def pod_scheduling(self, pod: Mapping[str, Any], event_type: str | None, *, now: str) -> Result:
        """A serving pod's event: when what the scheduler says of the CR's pods changed, the
        parent's readiness conditions say it (Unschedulable, with the scheduler's message)."""
        meta = pod.get("metadata") or {}
        namespace, owner = meta.get("namespace"), (meta.get("labels") or {}).get(OWNER_LABEL)
        problem = None if event_type == "DELETED" else scheduling_problem(pod)
        # Keyed by the owner label, so the CR's name is looked up only when the message changed.
        if not namespace or not owner or not self.unschedulable.note((namespace, owner), str(meta.get("name")), problem):
            return Result({})
        cr_name = next((n for n in self.desired.names(namespace) if label_value(n) == owner), None)
        if cr_name is None:
            return Result({})

        async def compute(parent: Mapping[str, Any]) -> Result:
            workload = await self._live_workload_body(namespace, (parent.get("status") or {}).get("workload"))
            return self.mirror(parent, workload, now=now) if workload is not None else Result({})

        return await self.write_status(namespace, cr_name, compute)

    async def mirror_workload(self, child: Mapping[str, Any], event_type: str | None, *, now: str) -> Result:
        """A workload event: the parent's readiness conditions, written against its live status."""
        meta = child.get("metadata") or {}
        owner, namespace = owner_of(child), meta.get("namespace")
        if owner is None or not namespace:
            return Result({})
        serving = f"{child.get('kind')}/{meta.get('name')}"
        workload = None if event_type == "DELETED" else child

        slot = self.status.slot(namespace, owner[0])

        def compute(parent: Mapping[str, Any]) -> Result:
            status = parent.get("status") or {}
            applicable = status.get("workload") == serving and _first_reconcile_done(status)
            # Kept for the reconcile when not (yet) applicable here, or when a running reconcile's
            # write may carry an older reading: the workload may send no further event.
            if not applicable or slot.reconciling:
                slot.unmirrored[serving] = dict(workload) if workload is not None else None
            else:
                slot.unmirrored.pop(serving, None)
            return self.mirror(parent, workload, now=now) if applicable else Result({})

        return await self.write_status(namespace, owner[0], compute)

    async def _apply_unmirrored(self, namespace: str, name: str, result: Result, now: str) -> Result:
        """The workload event that came before this reconcile's write named the workload."""
        slot = self.status.slot(namespace, name)
        serving = (result.status or {}).get("workload")
        if not isinstance(serving, str) or serving not in slot.unmirrored:
            return result

        def compute(parent: Mapping[str, Any]) -> Result:
            # Taken under the CR's lock: a mirror write that came first has cleared it, and its
            # newer reading stands.
            if serving not in slot.unmirrored:
                return Result({})
            return self.mirror(parent, slot.unmirrored.pop(serving), now=now)

        mirrored = await self.write_status(namespace, name, compute)
        if mirrored.status_patch:
            result.status, result.events = mirrored.status, result.events + mirrored.events
        return result

    def mirror(self, parent: Mapping[str, Any], workload_body: Mapping[str, Any] | None, *, now: str) -> Result:
        """Status changes from a workload event, keeping Validated/Planned as they are."""
        previous = dict(parent.get("status") or {})
        old_conditions = previous.get("conditions") or []
        verdicts = verdicts_from(old_conditions)
        if not _first_reconcile_done(previous):
            return Result({})  # the first reconcile has not run yet: it will write everything
        meta = parent.get("metadata") or {}
        workload = self._workload_state(workload_body or None, str(meta.get("namespace")), str(meta.get("name")))
        verdicts.update(workload_verdicts(workload, applied=workload is not None))
        verdicts[READY] = ready_verdict(verdicts, workload)
        promoted = promotion_done(previous.get("rollout"), workload_body)
        if promoted is not None:
            verdicts[ROLLOUT] = Verdict("True", Reason.PROMOTED, promoted["message"])
        generation = meta.get("generation")
        conditions = merge_conditions(old_conditions, verdicts, now=now, generation=generation)
        desired: dict[str, Any] = {"conditions": conditions}
        if promoted is not None:
            desired["rollout"] = promoted
        if workload is not None:
            desired["replicas"], desired["readyReplicas"] = workload.replicas, workload.ready
        return Result(_changes(previous, desired), condition_events(old_conditions, conditions))

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
