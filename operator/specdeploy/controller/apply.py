"""Apply the rendered children: create what is missing, merge-patch what differs, and write
nothing when the live child's plan-hash annotation already matches (also after a restart).

The merge patch is computed from the desired state against the live object: desired values
that differ are sent (lists replace whole, as merge patch does), and a few fields this
operator owns but may stop rendering (scheduling fields, the Service selector) are set to
null so a removed setting is removed. Fields the apiserver defaults are left alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from specdeploy.controller.kube import Kube
from specdeploy.render import PLAN_HASH_ANNOTATION

# Map fields under which every key is ours: keys no longer rendered are deleted.
_OWNED_MAPS = (("spec", "selector"),)
# Optional pod-spec fields the renderer writes only when the spec sets them.
_OPTIONAL_POD_FIELDS = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "runtimeClassName")
_POD_SPECS = (
    ("spec", "template", "spec"),
    ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec"),
    ("spec", "leaderWorkerTemplate", "workerTemplate", "spec"),
)


@dataclass(frozen=True)
class Applied:
    kind: str
    name: str
    action: str  # "created" | "patched" | "unchanged"
    live: dict[str, Any]


def _diff(live: Any, desired: Any) -> Any:
    """The merge patch turning `live` into `desired` for the keys desired has (None: equal)."""
    if isinstance(live, dict) and isinstance(desired, dict):
        patch = {}
        for key, want in desired.items():
            sub = _diff(live.get(key), want) if key in live else want
            if sub is not None:
                patch[key] = sub
        return patch or None
    return None if live == desired else desired


def _at(obj: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None  # type: ignore[assignment]
        if obj is None:
            return None
    return obj if isinstance(obj, dict) else None


def _set_null(patch: dict[str, Any], path: tuple[str, ...], key: str) -> None:
    node = patch
    for part in path:
        node = node.setdefault(part, {})
    node[key] = None


def merge_patch(live: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    patch = _diff(live, desired) or {}
    for path in _OWNED_MAPS:
        have, want = _at(live, path), _at(desired, path)
        if have is not None and want is not None:
            for key in have.keys() - want.keys():
                _set_null(patch, path, key)
    for path in _POD_SPECS:
        have, want = _at(live, path), _at(desired, path)
        if have is not None and want is not None:
            for key in _OPTIONAL_POD_FIELDS:
                if key in have and key not in want:
                    _set_null(patch, path, key)
    return patch


def live_hash(live: dict[str, Any]) -> str | None:
    return ((live.get("metadata") or {}).get("annotations") or {}).get(PLAN_HASH_ANNOTATION)


def apply_child(kube: Kube, desired: dict[str, Any], logger: logging.Logger) -> Applied:
    meta = desired["metadata"]
    kind, namespace, name = desired["kind"], meta["namespace"], meta["name"]
    live = kube.get(kind, namespace, name)
    if live is None:
        created = kube.create(desired)
        logger.info("Created %s", kind, extra={"name": name, "namespace": namespace})
        return Applied(kind, name, "created", created)
    if live_hash(live) == meta["annotations"][PLAN_HASH_ANNOTATION]:
        return Applied(kind, name, "unchanged", live)
    patched = kube.merge_patch(kind, namespace, name, merge_patch(live, desired))
    logger.info("Patched %s %s to plan-hash %s", kind, name, meta["annotations"][PLAN_HASH_ANNOTATION][:12])
    return Applied(kind, name, "patched", patched)
