"""A test double for the kubelet and the Job controller: it runs the Jobs the operator creates.

For each new Job in the emulator (by uid: a Job made again under the same name is new) it
creates the Job's pod as the Job controller does (the template's labels plus the controller-uid
and job-name labels, a controller ownerReference naming the Job's uid), then either reports the
image as unpullable (ErrImagePull, as the kubelet does for an image it cannot pull) or runs the
pod's container command with the executable that stands for the image's `python3` (`images`:
image -> path). The pod's volumes are laid out under a scratch root at the paths the pod would
see (ConfigMap items byte for byte, emptyDirs, the termination log): without a mount namespace
the double translates the pod's absolute paths to that root in the command and the
environment, as a container runtime's bind mounts would. When the process exits, its
termination message (the file at terminationMessagePath, else the log tail under
FallbackToLogsOnError) goes into the pod's status and the Job is marked Complete or Failed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path
from typing import Any, Awaitable, Callable

import kmock

JOBS = "batch/v1/jobs"
# What the kubelet keeps of a log for FallbackToLogsOnError (kubelet: 2048 bytes or 80 lines).
LOG_TAIL_BYTES, LOG_TAIL_LINES = 2048, 80
MAX_MESSAGE_BYTES = 4096


class KubeletDouble:
    def __init__(self, emulator: Any, images: dict[str, str], root: Path, namespace: str):
        self.k, self.images, self.root, self.namespace = emulator, images, root, namespace
        self.started: list[str] = []  # Jobs whose pod was created, in order
        self.hold = asyncio.Event()  # cleared: pods wait before their container starts
        self.hold.set()
        self._seen: set[str] = set()  # Job uids
        self._tasks: list[asyncio.Task[None]] = []
        self._names = itertools.count()

    async def run(self) -> None:
        """Watch for new Jobs until cancelled."""
        jobs = kmock.resource(JOBS)
        while True:
            for (resource, _, _), obj in list(self.k.objects.items()):
                if resource != jobs or obj.deleted or obj.raw["metadata"]["uid"] in self._seen:
                    continue
                self._seen.add(obj.raw["metadata"]["uid"])
                self._tasks.append(asyncio.create_task(self._run_job(json.loads(json.dumps(obj.raw)))))
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _path(self, kind: str, name: str | None = None) -> str:
        group_version, plural = kind.rsplit("/", 1)
        root = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        return f"{root}/namespaces/{self.namespace}/{plural}" + (f"/{name}" if name else "")

    async def _write(self, method: str, path: str, body: dict[str, Any]) -> None:
        response = await getattr(self.k, method)(path, json=body)
        assert response.status in (200, 201), await response.text()

    async def _run_job(self, job: dict[str, Any]) -> None:
        template, job_name, job_uid = job["spec"]["template"], job["metadata"]["name"], job["metadata"]["uid"]
        name = f"{job_name}-{next(self._names):05d}"
        self.started.append(job_name)
        labels = {**template["metadata"]["labels"], "batch.kubernetes.io/controller-uid": job_uid, "controller-uid": job_uid,
                  "batch.kubernetes.io/job-name": job_name, "job-name": job_name}
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job_uid, "controller": True, "blockOwnerDeletion": True}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": self.namespace, "labels": labels, "ownerReferences": [owner]},
               "spec": template["spec"], "status": {"phase": "Pending"}}
        await self._write("post", self._path("v1/pods"), pod)
        container = template["spec"]["containers"][0]
        python = self.images.get(container["image"])
        if python is None:
            waiting = {"reason": "ErrImagePull", "message": f'failed to pull image "{container["image"]}": not found'}
            await self._status("v1/pods", name, {"phase": "Pending", "containerStatuses": [
                {"name": container["name"], "ready": False, "restartCount": 0, "image": container["image"], "state": {"waiting": waiting}}]})
            return
        await self.hold.wait()
        code, message = await self._exec(template["spec"], container, python, self.root / name)
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}
        await self._status("v1/pods", name, {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
            {"name": container["name"], "ready": False, "restartCount": 0, "image": container["image"], "state": {"terminated": terminated}}]})
        condition = {"type": "Complete" if code == 0 else "Failed", "status": "True"}
        if code:
            condition.update(reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit")
        await self._status(JOBS, job["metadata"]["name"], {"conditions": [condition], "succeeded" if code == 0 else "failed": 1})

    async def _status(self, kind: str, name: str, status: dict[str, Any]) -> None:
        await self._write("patch", self._path(kind, name) + "/status", {"status": status})

    async def _exec(self, pod: dict[str, Any], container: dict[str, Any], python: str, root: Path) -> tuple[int, str]:
        async def config_map(name: str) -> dict[str, str]:
            return self.k.objects["v1/configmaps", self.namespace, name].raw["data"]

        return await run_container(pod, container, python, root, config_map)



async def run_container(pod: dict[str, Any], container: dict[str, Any], python: str, root: Path,
                        config_map: Callable[[str], Awaitable[dict[str, str]]]) -> tuple[int, str]:
    """Run a pod's container command with `python` standing for the image's, its volumes laid
    out under `root`; (exit code, termination message as the kubelet reports it)."""
    mounts = await _lay_out(pod, container, root, config_map)
    log_path = container.get("terminationMessagePath", "/dev/termination-log")
    mounts.append(log_path)
    (root / log_path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root / log_path.lstrip("/")).write_text("")

    def host(value: str) -> str:
        return str(root) + value if any(value == m or value.startswith(m.rstrip("/") + "/") for m in mounts) else value

    command = [python] + [host(a) for a in container["command"][1:] + container.get("args", [])]
    env = {"PATH": os.environ.get("PATH", "")}
    env.update({e["name"]: host(e["value"]) for e in container.get("env", []) if "value" in e})
    process = await asyncio.create_subprocess_exec(*command, env=env, cwd=root, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT)
    log, _ = await process.communicate()
    message = (root / log_path.lstrip("/")).read_text()
    if not message and process.returncode and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
        message = "\n".join(log.decode(errors="replace").splitlines()[-LOG_TAIL_LINES:])[-LOG_TAIL_BYTES:]
    return process.returncode or 0, message.encode()[:MAX_MESSAGE_BYTES].decode(errors="ignore")


async def _lay_out(pod: dict[str, Any], container: dict[str, Any], root: Path,
                   config_map: Callable[[str], Awaitable[dict[str, str]]]) -> list[str]:
    """Each volume mount's files under `root`: a ConfigMap's items as the kubelet writes them,
    the live object's data at the time the container starts."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
    for mount in container.get("volumeMounts", []):
        volume, target = volumes[mount["name"]], root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            data = await config_map(volume["configMap"]["name"])
            for item in volume["configMap"]["items"]:
                (target / item["path"]).parent.mkdir(parents=True, exist_ok=True)
                (target / item["path"]).write_bytes(data[item["key"]].encode())
    return mounts
