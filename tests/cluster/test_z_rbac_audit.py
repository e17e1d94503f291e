"""The chart's RBAC judged by the API server's audit log, after every other test of the suite
(pytest runs this file last): the operator was never refused (0 responses of 403), and every
rule the chart grants its ServiceAccount was used by some request (a rule nobody uses is one
to remove)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml

from .bed import NAMESPACE, RELEASE, SERVICE_ACCOUNT, Cluster

USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"


def audit_events(cluster: Cluster) -> Iterator[dict[str, Any]]:
    with open(cluster.plane.audit_log, encoding="utf-8") as log:
        for line in log:
            event = json.loads(line)
            if event.get("user", {}).get("username") == USER:
                yield event


def granted_rules(cluster: Cluster) -> list[tuple[str, str, str, str]]:
    """(apiGroup, resource, verb, resourceName or "") for every rule of every Role/ClusterRole
    the release binds to the ServiceAccount."""
    manifest = cluster.run("get", "manifest", RELEASE, "-n", NAMESPACE, tool=cluster.helm).stdout
    rules = []
    for doc in yaml.safe_load_all(manifest):
        if doc and doc["kind"] in ("Role", "ClusterRole"):
            for rule in doc.get("rules") or []:
                for group in rule.get("apiGroups", []):
                    for resource in rule.get("resources", []):
                        for verb in rule.get("verbs", []):
                            for name in rule.get("resourceNames") or [""]:
                                rules.append((group, resource, verb, name))
    return rules


def _request(event: dict[str, Any]) -> tuple[str, str, str, str]:
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return ref.get("apiGroup", ""), resource, event["verb"], ref.get("name", "")


def test_the_operator_was_never_refused_and_used_every_rule_it_was_granted(cluster: Cluster) -> None:
    events = list(audit_events(cluster))
    assert len(events) > 100, "the operator made almost no requests: was it running?"
    refused = sorted({f"{e['verb']} {e['requestURI']}" for e in events if e.get("responseStatus", {}).get("code") == 403})
    assert refused == []
    used = {_request(e) for e in events}
    unused = [rule for rule in granted_rules(cluster)
              if not any(group == rule[0] and resource == rule[1] and verb == rule[2] and (not rule[3] or name == rule[3])
                         for group, resource, verb, name in used)]
    assert unused == [], f"rules the chart grants that nothing used: {unused}"
