"""The preflight gate of a reconcile: the image's own vLLM judges the exact args before the
first GPU workload of a new (image, args, configs, GPU) combination.

`PreflightGate.check` starts the Job (with its ConfigMap) once per combination, reads its
outcome from the Job and its pod, and keeps the verdict in `status.preflight`, keyed by the
request's digest: a resync or an operator restart finds it there and starts no second Job.
Only the Job this CR owns (by uid) that runs what the operator renders is read, and only its
own pod (preflight/outcome.py); a Job whose judge was edited, or whose pod cannot be told from
a copy, is deleted and made again.
`decide` (pure) turns an outcome and `spec.preflight.mode` into what the reconcile does.
Nothing polls a Job that runs: the CR waits on it (`state.PreflightWaits`, recorded before the
Job is read), and the watch of preflight Jobs and their pods (controller/process/main.py) reconciles it
when one of them changes. A waiting CR costs no request until then.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

from specdeploy.api.conditions import Reason, Verdict
from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.controller.process.kube import Kube, KubePermanentError, KubeTemporaryError
from specdeploy.controller.process.metrics import METRICS
from specdeploy.controller.reconcile.state import PreflightWaits
from specdeploy.findings import Stage, error
from specdeploy.preflight import JUDGE_FILE
from specdeploy.preflight.job import CONFIG_MAP_LIMIT_BYTES, JOB_LABEL, config_map_bytes, preflight_config_map, preflight_job, preflight_name
from specdeploy.preflight.outcome import RUNNING, JudgeVerdict, Outcome, config_map_of, job_outcome, owned_by, template_differs
from specdeploy.preflight.request import JudgeRequest

# Operator-wide switch (chart: extraEnv): "false" runs no preflight Job for any CR, as on a
# cluster that allows the operator no Jobs. Any other value, or unset: spec.preflight.mode decides.
PREFLIGHT_ENV = "SPECDEPLOY_PREFLIGHT"
# The judge's stage -> the finding stage whose condition it decides.
_FINDING_STAGE = {"args": "spec", "config": "pair", "load": "load", "memory": "plan"}
# Outcomes after which the Job (and its ConfigMap) is deleted, and made again once it is gone.
_REMADE = ("JudgeEdited", "UntrustedPod")


@lru_cache(maxsize=1)
def judge_source() -> str:
    """The judge shipped in this package, as the ConfigMap carries it."""
    return JUDGE_FILE.read_text()


def judged_version(spec: SpeculativeDeploymentSpec, status: Mapping[str, Any]) -> str | None:
    """The release the image really runs (X.Y.Z of its vllm.__version__), when a preflight of
    this image accepted the args and the spec names no vllmVersion: it replaces the tag's guess.
    A refusal teaches none: judged again under that release's rules, the CR's verdict would
    turn from the image's own words to the rules' (a second write, a second Warning)."""
    cached = status.get("preflight") or {}
    if spec.vllm_version or cached.get("image") != spec.image or cached.get("outcome") != "Passed":
        return None
    match = re.match(r"^(\d+\.\d+\.\d+)", str(cached.get("vllmVersion") or ""))
    return match.group(1) if match else None


@dataclass
class Decision:
    """What the reconcile does: apply the workload or not, the conditions, status.preflight."""

    proceed: bool
    preflight: Verdict
    status: dict[str, Any] | None = None  # status.preflight (None: leave it)
    validated: Verdict | None = None  # replaces the fast rules' Validated
    progressing: Verdict | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    waits: bool = False  # the outcome may change with the Job: the CR waits for its next change


def _record(request: JudgeRequest, job: str, outcome: Outcome) -> dict[str, Any]:
    # Only the judge's own word is kept (its vllmVersion picks the rule set: judged_version).
    verdict = outcome.verdict if outcome.kind in ("Passed", "Refused", "CouldNotRun") else None
    # A pod that may still run (an image pull backing off, waiting for a node) is not a final
    # outcome: recorded as Running, so the next reconcile reads the Job again.
    kind = outcome.kind if outcome.final or outcome.kind != "CouldNotRun" else "Running"
    record = {"key": request.key, "image": request.image, "job": job, "outcome": kind,
              "stage": verdict.stage if verdict else None, "message": (verdict.error if verdict and verdict.error else outcome.why) or None,
              "vllmVersion": verdict.vllm_version if verdict else None, "memory": verdict.memory if verdict else None}
    return {k: v for k, v in record.items() if v is not None}


def decide(outcome: Outcome, request: JudgeRequest, *, mode: str, job: str, fast_version: str | None,
           guess: str | None = None) -> Decision:
    """The gate for one outcome under `mode` (Required | BestEffort). `guess`: the refusal of rules
    guessed for an image of unknown release, which this verdict replaces (no disagreement)."""
    status = _record(request, job, outcome)
    version = outcome.verdict.vllm_version if outcome.verdict is not None else None
    where = f"vLLM {version} in {request.image}" if version else f"vLLM in {request.image}"
    if outcome.kind == "Passed":
        message = f"{where} accepts the exact args (Job {job})"
        overruled = Verdict("True", Reason.VALID, f"{message}, which the rules guessed for the image refused: {guess}") if guess else None
        return Decision(True, Verdict("True", Reason.PASSED, message), status, validated=overruled)
    if outcome.kind == "Refused":
        verdict = outcome.verdict
        assert verdict is not None
        message = f"{where} refused the args at the {verdict.stage} stage: {verdict.error}"
        finding = error("preflight-refused", "spec", message[:4096], Stage(_FINDING_STAGE.get(verdict.stage or "", "load"))).to_dict()
        disagree = [] if guess else [("Warning", Reason.PREFLIGHT_DISAGREES, f"vLLM {fast_version} rules accept the spec; {message}")]
        return Decision(False, Verdict("False", Reason.REFUSED, message), status, validated=Verdict("False", Reason.PREFLIGHT_REFUSED, message),
                        findings=[finding], events=disagree)
    if outcome.kind == "Running":
        message = f"Job {job} runs {where} on the exact args (no GPU); the workload waits for its verdict"
        return Decision(False, Verdict("Unknown", Reason.RUNNING, message), status,
                        progressing=Verdict("True", Reason.PREFLIGHT_RUNNING, message), waits=True)
    if outcome.kind != "CouldNotRun":
        return _distrusted(outcome, job, status)
    if mode == "BestEffort":
        message = f"the preflight Job {job} could not run: {outcome.why}; proceeding on the fast rules (spec.preflight.mode BestEffort)"
        return Decision(True, Verdict("Unknown", Reason.COULD_NOT_RUN, message), {**status, "outcome": "CouldNotRun"})
    held = ("the rules guessed for the image refuse the spec and only its own vLLM can overrule them: the workload is held "
            "(fix the cause, or change the spec)" if guess else
            "spec.preflight.mode Required holds the workload (fix the cause, change the spec, or set mode BestEffort)")
    message = f"the preflight Job {job} could not run: {outcome.why}; {held}"
    return Decision(False, Verdict("False", Reason.COULD_NOT_RUN, message), status, progressing=Verdict("False", Reason.PREFLIGHT_HELD, message),
                    waits=not outcome.final)


def _distrusted(outcome: Outcome, job: str, status: dict[str, Any]) -> Decision:
    """No verdict from what the operator did not make, or cannot read, in any mode: BestEffort
    is for a cluster that cannot run the Job, not for a verdict someone else wrote."""
    if outcome.kind == "UnreadableVerdict":
        message = (f"the verdict of Job {job} cannot be read: {outcome.why}; no workload in any mode "
                   "(an image or spec change judges again)")
        return Decision(False, Verdict("False", Reason.UNREADABLE_VERDICT, message), status,
                        progressing=Verdict("False", Reason.PREFLIGHT_HELD, message))
    if outcome.kind == "UntrustedJob":
        message = f"Job {job} is not this SpeculativeDeployment's ({outcome.why}): no verdict is read from it; the workload waits until it is gone"
        return Decision(False, Verdict("False", Reason.UNTRUSTED_JOB, message), status,
                        progressing=Verdict("False", Reason.PREFLIGHT_HELD, message), waits=True)
    reason = Reason.JUDGE_EDITED if outcome.kind == "JudgeEdited" else Reason.UNTRUSTED_POD
    if outcome.kind == "JudgeEdited":
        message = f"the judge Job {job} ran is not the one the operator wrote ({outcome.why}): no verdict; the Job is made again"
    elif outcome.final:
        message = f"Job {job} gave no verdict of its own ({outcome.why}): the Job is made again"
    else:
        message = f"Job {job} runs; {outcome.why}: no verdict is read from them, the workload waits for the Job's own pod"
    return Decision(False, Verdict("Unknown", reason, message), status,
                    progressing=Verdict("True", Reason.PREFLIGHT_RUNNING, message), waits=True)


def _cached(status: Mapping[str, Any], request: JudgeRequest) -> Outcome | None:
    """The outcome status.preflight keeps for this request (None: not judged yet, or running)."""
    cached = status.get("preflight") or {}
    if cached.get("key") != request.key or cached.get("outcome") not in ("Passed", "Refused", "CouldNotRun", "UnreadableVerdict"):
        return None
    kind = cached["outcome"]
    if kind in ("CouldNotRun", "UnreadableVerdict"):
        return Outcome(kind, why=cached.get("message", ""))
    verdict = JudgeVerdict(kind == "Passed", cached.get("stage"), cached.get("message"), cached.get("vllmVersion"), cached.get("memory"))
    return Outcome(kind, verdict)


def enabled() -> bool:
    return os.environ.get(PREFLIGHT_ENV, "").strip().lower() != "false"


def runs_for(spec: SpeculativeDeploymentSpec) -> bool:
    """A preflight Job will judge this spec: the operator runs them and the spec does not turn it off."""
    return enabled() and spec.preflight.mode != "Disabled"


def disabled() -> Decision:
    return Decision(True, Verdict("Unknown", Reason.DISABLED, "spec.preflight.mode is Disabled: the fast rules alone decide"))


def needed(spec: SpeculativeDeploymentSpec, *, operator_runs_none: bool) -> Decision:
    """No workload for a method only a preflight can judge when none will run: the fast rules
    cannot accept it (validation/rules.py method-needs-preflight), and nothing else may."""
    off = ("the operator runs no preflight (SPECDEPLOY_PREFLIGHT=false, chart value preflight.enabled=false)" if operator_runs_none
           else "spec.preflight.mode is Disabled")
    message = (f"method {spec.draft.method} can only be judged by a preflight of {spec.image}, and {off}: no workload "
               "(enable the preflight, or choose a built-in method)")
    return Decision(False, Verdict("False", Reason.PREFLIGHT_NEEDED, message), progressing=Verdict("False", Reason.PREFLIGHT_NEEDED, message))


class PreflightGate:
    """The gate's I/O: the Job and its ConfigMap, the run's pods, status.preflight, and which
    Job the CR waits on (`waits`)."""

    def __init__(self, kube: Kube, logger: logging.Logger, waits: PreflightWaits | None = None):
        self.kube = kube
        self.logger = logger
        self.waits = waits if waits is not None else PreflightWaits()

    async def check(self, spec: SpeculativeDeploymentSpec, request: JudgeRequest, *, name: str, namespace: str,
                    status: Mapping[str, Any], owner: dict[str, Any], fast_version: str | None,
                    required: bool = False, guess: str | None = None) -> Decision:
        """The decision for `request`: from status.preflight when it holds this request's
        verdict (no API call), else from the Job (started here the first time). `required`: the
        fast rules could not judge the spec, so BestEffort holds the workload as Required does;
        so does `guess`, the refusal of rules guessed for the image (its verdict replaces it)."""
        job = preflight_name(name, request.key)
        mode = "Required" if required or guess else spec.preflight.mode
        cached = _cached(status, request)
        if cached is not None:  # told when first recorded: no Event, no status write
            self.waits.done(namespace, name)
            decision = decide(cached, request, mode=mode, job=(status.get("preflight") or {}).get("job", job), fast_version=fast_version,
                              guess=guess)
            decision.status, decision.events = None, []
            return decision
        self.waits.wait(namespace, job, name, owner.get("uid"))  # before the read: a change after it wakes the CR
        config_map = preflight_config_map(request, judge_source(), cr_name=name, namespace=namespace)
        rendered = preflight_job(spec, request, config_map, cr_name=name, namespace=namespace)
        live = await self.kube.get("Job", namespace, job)
        if live is None:
            outcome = await self._start(config_map, rendered, owner=owner, image=request.image)
        else:
            outcome = await self._read(live, rendered, owner=owner)
        decision = decide(outcome, request, mode=mode, job=job, fast_version=fast_version, guess=guess)
        if outcome.kind == "Refused" and outcome.verdict is not None and not guess:
            METRICS.preflight_disagreements.labels(outcome.verdict.stage or "unknown").inc()
        if live is not None and outcome.final and outcome.kind != "UntrustedJob":
            await self._done_with(live, remake=outcome.kind in _REMADE)
        if not decision.waits:
            self.waits.done(namespace, name)
        return decision

    async def _start(self, config_map: dict[str, Any], job: dict[str, Any], *, owner: dict[str, Any], image: str) -> Outcome:
        """Create the ConfigMap and the Job (owned by the CR): Running, or why they could not be."""
        size = config_map_bytes(config_map)
        if size > CONFIG_MAP_LIMIT_BYTES:
            return Outcome("CouldNotRun", why=f"the models' configs and the judge take {size} bytes, over a ConfigMap's {CONFIG_MAP_LIMIT_BYTES}")
        for child in (config_map, job):
            child["metadata"]["ownerReferences"] = [owner]
            refused = await self._create(child)
            if refused is not None:
                if child is job:  # nothing left behind
                    await self.kube.delete("ConfigMap", config_map["metadata"]["namespace"], config_map["metadata"]["name"])
                return Outcome("CouldNotRun", why=refused)
        meta = job["metadata"]
        self.logger.info("Created preflight Job %s/%s for image %s", meta["namespace"], meta["name"], image)
        return RUNNING

    async def _read(self, live: dict[str, Any], rendered: dict[str, Any], *, owner: dict[str, Any]) -> Outcome:
        """The outcome of the live Job: only when this CR owns it (by uid) and it runs what the
        operator renders now (else it is deleted, and made again once it is gone)."""
        meta = live.get("metadata") or {}
        if not owned_by(live, owner.get("uid")):
            return Outcome("UntrustedJob", why=f"its controller ownerReference does not name uid {owner.get('uid')}", final=False)
        stale = template_differs(live, rendered)
        if stale is not None:
            self.logger.info("Replacing preflight Job %s/%s: %s", meta.get("namespace"), meta.get("name"), stale)
            await self._done_with(live, remake=True)
            return RUNNING
        # The emulator ignores label selectors: keep only the pods that carry this Job's label.
        pods = [p for p in await self.kube.list("Pod", meta["namespace"], f"{JOB_LABEL}={meta['name']}")
                if ((p.get("metadata") or {}).get("labels") or {}).get(JOB_LABEL) == meta["name"]]
        return job_outcome(live, pods)

    async def _done_with(self, live: dict[str, Any], *, remake: bool) -> None:
        """Delete the Job's ConfigMap (its verdict is in status); with `remake`, the Job too (by
        its uid, with its pods): its deletion's watch event makes a new one."""
        meta = live.get("metadata") or {}
        if remake:
            await self.kube.delete("Job", meta["namespace"], meta["name"], uid=meta.get("uid"))
        config_map = config_map_of(live)
        if config_map:
            await self.kube.delete("ConfigMap", meta["namespace"], config_map)

    async def _create(self, child: dict[str, Any]) -> str | None:
        """Create `child`; why the API server refused it for good (403: RBAC or a quota, 422:
        an admission policy), else None. 409: created by an earlier try of this reconcile."""
        try:
            await self.kube.create(child)
        except KubePermanentError as exc:
            return f"the API server refused the {child['kind']}: {exc}"
        except KubeTemporaryError as exc:
            if exc.status == 403:
                return f"the API server refused the {child['kind']}: {exc}"
            if exc.status != 409:
                raise
        return None
