"""Every request the operator makes is covered by controller/process/permissions.py: the chart's
RBAC is built from that file, so an undeclared call would fail on a real cluster."""

from __future__ import annotations

from typing import Any

from specdeploy.controller.process.permissions import PERMISSIONS, allows

from .conftest import DEPLOYMENT, Cluster, Operator, created, example  # noqa: F401

VERBS = {"GET": "get", "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def _verb(request: Any) -> str:
    method = str(request.method).upper().split(".")[-1]
    if method == "GET":
        action = str(request.action).split(".")[-1].lower()
        return {"watch": "watch", "list": "list"}.get(action, "get")
    return VERBS[method]


def _operator_made(request: Any) -> bool:
    agent = (request.headers or {}).get("User-Agent", "")
    return "kopf" in agent.lower() or "openapi" in agent.lower()


async def test_operator_requests_are_all_declared(operator: Operator, cluster: Cluster) -> None:
    from .test_operator import LLAMA

    name = await created(cluster, LLAMA, "uid-perm")
    await cluster.patch_status(DEPLOYMENT, name, {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1})
    await cluster.patch_spec(name, {"draft": {"numSpeculativeTokens": 4}}, generation=2)
    from .conftest import eventually

    await eventually(lambda: cluster.condition(name, "Ready").get("status") == "True", what="Ready")
    seen = set()
    for request in list(operator.emulator):
        if request.resource is None or request.resource.plural is None or not _operator_made(request):
            continue  # discovery (/apis/<group>/<version>) is a non-resource URL every user may read
        resource = request.resource.plural
        if request.url.path.endswith("/status"):
            resource += "/status"
        seen.add((request.resource.group, resource, _verb(request)))
    assert len(seen) >= 8, seen  # the test must have seen the operator at work
    undeclared = {s for s in seen if not allows(*s)}
    assert not undeclared, f"requests not in PERMISSIONS: {undeclared}"
    # ...and nothing declared for the workloads goes unused (least privilege).
    used_resources = {(g, r) for g, r, _ in seen}
    for p in PERMISSIONS:
        if p.resource in ("deployments", "services", "poddisruptionbudgets"):
            assert (p.api_group, p.resource) in used_resources, p
