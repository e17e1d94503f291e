"""Names and labels shared by every child, so selectors, the Service and status agree.

A SpeculativeDeployment name is a DNS subdomain (up to 253 characters, dots allowed), but a
label value and a Service name are limited to 63 characters, and a Service name is a DNS-1035
label (no dots, starts with a letter). Where the CR name does not fit, the child name or label
value is the name cut short plus a hash of the full name, so distinct CRs never collide and
short names (the common case) are used as they are.
"""

from __future__ import annotations

import hashlib
import re

from specdeploy.api.names import MAX_LABEL, is_label_value
from specdeploy.api.spec import API_GROUP

HTTP_PORT = 8000
PLAN_HASH_ANNOTATION = f"{API_GROUP}/plan-hash"
OWNER_LABEL = f"{API_GROUP}/speculativedeployment"
MANAGED_BY = "specdeploy"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
# LWS labels its pods with their index inside the group; 0 is the leader that serves HTTP.
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# ...and its StatefulSets and pods with the LeaderWorkerSet's name.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"

_HASH_LEN = 8
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # Service names, LWS names (MAX_LABEL: 63)


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:_HASH_LEN]


def is_dns1035_label(value: str) -> bool:
    return len(value) <= MAX_LABEL and bool(_DNS1035.match(value))


def short_name(name: str, suffix: str = "") -> str:
    """`name + suffix` as a DNS-1035 label of at most 63 characters: unchanged when it is one,
    else sanitised and shortened with a hash of the full name (so it stays unique)."""
    whole = name + suffix
    if is_dns1035_label(whole):
        return whole
    base = re.sub(r"[^a-z0-9-]", "-", name.lower())
    if not base[:1].isalpha():
        base = "x" + base
    keep = MAX_LABEL - len(suffix) - _HASH_LEN - 1
    base = base[:keep].rstrip("-")
    return f"{base}-{_digest(name)}{suffix}"


def label_value(name: str) -> str:
    """A label value for the CR name: the name itself when it fits in 63 characters."""
    if is_label_value(name):
        return name
    return f"{name[: MAX_LABEL - _HASH_LEN - 1].rstrip('-.')}-{_digest(name)}"


def selector_labels(name: str) -> dict[str, str]:
    """The labels that identify one SpeculativeDeployment's vLLM pods (immutable once used)."""
    return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": label_value(name)}


def labels(name: str) -> dict[str, str]:
    """Every child and pod carries these (app.kubernetes.io/* recommended labels). The owner
    label may be shortened: the controller finds the parent through the ownerReference."""
    return {
        **selector_labels(name),
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/part-of": "specdeploy",
        MANAGED_BY_LABEL: MANAGED_BY,
        OWNER_LABEL: label_value(name),
    }


def selector_string(name: str) -> str:
    """status.selector for the scale subresource (HPA/KEDA read it)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(name).items()))


def workload_name(name: str) -> str:
    """The Deployment or LeaderWorkerSet. LWS names its headless Service and pods after it,
    so it is held to a DNS-1035 label like a Service name."""
    return short_name(name)


def service_name(name: str) -> str:
    """Always suffixed: never `vllm` (Kubernetes would inject VLLM_PORT=tcp://... into pods
    with service links, which vLLM rejects), and never the LWS name (LWS owns a headless
    Service of that name for its leader address)."""
    return short_name(name, "-api")


def pdb_name(name: str) -> str:
    return short_name(name)


def inference_pool_name(name: str) -> str:
    """The workload's name: what an HTTPRoute's backendRef and the endpoint picker's --pool-name say."""
    return workload_name(name)


def child_names(name: str) -> dict[str, str]:
    """Every child this CR can have, by kind: the candidates the controller prunes from."""
    return {
        "Deployment": workload_name(name),
        "LeaderWorkerSet": workload_name(name),
        "Service": service_name(name),
        "PodDisruptionBudget": pdb_name(name),
        "InferencePool": inference_pool_name(name),
    }


def endpoint(name: str, namespace: str) -> str:
    """In-cluster base URL of the OpenAI-compatible API."""
    return f"http://{service_name(name)}.{namespace}.svc:{HTTP_PORT}/v1"
