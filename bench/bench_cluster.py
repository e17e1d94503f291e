"""The operator at scale on the real control plane (hack/cluster/controlplane.py): CRs applied over
a pool of kwok GPU nodes, the chart installed with its defaults (the preflight on), two operator
replicas under the chart's ServiceAccount (tests/cluster/bed.py).

Measured:
- apply -> Planned=True per CR (the first reconcile's verdict) and apply -> Ready=True
  (client-side clock, from the create's response to the watch event that shows it): p50, p99, max;
- the leader's RSS (now and peak, /proc);
- requests and writes per CR by the operator's ServiceAccount, from the API server's audit log;
- the operator's writes during `--idle-s` seconds with nothing changing (goal 0);
- HA: kill -9 of the leader -> the standby holds the Lease; SIGTERM -> the process has exited.

The preflight runs per CR as the chart defaults: its Job, its pod scheduled onto a CPU node, and
the node agent's verdict. With the default image (no stand-in here) the agent reports the image
as unpullable, as a kubelet would, and BestEffort proceeds on the fast rules; `--image
vllm/vllm-openai:v0.32.0` runs the real judge in each pod instead (minutes per CR on 2 cores).
`--preflight-mode Required` holds every CR on its pending Job instead (the pod stays in
ErrImagePull): the run settles when each CR says PreflightHeld, and the idle window measures
what CRs waiting on their Jobs cost.

Usage: python bench/bench_cluster.py [--crs 1000] [--rate 0] [--h100-nodes 200] [--idle-s 300] [--preflight-mode Required]
Prints one JSON line; bench/RESULTS.md records runs on the project's 2-core machine."""

from __future__ import annotations

import argparse
import collections
import json
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "operator")]

from kubernetes import client, watch  # noqa: E402

from cluster.bed import NAMESPACE, WORKLOAD_NS, install, uninstall, until  # noqa: E402  (puts hack/cluster on sys.path)
from controlplane import ControlPlane, build, default_pool  # noqa: E402
from cluster.test_ha import held_by, leader_and_standby  # noqa: E402
from cluster.test_lifecycle import llama  # noqa: E402
from cluster.test_z_rbac_audit import USER  # noqa: E402

WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def audit(plane: ControlPlane, since: float, until_s: float | None = None) -> list[dict[str, Any]]:
    """The operator's requests (one audit event each: ResponseComplete, or ResponseStarted for
    watches) whose stage timestamp lies in [since, until_s)."""
    events = []
    with open(plane.audit_log, encoding="utf-8") as log:
        for line in log:
            event = json.loads(line)
            if event.get("user", {}).get("username") != USER or event.get("stage") not in ("ResponseComplete", "ResponseStarted"):
                continue
            if event["verb"] == "watch" and event["stage"] == "ResponseComplete":
                continue  # counted when it started
            stamp = _epoch(event["stageTimestamp"])
            if stamp >= since and (until_s is None or stamp < until_s):
                events.append(event)
    return events


def _resource(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    return str(ref.get("resource", "")) + (f"/{ref['subresource']}" if ref.get("subresource") else "")


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def ready(conditions: list[dict[str, Any]]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def held(conditions: list[dict[str, Any]]) -> bool:
    """Held by its preflight Job, which cannot run yet (Required: PreflightHeld)."""
    return any(c["type"] == "Progressing" and c.get("reason") == "PreflightHeld" for c in conditions)


def planned(conditions: list[dict[str, Any]]) -> bool:
    return any(c["type"] == "Planned" and c["status"] == "True" for c in conditions)


def watch_ready(api: client.ApiClient, ready_at: dict[str, float], planned_at: dict[str, float], stop: threading.Event,
                settled: Callable[[list[dict[str, Any]]], bool] = ready) -> None:
    """When each CR was first seen Planned=True, and first seen `settled`."""
    custom = client.CustomObjectsApi(api)
    while not stop.is_set():
        for event in watch.Watch().stream(custom.list_namespaced_custom_object, "specdeploy.io", "v1alpha1", WORKLOAD_NS,
                                          "speculativedeployments", timeout_seconds=10):
            body = event["object"]
            name = body["metadata"]["name"]
            conditions = (body.get("status") or {}).get("conditions") or []
            if name not in planned_at and planned(conditions):
                planned_at[name] = time.monotonic()
            if name not in ready_at and settled(conditions):
                ready_at[name] = time.monotonic()


def rss_mib(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def apply_all(made: Any, count: int, image: str | None, mode: str | None,
              rate: float) -> tuple[dict[str, float], dict[str, float], dict[str, float], float]:
    """Create `count` CRs (`rate` per second; 0: as fast as the API server takes them) and wait
    until each settled: (created, planned, settled) monotonic times by name, the wall start."""
    custom = client.CustomObjectsApi(made.api)
    created, ready_at, planned_at, stop = {}, {}, {}, threading.Event()
    settled = held if mode == "Required" else ready
    threading.Thread(target=watch_ready, args=(made.api, ready_at, planned_at, stop, settled), daemon=True).start()
    started, first = time.time(), time.monotonic()
    spec = {**({"image": image} if image else {}), **({"preflight": {"mode": mode}} if mode else {})}
    for index in range(count):
        if rate > 0:
            time.sleep(max(0.0, first + index / rate - time.monotonic()))
        doc = llama(f"sd-{index:04d}", **spec)
        custom.create_namespaced_custom_object("specdeploy.io", "v1alpha1", WORKLOAD_NS, "speculativedeployments", doc)
        created[doc["metadata"]["name"]] = time.monotonic()
    until(lambda: len(ready_at) >= count and len(planned_at) >= count, f"{count} CRs settled", guard_s=3600)
    stop.set()
    return created, planned_at, ready_at, started


def percentiles(created: dict[str, float], reached: dict[str, float], what: str) -> dict[str, float]:
    latencies = sorted(reached[n] - created[n] for n in created)
    return {f"{what}P50S": round(statistics.median(latencies), 2), f"{what}P99S": round(latencies[int(0.99 * (len(latencies) - 1))], 2),
            f"{what}MaxS": round(latencies[-1], 2)}


def handover(made: Any, leader: Any, standby: Any) -> dict[str, float]:
    """kill -9 of the leader -> the standby's Lease; then SIGTERM of the new leader -> its exit."""
    killed = time.monotonic()
    leader.kill()
    until(lambda: held_by(made, standby), "the standby's Lease")
    taken = time.monotonic() - killed
    standby.signal(signal.SIGTERM)
    termed = time.monotonic()
    standby.proc.wait(60)
    return {"kill9ToStandbyLeaseS": round(taken, 2), "sigtermToExitS": round(time.monotonic() - termed, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crs", type=int, default=1000)
    parser.add_argument("--h100-nodes", type=int, default=200)
    parser.add_argument("--idle-s", type=float, default=300)
    parser.add_argument("--rate", type=float, default=0.0, help="creates per second; 0 = as fast as the API server takes them")
    parser.add_argument("--image", default=None, help="spec.image of every CR (default: the chart's default image)")
    parser.add_argument("--preflight-mode", default=None, choices=("Required", "BestEffort", "Disabled"),
                        help="spec.preflight.mode of every CR (default: the CRD's, BestEffort)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    # Each preflight pod (1 CPU) sits on a 64-CPU node until its Job ends: room for every one.
    cpu_nodes = max(1, args.crs // 60 + 1)
    plane = ControlPlane(scratch / "plane", build(), default_pool(h100=args.h100_nodes, cpu=cpu_nodes))
    plane.up()
    try:
        made = install(plane, scratch, webhook=False)
        created, planned_at, ready_at, started = apply_all(made, args.crs, args.image, args.preflight_mode, args.rate)
        settled = time.time()
        busy = audit(plane, started, settled)
        time.sleep(args.idle_s)  # nothing changes: every write in this window is a write too many
        idle = audit(plane, settled + 1, time.time())
        leader, standby = leader_and_standby(made)  # by the Lease's holder: the standby reconciles nothing
        rss, peak = rss_mib(leader.proc.pid)
        standby_rss, _ = rss_mib(standby.proc.pid)
        result = {
            "crs": args.crs, "gpuNodes": args.h100_nodes + 5, "image": args.image or "chart default",
            "preflightMode": args.preflight_mode or "BestEffort", "settledOn": "PreflightHeld" if args.preflight_mode == "Required" else "Ready",
            "createsPerS": args.rate or "burst", **percentiles(created, planned_at, "planned"),
            **percentiles(created, ready_at, "ready"), "allReadyAfterS": round(settled - started, 1),
            "requestsPerCr": round(len(busy) / args.crs, 2), "writesPerCr": round(sum(e["verb"] in WRITES for e in busy) / args.crs, 2),
            "idleSeconds": args.idle_s, "idleWrites": sum(e["verb"] in WRITES for e in idle), "idleRequests": len(idle),
            "idleWritesBesidesLease": sum(e["verb"] in WRITES and _resource(e) != "leases" for e in idle),
            "idleByRequest": dict(collections.Counter(f"{e['verb']} {_resource(e)}" for e in idle).most_common()),
            "leaderRssMiB": round(rss, 1), "leaderPeakRssMiB": round(peak, 1), "standbyRssMiB": round(standby_rss, 1),
            "namespace": NAMESPACE,
        }
        result.update(handover(made, leader, standby))
        print(json.dumps(result))
        uninstall(made)
    finally:
        plane.down()


if __name__ == "__main__":
    main()
