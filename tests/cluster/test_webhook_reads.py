"""The webhook reveals nothing about objects its caller could not read, on the real API server:
a review POSTed straight to the webhook port (no API server in between, no credential), naming
ConfigMaps in kube-system, makes the operator's ServiceAccount read no ConfigMap there, as the
API server's audit log records it, and gets the same answer whether those ConfigMaps exist or not.

The chart here is cluster-wide, so RBAC would let the operator read kube-system's ConfigMaps: the
control at the end reads one with the ServiceAccount's token, so a 0 here is the webhook's doing,
not the log's or RBAC's."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client, config

from .bed import Cluster, token_kubeconfig, until
from .test_lifecycle import llama
from .test_webhook_certificate import ca_bundle
from .test_z_rbac_audit import audit_events

ELSEWHERE = "kube-system"
PROBE = "specdeploy-probe-config"


def post_review(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """An AdmissionReview POSTed straight to the webhook port, as any client on the network could."""
    context = ssl.create_default_context(cadata=base64.b64decode(ca_bundle(cluster)).decode())
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "operation": "CREATE", "name": obj["metadata"]["name"], "namespace": ELSEWHERE,
        "userInfo": {"username": "nobody"}, "object": obj}}
    url = f"https://127.0.0.1:{cluster.operators[0].ports['webhook']}/validate-speculativedeployment"
    request = urllib.request.Request(url, data=json.dumps(review).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        answer = json.loads(response.read())["response"]
    assert answer.pop("uid") == review["request"]["uid"]
    return dict(answer)


def config_map_reads(cluster: Cluster, namespace: str) -> list[str]:
    return [f"{e['verb']} {e['requestURI']}" for e in audit_events(cluster)
            if (e.get("objectRef") or {}).get("resource") == "configmaps" and (e.get("objectRef") or {}).get("namespace") == namespace]


def test_a_review_naming_another_namespaces_configmaps_reads_none_and_answers_the_same(cluster: Cluster, tmp_path: Path) -> None:
    obj = llama("probe")
    obj["metadata"]["namespace"] = ELSEWHERE
    obj["spec"]["target"] = {"model": "meta-llama/Llama-3.3-70B-Instruct", "configMapRef": {"name": PROBE, "key": "config.json"}}
    core = client.CoreV1Api(cluster.api)
    missing = post_review(cluster, obj)
    core.create_namespaced_config_map(ELSEWHERE, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=PROBE), data={"config.json": json.dumps({"num_attention_heads": 77})}))
    try:
        present = post_review(cluster, obj)
        obj["spec"]["target"]["configMapRef"] = {"name": "kube-root-ca.crt", "key": "ca.crt"}  # in every namespace
        root_ca = post_review(cluster, obj)
        # The control: the ServiceAccount reads the probe itself, and the audit log shows it.
        as_operator = config.new_client_from_config(config_file=str(token_kubeconfig(cluster, tmp_path / "sa.kubeconfig")))
        assert client.CoreV1Api(as_operator).read_namespaced_config_map(PROBE, ELSEWHERE).data
        reads = until(lambda: config_map_reads(cluster, ELSEWHERE), "the control's read in the audit log")
    finally:
        core.delete_namespaced_config_map(PROBE, ELSEWHERE)
    assert reads == [f"get /api/v1/namespaces/{ELSEWHERE}/configmaps/{PROBE}"]  # the control's, and nothing else
    warning = "not judged at admission: spec.target.configMapRef: a ConfigMap is not read at admission; the operator judges it in status"
    assert missing == present == root_ca == {"allowed": True, "warnings": [warning]}
    assert "77" not in json.dumps([missing, present, root_ca])
