"""Names and labels shared by every child, so selectors, the Service and status agree."""

from __future__ import annotations

from specdeploy.api.spec import API_GROUP

HTTP_PORT = 8000
PLAN_HASH_ANNOTATION = f"{API_GROUP}/plan-hash"
OWNER_LABEL = f"{API_GROUP}/speculativedeployment"
MANAGED_BY = "specdeploy"
# LWS labels its pods with their index inside the group; 0 is the leader that serves HTTP.
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def selector_labels(name: str) -> dict[str, str]:
    """The labels that identify one SpeculativeDeployment's vLLM pods (immutable once used)."""
    return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name}


def labels(name: str) -> dict[str, str]:
    """Every child and pod carries these (app.kubernetes.io/* recommended labels)."""
    return {
        **selector_labels(name),
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/part-of": "specdeploy",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        OWNER_LABEL: name,
    }


def selector_string(name: str) -> str:
    """status.selector for the scale subresource (HPA/KEDA read it)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(name).items()))


def workload_name(name: str) -> str:
    return name


def service_name(name: str) -> str:
    """Always suffixed: never `vllm` (Kubernetes would inject VLLM_PORT=tcp://... into pods
    with service links, which vLLM rejects), and never the LWS name (LWS owns a headless
    Service of that name for its leader address)."""
    return f"{name}-api"


def endpoint(name: str, namespace: str) -> str:
    """In-cluster base URL of the OpenAI-compatible API."""
    return f"http://{service_name(name)}.{namespace}.svc:{HTTP_PORT}/v1"
