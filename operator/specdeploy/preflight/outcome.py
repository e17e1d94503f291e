"""What a preflight run says: the judge's verdict line, and what a Job and its pod report
about the run (the verdict in the container's termination message, or why it could not run).

Pure: the live Job and pods in, an `Outcome` out. The controller reads the objects and acts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping

# Exit codes of vllm_judge.py: 0 vLLM accepts, 1 vLLM refused, 2 the judge could not run.
EXIT_ACCEPTED, EXIT_REFUSED, EXIT_BROKEN = 0, 1, 2
# The kubelet's reasons for a container that never started because its image is unusable.
IMAGE_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})

Kind = Literal["Running", "Passed", "Refused", "CouldNotRun"]


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


def parse_verdict(text: str | None) -> JudgeVerdict | None:
    """The last line of `text` that is a verdict object; None when there is none (a crash's
    log tail, an empty termination message)."""
    for line in reversed((text or "").strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("ok"), bool):
            memory = data.get("memory")
            return JudgeVerdict(
                data["ok"], _text(data.get("stage")), _text(data.get("error")), _text(data.get("vllmVersion")),
                memory if isinstance(memory, dict) else None)
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Outcome:
    """Running (wait), Passed or Refused (vLLM's verdict), CouldNotRun (`why`; `final`: the
    Job is over, else it may still run: an image pull backing off, a pod waiting for a node)."""

    kind: Kind
    verdict: JudgeVerdict | None = None
    why: str = ""
    final: bool = True


RUNNING = Outcome("Running", final=False)


def _terminated(pods: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated")
            if terminated:
                return terminated
    return None


def _from_terminated(terminated: Mapping[str, Any]) -> Outcome:
    verdict = parse_verdict(terminated.get("message"))
    code = terminated.get("exitCode")
    if verdict is not None and code in (EXIT_ACCEPTED, EXIT_REFUSED):
        return Outcome("Passed" if verdict.ok else "Refused", verdict)
    if terminated.get("reason") == "OOMKilled":
        return Outcome("CouldNotRun", verdict, "the judge ran out of memory: raise spec.preflight.resources.memory")
    detail = (verdict.error if verdict is not None else None) or (terminated.get("message") or "").strip()[-500:]
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
    """The run's outcome from the live Job (None: gone) and its pods."""
    pods = list(pods)
    terminated = _terminated(pods)
    if terminated is not None:
        return _from_terminated(terminated)
    if job is None:
        return Outcome("CouldNotRun", why="the preflight Job is gone and left no verdict")
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return Outcome("CouldNotRun", why=f"the Job failed ({condition.get('reason', '')}: {condition.get('message', '')})")
    return _waiting(pods) or RUNNING
