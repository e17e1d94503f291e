"""Every child a `plan` renders, against the Kubernetes schemas (kubernetes-validate, strict:
unknown fields and wrong types) and the API server's name rules (`render.invalid_names`): the
fuzz suites run it on each document they see accepted, so "accepted" means "its children
apply", not only "the CR parses". A LeaderWorkerSet is a CRD that kubernetes-validate does not
know: its leader and worker pod templates are checked as Pods."""

from __future__ import annotations

import json
from typing import Any, Iterator

import kubernetes_validate
import yaml

from specdeploy.render import invalid_names

KUBE_VERSION = "1.35.0"  # the newest the chart's tests render for (tests/unit/test_render.py)


def checkable(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The objects kubernetes-validate knows that stand for `obj`."""
    if obj.get("kind") != "LeaderWorkerSet":
        yield obj
        return
    for role in ("leaderTemplate", "workerTemplate"):
        template = obj["spec"]["leaderWorkerTemplate"].get(role)
        if template:
            yield {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{obj['metadata']['name']}-{role.lower()}", **template["metadata"]},
                   "spec": template["spec"]}


def child_problems(manifests: list[dict[str, Any]]) -> list[str]:
    """What the API server would refuse of these children (empty: they all apply)."""
    problems = list(invalid_names(manifests))
    for obj in manifests:
        for checked in checkable(obj):
            try:
                kubernetes_validate.validate(checked, KUBE_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(str(p) for p in exc.path)
                problems.append(f"{obj.get('kind')} {obj['metadata'].get('name')}: {where}: {str(exc.message)[:200]}")
    return problems


def accepted_manifests(stdout: str, output: str) -> list[dict[str, Any]]:
    """The children of every valid result in a `plan` report: `-o json` carries them per
    result, `-o yaml` prints them as the stream to apply (the report is comments)."""
    try:
        if output == "yaml":
            return [d for d in yaml.safe_load_all(stdout) if isinstance(d, dict)]
        report = json.loads(stdout) if output == "json" else None
    except (ValueError, yaml.YAMLError):
        return []
    results = report.get("results", [report]) if isinstance(report, dict) else []
    return [m for r in results if isinstance(r, dict) and r.get("verdict") == "valid" for m in r.get("manifests") or []]
