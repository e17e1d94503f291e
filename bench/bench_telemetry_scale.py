"""The telemetry at scale: N SpeculativeDeployments (default 2000), each with one serving pod,
scraped by the operator's own telemetry loop (`controller.telemetry`) at its interval (default 60 s).

The CRs are the Llama 3.1 8B + EAGLE-3 example as `specdeploy plan` plans it, with the status
the reconcile writes; each has its Deployment, ReplicaSet and one ready pod (a realistic ~6 KB
object). The pods and the API calls live in another process (bench/vllm_fleet.py): every pod
serves the /metrics page vLLM 0.32.0 served (62 KB), its counters moving at every scrape, so
every scrape counts and the status is written as on a busy cluster. This process runs only the
operator's telemetry, with its real API client (aiohttp, over loopback) and its real reads.

Measured, over `--seconds` from the loop's start:
- all read once: from the loop's start to the last pod's first scrape (the loop's first tick
  comes one interval, or since the spread one slot, after its start);
- per pod, the times between its scrapes (median, p99, max) and their ratio to the interval;
- scrapes per interval (N when every pod is read once per interval);
- this process's CPU seconds (user + system, all threads) per interval;
- API requests per interval, by method.

    .venv/bin/python bench/bench_telemetry_scale.py --crs 2000 --interval 60 --seconds 240

Prints one JSON line; bench/RESULTS.md records runs on the project's 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes.client import Configuration

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT / "bench")]

from specdeploy.controller.scraping import telemetry as module  # noqa: E402
from specdeploy.controller.process.kube import Kube  # noqa: E402
from specdeploy.render.labels import MANAGED_BY, MANAGED_BY_LABEL  # noqa: E402
from specdeploy.stream import plan_stream  # noqa: E402
from vllm_fleet import objects  # noqa: E402

EXAMPLE = ROOT / "examples" / "llama-3.1-8b-eagle3.yaml"
NAME, NS = "benchtmpl", "bench"


def template() -> dict[str, Any]:
    """One CR with its planned status, Deployment, ReplicaSet and ready pod; `objects` makes N."""
    doc = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d.get("kind") == "SpeculativeDeployment")
    doc["metadata"] = {"name": NAME, "namespace": NS}
    result = plan_stream(yaml.safe_dump(doc), "bench").results[0].to_dict()
    deployment = next(m for m in result["manifests"] if m["kind"] == "Deployment")
    deployment["metadata"].update(uid="UID-deploy", namespace=NS, resourceVersion="1")
    pod_labels = {**deployment["spec"]["template"]["metadata"]["labels"], "pod-template-hash": "5d8f9c7b6"}
    stamp = "2026-12-06T10:00:00Z"
    conditions = [{"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": stamp, "observedGeneration": 1}
                  for t, r, m in [("Validated", "Valid", "the draft fits the target"), ("Planned", "Planned", "tp 1, draft tp 1"),
                                  ("Progressing", "RolledOut", "1 of 1 replicas updated"), ("Available", "Serving", "1 of 1 ready"),
                                  ("Ready", "Ready", "serving")]]
    cr = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
          "metadata": {"name": NAME, "namespace": NS, "uid": "UID-cr", "generation": 1, "resourceVersion": "1"},
          "spec": doc["spec"],
          "status": {"observedGeneration": 1, "plan": result["plan"], "findings": result["findings"], "conditions": conditions,
                     "workload": f"Deployment/{deployment['metadata']['name']}", "replicas": 1, "readyReplicas": 1}}
    replicaset = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                  "metadata": {"name": f"{NAME}-5d8f9c7b6", "namespace": NS, "uid": "UID-rs", "labels": pod_labels,
                               "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"],
                                                    "uid": "UID-deploy", "controller": True, "blockOwnerDeletion": True}]},
                  "spec": {"replicas": 1, "selector": deployment["spec"]["selector"], "template": deployment["spec"]["template"]},
                  "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}}
    return {"name": NAME, "cr": cr, "deployment": deployment, "replicaset": replicaset, "pod": _pod(deployment, pod_labels, stamp)}


def _pod(deployment: dict[str, Any], pod_labels: dict[str, str], stamp: str) -> dict[str, Any]:
    """A ready pod as the API server returns it: managedFields, conditions, container status."""
    managed = [{"manager": m, "operation": "Update", "apiVersion": "v1", "time": stamp, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in pod_labels}}, "f:status": {"f:conditions": {}}}}
               for m in ("kube-controller-manager", "kubelet")]
    conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{NAME}-5d8f9c7b6-x7k2p", "namespace": NS, "uid": "UID-pod", "labels": pod_labels,
                         "resourceVersion": "1", "creationTimestamp": stamp, "managedFields": managed,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{NAME}-5d8f9c7b6",
                                              "uid": "UID-rs", "controller": True, "blockOwnerDeletion": True}]},
            "spec": {**deployment["spec"]["template"]["spec"], "nodeName": "gpu-node-17"},
            "status": {"phase": "Running", "conditions": conditions, "hostIP": "10.0.3.17", "podIP": "127.0.0.1",
                       "podIPs": [{"ip": "127.0.0.1"}], "startTime": stamp, "qosClass": "Guaranteed",
                       "containerStatuses": [{"name": "vllm", "ready": True, "started": True, "restartCount": 0,
                                              "image": "vllm/vllm-openai:v0.32.0", "imageID": "docker.io/vllm/vllm-openai@sha256:" + "0" * 64,
                                              "containerID": "containerd://" + "1" * 64, "state": {"running": {"startedAt": stamp}}}]}}


class WatchedKube(Kube):
    """The API client, with the watch event that follows each status write delivered at once to
    the telemetry (the operator's CR watch does that; the bench runs no watch)."""

    telemetry: module.Telemetry

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any], *, subresource: str | None = None) -> dict[str, Any]:
        patched = await super().merge_patch(kind, namespace, name, patch, subresource=subresource)
        self.telemetry.track(patched, deleted=False)
        return patched


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _fleet_stats(api: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as client, client.get(f"{api}/stats") as response:
        return dict(await response.json())


def summarise(stats: dict[str, Any], *, start: float, interval: float, seconds: float, count: int, cpu_s: float) -> dict[str, Any]:
    """The figures of the module docstring from the fleet's scrape times and request counts."""
    scrapes = {int(pod): times for pod, times in stats["scrapes"].items()}
    firsts = [times[0] for times in scrapes.values()]
    gaps = sorted(b - a for times in scrapes.values() for a, b in zip(times, times[1:]))
    intervals = seconds // interval  # the loop's ticks
    pick = lambda q: round(gaps[min(len(gaps) - 1, int(q * len(gaps)))], 2) if gaps else None  # noqa: E731
    return {
        "crs": count, "interval_s": interval, "seconds": seconds,
        "pods_read": len(scrapes), "all_read_once_s": round(max(firsts) - start, 2) if len(firsts) == count else None,
        "gap_p50_s": pick(0.5), "gap_p99_s": pick(0.99), "gap_max_s": round(gaps[-1], 2) if gaps else None,
        "gap_max_ratio": round(gaps[-1] / interval, 2) if gaps else None,
        "scrapes_per_interval": round(sum(len(t) for t in scrapes.values()) / intervals, 1),
        "cpu_s_per_interval": round(cpu_s / intervals, 2),
        "api_requests_per_interval": {m: round(n / intervals, 1) for m, n in sorted(stats["requests"].items())},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


async def run(count: int, interval: float, seconds: float) -> dict[str, Any]:
    made = template()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "template.json"
        path.write_text(json.dumps(made))
        fleet = subprocess.Popen([sys.executable, str(ROOT / "bench" / "vllm_fleet.py"), "--template", str(path), "--count", str(count)],
                                 stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "operator")})
        try:
            assert fleet.stdout is not None
            ports = json.loads(fleet.stdout.readline())
            api = f"http://127.0.0.1:{ports['api']}"
            kube = WatchedKube(Configuration(host=api))
            telemetry = kube.telemetry = module.Telemetry(kube, logging.getLogger("bench"), interval_s=interval)
            for index in range(count):
                telemetry.track(objects(made, index)["cr"], deleted=False)
            for pod in await kube.list("Pod", NS, f"{MANAGED_BY_LABEL}={MANAGED_BY}"):  # what the pod watch lists at its start
                telemetry.pods.observe(pod, None)
            start, cpu = time.time(), _cpu_s()
            loop = asyncio.create_task(module._loop(telemetry))
            await asyncio.sleep(seconds)
            cpu = _cpu_s() - cpu
            loop.cancel()
            await telemetry.close()
            stats = await _fleet_stats(api)
            await kube.close()
        finally:
            fleet.terminate()
            fleet.wait()
    return summarise(stats, start=start, interval=interval, seconds=seconds, count=count, cpu_s=cpu)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crs", type=int, default=2000)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=240.0)
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(asyncio.run(run(options.crs, options.interval, options.seconds))))
