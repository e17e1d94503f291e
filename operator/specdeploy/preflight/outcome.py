"""What a preflight run says: the judge's verdict line, and what a Job and its pod report
about the run (the verdict in the container's termination message, or why it could not run).

Nothing read from the cluster is trusted for what it claims to be: a verdict is read only
from the pod the Job itself made (its controller ownerReference and its controller-uid label
name the Job's uid, and its judge container is the Job template's), only from the container
the operator named, and only within bounds (a termination message is text a pod wrote: any
size, any nesting gives a named outcome, never an exception).

Pure: the live Job and pods in, an `Outcome` out. The controller reads the objects and acts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping

# Exit codes of vllm_judge.py: 0 vLLM accepts, 1 vLLM refused, 2 the judge could not run; and
# of the Job's bootstrap (preflight/job.py): 3 a mounted file is not the one the operator wrote.
EXIT_ACCEPTED, EXIT_REFUSED, EXIT_BROKEN, EXIT_TAMPERED = 0, 1, 2, 3
INTEGRITY_STAGE = "integrity"  # the bootstrap's verdict stage when it refuses to run the judge
# The kubelet's reasons for a container that never started because its image is unusable.
IMAGE_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
# The kubelet keeps at most 4096 bytes of a termination message; more was written by someone else.
MAX_MESSAGE_BYTES = 4096
# A verdict nests three levels (verdict, memory, memory.specs); json.loads recurses once per level.
MAX_DEPTH = 8
# The labels the Job controller puts on its pods, naming the Job's uid (the legacy one, then 1.27's).
CONTROLLER_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
CONTAINER = "judge"  # the container the operator names (preflight/job.py), the only one read

Kind = Literal["Running", "Passed", "Refused", "CouldNotRun", "UntrustedPod", "UntrustedJob", "JudgeEdited", "UnreadableVerdict"]


@dataclass(frozen=True)
class JudgeVerdict:
    """One verdict line of vllm_judge.py."""

    ok: bool
    stage: str | None
    error: str | None
    vllm_version: str | None
    memory: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "stage": self.stage, "error": self.error, "vllmVersion": self.vllm_version, "memory": self.memory}


def _too_deep(line: str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text nests objects and arrays deeper than `limit` (strings skipped):
    checked before json.loads, which recurses once per level."""
    depth, in_string, escaped = 0, False, False
    for char in line:
        if escaped:
            escaped = False
        elif in_string and char == "\\":
            escaped = True
        elif char == '"':
            in_string = not in_string
        elif in_string:
            continue
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def read_verdict(text: str | None) -> tuple[JudgeVerdict | None, str | None]:
    """(the last line of `text` that is a verdict object, None); (None, why) when the text is
    beyond what a judge writes; (None, None) when no line is a verdict (a crash's log tail)."""
    text = text or ""
    if len(text.encode(errors="replace")) > MAX_MESSAGE_BYTES:
        return None, f"the termination message has {len(text.encode(errors='replace'))} bytes, over the kubelet's {MAX_MESSAGE_BYTES}"
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue  # log text: a verdict is one JSON object on its own line
        if _too_deep(line):
            return None, f"a line nests deeper than {MAX_DEPTH} levels, which no verdict does"
        try:
            data = json.loads(line, parse_float=_finite, parse_constant=_finite)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("ok"), bool):
            memory = data.get("memory")
            return JudgeVerdict(
                data["ok"], _text(data.get("stage")), _text(data.get("error")), _text(data.get("vllmVersion")),
                memory if isinstance(memory, dict) else None), None
    return None, None


def _finite(text: str) -> float:
    """A JSON number as a float, refused when it is not finite (NaN, Infinity, 1e999): the
    verdict's figures go to status, which the API server keeps as JSON."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def parse_verdict(text: str | None) -> JudgeVerdict | None:
    """The verdict of `text`, or None (no verdict line, or one beyond what a judge writes)."""
    return read_verdict(text)[0]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Outcome:
    """Running (wait), Passed or Refused (vLLM's verdict), CouldNotRun (`why`; `final`: the
    Job is over, else it may still run: an image pull backing off, a pod waiting for a node);
    UntrustedPod, UntrustedJob, JudgeEdited, UnreadableVerdict: something other than the
    operator's Job claimed a verdict, or the claim cannot be read (`why` says which)."""

    kind: Kind
    verdict: JudgeVerdict | None = None
    why: str = ""
    final: bool = True


RUNNING = Outcome("Running", final=False)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def owned_by(obj: Mapping[str, Any], uid: str | None, kind: str | None = None) -> bool:
    """Whether obj's controller ownerReference names `uid` (and `kind`): the API server's word."""
    for ref in _meta(obj).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and (kind is None or ref.get("kind") == kind):
            return bool(uid) and ref.get("uid") == uid
    return False


def _judge_container(pod_spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((c for c in pod_spec.get("containers") or [] if isinstance(c, Mapping) and c.get("name") == CONTAINER), None)


def runs_as(pod_spec: Mapping[str, Any], template_spec: Mapping[str, Any]) -> str | None:
    """Why the judge container of `pod_spec` is not the one of `template_spec` (None: it is):
    what decides what runs — image, command, args, environment, mounts, and the ConfigMap
    mounted — compared as written (both pass the same API defaulting)."""
    pod, template = _judge_container(pod_spec), _judge_container(template_spec)
    if pod is None or template is None:
        return f"no container named {CONTAINER!r}"
    for key in ("image", "command", "args", "workingDir", "env", "envFrom", "volumeMounts"):
        if pod.get(key) != template.get(key):
            return f"its {CONTAINER} container's {key} is not the Job template's"
    mounted = {m.get("name") for m in template.get("volumeMounts") or [] if isinstance(m, Mapping)}
    volumes = [{v.get("name"): v for v in spec.get("volumes") or [] if isinstance(v, Mapping) and v.get("name") in mounted}
               for spec in (pod_spec, template_spec)]
    if volumes[0] != volumes[1]:
        return "its volumes are not the Job template's"
    return None


def _untrusted(job: Mapping[str, Any], pod: Mapping[str, Any]) -> str | None:
    """Why `pod` is not the pod `job` made (None: it is)."""
    uid = _meta(job).get("uid")
    if not owned_by(pod, uid, "Job"):
        return "its controller is not the Job (ownerReference uid)"
    labels = _meta(pod).get("labels") or {}
    found = [labels.get(name) for name in CONTROLLER_UID_LABELS if name in labels]
    if not found or any(value != uid for value in found):
        return "its controller-uid label is not the Job's uid"
    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    return runs_as(pod.get("spec") or {}, template)


def sort_pods(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[str]]:
    """(the pods `job` made, "pod: why not" for each other pod that claims to be one)."""
    own, others = [], []
    for pod in pods:
        why = _untrusted(job, pod)
        if why is None:
            own.append(pod)
        else:
            others.append(f"{_meta(pod).get('name', '?')}: {why}")
    return own, others


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The judge container's terminated state (no other container's)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(status, Mapping) and status.get("name") == CONTAINER:
            terminated = (status.get("state") or {}).get("terminated")
            return terminated if isinstance(terminated, Mapping) and terminated else None
    return None


def _detail(text: Any) -> str:
    """The tail of a message, for a reason: bounded whatever was written."""
    return str(text or "").strip()[-500:]


def _from_terminated(terminated: Mapping[str, Any]) -> Outcome:
    message, code = terminated.get("message"), terminated.get("exitCode")
    verdict, unreadable = read_verdict(message if isinstance(message, str) else None)
    if code == EXIT_TAMPERED:
        return Outcome("JudgeEdited", why=(verdict.error if verdict and verdict.error else None) or _detail(message))
    if code in (EXIT_ACCEPTED, EXIT_REFUSED):
        # The judge writes its verdict before it exits 0 or 1: anything else is not its word.
        if verdict is None:
            return Outcome("UnreadableVerdict", why=unreadable or f"exit {code} and no verdict line in the termination message")
        if verdict.ok != (code == EXIT_ACCEPTED):
            return Outcome("UnreadableVerdict", verdict, f"exit {code} contradicts the verdict's ok={verdict.ok}")
        return Outcome("Passed" if verdict.ok else "Refused", verdict)
    if terminated.get("reason") == "OOMKilled":
        return Outcome("CouldNotRun", verdict, "the judge ran out of memory: raise spec.preflight.resources.memory")
    detail = (verdict.error if verdict is not None else None) or (unreadable if unreadable else _detail(message))
    return Outcome("CouldNotRun", verdict, f"the judge could not run (exit {code}): {detail or terminated.get('reason', 'no message')}")


def _waiting(pods: Iterable[Mapping[str, Any]]) -> Outcome | None:
    for pod in pods:
        status = pod.get("status") or {}
        for container in status.get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in IMAGE_FAILURES:
                why = f"the image cannot be pulled ({waiting['reason']}: {waiting.get('message', '')})".replace(": )", ")")
                return Outcome("CouldNotRun", why=why, final=False)
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return Outcome("CouldNotRun", why=f"no node can take the pod (Unschedulable: {condition.get('message', '')})", final=False)
    return None


def job_outcome(job: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]]) -> Outcome:
    """The run's outcome from the live Job (None: gone) and the pods that carry its label:
    only the pods it made count; the others are named when they are all there is."""
    if job is None:
        return Outcome("CouldNotRun", why="the preflight Job is gone and left no verdict")
    own, others = sort_pods(job, pods)
    done = [t for t in map(_terminated, own) if t is not None]
    if len(done) > 1:  # backoffLimit 0: the Job makes one pod; a second is a copy of its identity
        return Outcome("UntrustedPod", why=f"{len(done)} pods claim to be the one pod of Job {_meta(job).get('name')}")
    if done:
        return _from_terminated(done[0])
    ignored = "ignored pods not made by the Job: " + "; ".join(sorted(others)[:3]) if others else ""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Failed":
            return Outcome("CouldNotRun", why=f"the Job failed ({condition.get('reason', '')}: {condition.get('message', '')})")
        if condition.get("type") == "Complete":  # counted a pod that is not its own: no verdict
            return Outcome("UntrustedPod", why=f"the Job completed and no pod of its own left a verdict; {ignored or 'no pod'}")
    waiting = _waiting(own)
    if waiting is not None:
        return waiting
    if others:
        return Outcome("UntrustedPod", why=ignored, final=False)
    return RUNNING


def config_map_of(job: Mapping[str, Any]) -> str | None:
    """The ConfigMap the Job's judge reads (its `judge` volume)."""
    volumes = (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or []
    for volume in volumes:
        if isinstance(volume, Mapping) and volume.get("name") == "judge":
            return (volume.get("configMap") or {}).get("name")
    return None


def template_differs(live: Mapping[str, Any], rendered: Mapping[str, Any]) -> str | None:
    """Why the live Job does not run what the operator renders now (None: it does): the judge
    container's image, command and args (the bootstrap and the digests of every mounted file)
    and the ConfigMap it mounts. Fields the API server defaults are not compared."""
    containers = [_judge_container(((job.get("spec") or {}).get("template") or {}).get("spec") or {}) for job in (live, rendered)]
    if containers[0] is None or containers[1] is None:
        return f"no container named {CONTAINER!r}"
    for key in ("image", "command", "args"):
        if containers[0].get(key) != containers[1].get(key):
            return f"its {CONTAINER} container's {key} is not the one the operator writes"
    if config_map_of(live) != config_map_of(rendered):
        return "it mounts another ConfigMap than the one the operator writes"
    return None
