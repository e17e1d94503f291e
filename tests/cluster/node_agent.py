"""The kubelet of the simulated pool's CPU node, for the one kind of pod kwok must not fake: the
preflight's. kwok's pod stages skip pods labelled specdeploy.io/preflight-job
(hack/cluster/controlplane.py); this agent watches those pods on the real API server and, once
the scheduler has bound one, runs its container command with the Python that stands for its
image (the vLLM venv for vLLM's image), then reports what a kubelet reports: the container's
termination state and message, and the pod's phase. The Job controller takes it from there.

An image with no stand-in is reported as a kubelet reports an image it cannot pull."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from integration.kubelet import run_container

PREFLIGHT_POD_LABEL = "specdeploy.io/preflight-job"


class NodeAgent:
    def __init__(self, api: client.ApiClient, images: dict[str, str], root: Path) -> None:
        self.core = client.CoreV1Api(api)
        self.images, self.root = images, root
        self.ran: list[str] = []  # pods whose container ran, in order
        self._handled: set[str] = set()
        self.hold = threading.Event()  # cleared: a pod's container waits before it starts
        self.hold.set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="node-agent", daemon=True)

    def start(self) -> "NodeAgent":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.is_set():
            stream = watch.Watch()
            for event in stream.stream(self.core.list_pod_for_all_namespaces, label_selector=PREFLIGHT_POD_LABEL,
                                       timeout_seconds=5, _request_timeout=30):
                pod = event["object"]
                if self._stop.is_set():
                    return
                if pod.spec.node_name and pod.status.phase == "Pending" and pod.metadata.uid not in self._handled:
                    self._handled.add(pod.metadata.uid)
                    threading.Thread(target=self._run, args=(client.ApiClient().sanitize_for_serialization(pod),), daemon=True).start()

    def _run(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        container = spec["containers"][0]
        python = self.images.get(container["image"])
        if python is None:
            waiting = {"reason": "ErrImagePull", "message": f'failed to pull image "{container["image"]}": not found'}
            self._status(meta, {"containerStatuses": [self._container_status(container, {"waiting": waiting})]})
            return
        self.hold.wait()
        self._status(meta, {"phase": "Running", "containerStatuses": [self._container_status(container, {"running": {}})]})

        async def config_map(name: str) -> dict[str, str]:
            return self.core.read_namespaced_config_map(name, meta["namespace"]).data or {}

        code, message = asyncio.run(run_container(spec, container, python, self.root / meta["name"], config_map))
        self.ran.append(meta["name"])
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}
        self._status(meta, {"phase": "Succeeded" if code == 0 else "Failed",
                            "containerStatuses": [self._container_status(container, {"terminated": terminated})]})

    @staticmethod
    def _container_status(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        return {"name": container["name"], "image": container["image"], "imageID": "", "ready": "running" in state,
                "restartCount": 0, "state": state}

    def _status(self, meta: dict[str, Any], status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": status})
