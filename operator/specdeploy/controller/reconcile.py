"""One reconcile for create, update and resume: parse -> resolve configs -> evaluate ->
render -> apply -> status. And the readiness mirror that keeps status in step with the
workload between reconciles.

Both return the status *changes* (keys whose value differs from the live status), so a
reconcile of an unchanged object writes nothing. The kopf wiring is in `main.py`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

from specdeploy.api.parse import parse_spec
from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.controller.apply import apply_child
from specdeploy.controller.conditions import (
    Verdict,
    WorkloadState,
    merge_conditions,
    ready_verdict,
    transitions,
    verdicts_from,
    workload_verdicts,
)
from specdeploy.controller.kube import Kube, KubePermanentError, KubeTemporaryError
from specdeploy.pipeline import ModelInputs, evaluate
from specdeploy.render import endpoint, render_manifests, selector_string
from specdeploy.sources import SourceInvalid, SourceUnavailable, resolve_model
from specdeploy.findings import VALIDATION_STAGES, Severity

SOURCE_RETRY_DELAY_S = 30.0
_WORKLOAD_KINDS = ("Deployment", "LeaderWorkerSet")


@dataclass
class Result:
    """What a reconcile produced: status changes, events to post, and whether to retry."""

    status_patch: dict[str, Any]
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    retry: str | None = None  # message of a transient failure: the caller raises TemporaryError
    retry_delay: float = SOURCE_RETRY_DELAY_S


def _changes(previous: Mapping[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in desired.items() if previous.get(k) != v}


def _events(previous: list[dict[str, Any]], current: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    events = []
    for cond in transitions(previous, current):
        bad = cond["status"] == "False" and cond["type"] in ("Validated", "Planned", "Available")
        message = f"{cond['type']}={cond['status']}" + (f": {cond['message']}" if cond.get("message") else "")
        events.append(("Warning" if bad else "Normal", cond["reason"], message))
    return events


class Reconciler:
    """The flow, with the client and the clock given to it (so tests and the demo share it)."""

    def __init__(self, kube: Kube, logger: logging.Logger):
        self.kube = kube
        self.logger = logger

    def reconcile(self, body: Mapping[str, Any], *, now: str) -> Result:
        meta, previous = body.get("metadata") or {}, dict(body.get("status") or {})
        name, namespace, generation = meta["name"], meta["namespace"], meta.get("generation")
        old_conditions = previous.get("conditions") or []
        verdicts = verdicts_from(old_conditions)
        desired: dict[str, Any] = {}
        if generation is not None:
            desired["observedGeneration"] = generation

        def finish(retry: str | None = None, delay: float = SOURCE_RETRY_DELAY_S, progressing: Verdict | None = None) -> Result:
            try:
                workload = self._live_workload(namespace, desired.get("workload") or previous.get("workload"))
            except KubeTemporaryError as exc:  # keep the workload verdicts we had
                retry = retry or str(exc)
            else:
                verdicts.update(workload_verdicts(workload, applied="workload" in desired or "workload" in previous))
                if progressing is not None:
                    verdicts["Progressing"] = progressing
                verdicts["Ready"] = ready_verdict(verdicts, workload)
                if workload is not None:
                    desired["replicas"], desired["readyReplicas"] = workload.replicas, workload.ready
            conditions = merge_conditions(old_conditions, verdicts, now=now, generation=generation)
            desired["conditions"] = conditions
            events = _events(old_conditions, conditions)
            new_errors = desired.get("findings") not in (None, previous.get("findings"))
            if verdicts["Validated"].status == "False" and new_errors and not any(e[0] == "Warning" for e in events):
                events.append(("Warning", verdicts["Validated"].reason, verdicts["Validated"].message))
            return Result(_changes(previous, desired), events, retry, delay)

        # 1. parse
        spec, spec_findings = parse_spec(dict(body.get("spec") or {}))
        if spec is None:
            desired["findings"] = [f.to_dict() for f in spec_findings]
            first = desired["findings"][0]
            verdicts["Validated"] = Verdict("False", "InvalidSpec", f"{first['field']}: {first['message']}")
            verdicts["Planned"] = Verdict("Unknown", "NotValidated", "the spec does not parse")
            return finish()

        # 2. resolve configs
        try:
            target, draft = self._resolve(spec, namespace)
        except SourceUnavailable as exc:
            verdicts["Validated"] = Verdict("Unknown", "ConfigUnavailable", f"{exc.field}: {exc.message} (retrying)")
            return finish(retry=f"{exc.field}: {exc.message}")
        except SourceInvalid as exc:
            desired["findings"] = [{"code": "config-invalid", "severity": "error", "stage": "config", "field": exc.field, "message": exc.message}]
            verdicts["Validated"] = Verdict("False", "ConfigInvalid", f"{exc.field}: {exc.message}")
            verdicts["Planned"] = Verdict("Unknown", "NotValidated", "the model config could not be read")
            return finish()

        # 3. evaluate (validation + plan)
        evaluation = evaluate(spec, target, draft, k_in_force=_k_in_force(previous))
        desired["findings"] = [f.to_dict() for f in evaluation.findings]
        def summary(errors: list) -> str:
            return f"{errors[0].field}: {errors[0].message}" + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")

        errors = [f for f in evaluation.findings if f.severity is Severity.ERROR]
        if not evaluation.validated:
            verdicts["Validated"] = Verdict("False", "ValidationFailed", summary([f for f in errors if f.stage in VALIDATION_STAGES]))
            verdicts["Planned"] = Verdict("Unknown", "NotValidated", "fix the findings first")
            return finish()
        verdicts["Validated"] = Verdict("True", "Valid", f"{spec.draft.method} draft is compatible with the target (vLLM {evaluation.vllm_version} rules)")
        if evaluation.plan is None or errors:
            verdicts["Planned"] = Verdict("False", "NoFeasiblePlan", summary(errors) if errors else "no layout fits; see findings")
            return finish()
        plan = evaluation.plan
        verdicts["Planned"] = Verdict(
            "True", "Planned",
            f"tp={plan.tensor_parallel_size} pp={plan.pipeline_parallel_size} draftTp={plan.draft_tensor_parallel_size} "
            f"nodes/replica={plan.nodes_per_replica} gpus/pod={plan.gpus_per_pod}",
        )
        desired["plan"] = evaluation.plan_dict()

        # 4. render and apply
        children = render_manifests(spec, plan, name=name, namespace=namespace)
        for child in children:
            child["metadata"]["ownerReferences"] = [_owner_reference(body)]
        try:
            applied = [apply_child(self.kube, child, self.logger) for child in children]
        except KubeTemporaryError as exc:
            failed = Verdict("Unknown", "ApplyRetrying", f"{exc} (retrying)")
            return finish(retry=str(exc), delay=exc.delay or SOURCE_RETRY_DELAY_S, progressing=failed)
        except KubePermanentError as exc:
            return finish(progressing=Verdict("False", "ApplyRejected", str(exc)))
        workload = applied[0]
        desired.update(
            workload=f"{workload.kind}/{workload.name}",
            selector=selector_string(name),
            endpoint=endpoint(name, namespace),
        )
        return finish()

    def _resolve(self, spec: SpeculativeDeploymentSpec, namespace: str) -> tuple[ModelInputs, ModelInputs | None]:
        token = None
        if spec.hf_token_secret_ref is not None:
            ref = spec.hf_token_secret_ref
            token = self.kube.read_secret_key(namespace, ref.name, ref.key)

        def reader(name: str, key: str) -> str:
            try:
                text = self.kube.read_config_map_key(namespace, name, key)
            except KubeTemporaryError as exc:
                raise SourceUnavailable("configMapRef", str(exc)) from exc
            if text is None:  # may be created after the CR (GitOps ordering): retry
                raise SourceUnavailable("configMapRef", f"ConfigMap {namespace}/{name} or its key {key!r} does not exist yet")
            return text

        target = resolve_model(spec.target, "spec.target", hf_token=token, configmap_reader=reader)
        draft = None
        if spec.draft.has_own_checkpoint:
            draft = resolve_model(spec.draft, "spec.draft", hf_token=token, configmap_reader=reader)
        return target, draft

    def _live_workload(self, namespace: str, ref: str | None) -> WorkloadState | None:
        if not ref or "/" not in ref:
            return None
        kind, name = ref.split("/", 1)
        live = self.kube.get(kind, namespace, name) if kind in _WORKLOAD_KINDS else None
        return WorkloadState.from_live(live) if live is not None else None

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
