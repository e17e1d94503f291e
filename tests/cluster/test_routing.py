"""spec.routing on a real API server with the Gateway API Inference Extension's own InferencePool
CRD (hack/cluster/inference pins it): the pool the operator renders is accepted by that CRD,
selects exactly the CR's ready serving pods (not a neighbour's, not a pod that only shares the
instance label, as the preflight's does), follows an edit, goes when routing is turned off, and
goes with the CR through the garbage collector."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from .bed import WORKLOAD_NS, Cluster, until
from .test_lifecycle import _ready, llama

NAME, NEIGHBOUR, LOOKALIKE = "routed", "routed-neighbour", "routed-preflight-lookalike"


def pool(cluster: Cluster, name: str = NAME) -> dict[str, Any] | None:
    done = cluster.run("get", "inferencepools.inference.networking.k8s.io", name, "-n", WORKLOAD_NS, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def selected(cluster: Cluster, found: dict[str, Any]) -> set[str]:
    """The pods the pool's selector matches, as the API server lists them."""
    selector = ",".join(f"{k}={v}" for k, v in found["spec"]["selector"]["matchLabels"].items())
    return {p.metadata.name for p in client.CoreV1Api(cluster.api).list_namespaced_pod(WORKLOAD_NS, label_selector=selector).items}


def ready_serving_pods(cluster: Cluster, name: str) -> set[str]:
    """The Ready pods of the ReplicaSets of the CR's Deployment, found through ownerReferences."""
    core, apps = client.CoreV1Api(cluster.api), client.AppsV1Api(cluster.api)
    deployment = apps.read_namespaced_deployment(name, WORKLOAD_NS)
    replica_sets = {r.metadata.uid for r in apps.list_namespaced_replica_set(WORKLOAD_NS).items
                    if any(o.uid == deployment.metadata.uid for o in r.metadata.owner_references or [])}
    return {p.metadata.name for p in core.list_namespaced_pod(WORKLOAD_NS).items
            if any(o.uid in replica_sets for o in p.metadata.owner_references or [])
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])}


def _lookalike(cluster: Cluster) -> None:
    """A pod with the CR's instance label but not a serving pod's name label, as the preflight's."""
    labels = {"app.kubernetes.io/name": "specdeploy-preflight", "app.kubernetes.io/instance": NAME,
              "app.kubernetes.io/component": "preflight"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": LOOKALIKE, "labels": labels},
           "spec": {"nodeName": "cpu-0", "containers": [{"name": "judge", "image": "busybox"}]}}
    cluster.run("create", "-n", WORKLOAD_NS, "-f", "-", stdin=json.dumps(pod))


def test_the_pool_is_accepted_selects_exactly_the_ready_serving_pods_and_goes_with_the_cr(cluster: Cluster) -> None:
    routed = llama(NAME, replicas=2, preflight={"mode": "Disabled"}, routing={"endpointPicker": {"name": "routed-epp"}})
    cluster.apply(routed)
    cluster.apply(llama(NEIGHBOUR, preflight={"mode": "Disabled"}))
    _lookalike(cluster)
    until(lambda: _ready(cluster, NAME) and _ready(cluster, NEIGHBOUR), "both CRs Ready=True")
    found = until(lambda: pool(cluster), "the InferencePool")
    # Accepted by the real CRD, which also defaulted what we leave out.
    assert found["apiVersion"] == "inference.networking.k8s.io/v1" and found["spec"]["appProtocol"] == "http"
    assert found["spec"]["targetPorts"] == [{"number": 8000}]
    assert found["spec"]["endpointPickerRef"] == {"group": "", "kind": "Service", "name": "routed-epp", "port": {"number": 9002},
                                                  "failureMode": "FailClose"}
    owner = found["metadata"]["ownerReferences"][0]
    assert owner["uid"] == cluster.sd(NAME)["metadata"]["uid"] and owner["controller"] is True
    serving = ready_serving_pods(cluster, NAME)
    assert len(serving) == 2 and selected(cluster, found) == serving
    assert selected(cluster, found).isdisjoint(ready_serving_pods(cluster, NEIGHBOUR) | {LOOKALIKE})

    routed["spec"]["routing"]["endpointPicker"]["port"] = 9102
    cluster.apply(routed)
    until(lambda: (pool(cluster) or {}).get("spec", {}).get("endpointPickerRef", {}).get("port") == {"number": 9102}, "the pool patched")
    del routed["spec"]["routing"]
    cluster.apply(routed)
    until(lambda: pool(cluster) is None, "the pool pruned once routing is off")
    routed["spec"]["routing"] = {}
    cluster.apply(routed)
    found = until(lambda: pool(cluster), "the pool back")
    assert "endpointPickerRef" not in found["spec"]
    cluster.run("delete", "speculativedeployment", NAME, "-n", WORKLOAD_NS, "--wait=true", "--timeout=120s")
    until(lambda: pool(cluster) is None, "the garbage collector to remove the pool")
