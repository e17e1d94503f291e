"""Apply the rendered children: create what is missing, patch back what differs from what we
render (also a hand edit: drift), and delete what we own but no longer render (prune).

"Differs" compares only the fields we render: a dict differs when one of our keys differs, a
list when its length or one of its items does (items compared the same way), so the defaults
an API server adds (`terminationMessagePath`, `protocol`, ...) never count as drift, and
fields we do not render stay as they are. A difference is sent as a JSON merge patch (lists
replace whole); a few fields we own but may stop rendering (scheduling fields, Service
selector keys) are set to null so a removed setting is removed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable

from specdeploy.controller.process.kube import Kube, KubeTemporaryError
from specdeploy.render.labels import MANAGED_BY, MANAGED_BY_LABEL, OWNER_LABEL, label_value

# Every kind a SpeculativeDeployment's children can have (kind names of controller/process/kube.py).
CHILD_KINDS = ("Deployment", "LeaderWorkerSet", "Service", "PodDisruptionBudget", "InferencePool")

# Map fields under which every key is ours: keys no longer rendered are deleted. An
# InferencePool's selector loses the leader's worker-index with a switch to one node per replica
# (a Deployment's selector is immutable, and never changes).
_OWNED_MAPS = (("spec", "selector"),)
_OWNED_MAPS_BY_KIND = {"InferencePool": (("spec", "selector", "matchLabels"),)}
# Optional fields of a child's spec the renderer writes only when the CR sets them.
_OPTIONAL_SPEC_FIELDS = ("endpointPickerRef",)
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
    action: str  # "created" | "patched" | "unchanged" | "deleted"
    live: dict[str, Any]


def covers(live: Any, desired: Any) -> bool:
    """True when `live` has every field of `desired` with the same value."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(k in live and covers(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(map(covers, live, desired))
    return live == desired


def _diff(live: Any, desired: Any) -> Any:
    """The merge patch turning `live` into `desired` for the keys desired has (None: covered)."""
    if isinstance(live, dict) and isinstance(desired, dict):
        patch = {}
        for key, want in desired.items():
            sub = _diff(live[key], want) if key in live else want
            if sub is not None:
                patch[key] = sub
        return patch or None
    return None if covers(live, desired) else desired


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
    """What to send so `live` renders as `desired` again; {} when nothing we own differs."""
    patch = _diff(live, desired) or {}
    for path in _OWNED_MAPS + _OWNED_MAPS_BY_KIND.get(desired.get("kind", ""), ()):
        have, want = _at(live, path), _at(desired, path)
        if have is not None and want is not None:
            for key in have.keys() - want.keys():
                _set_null(patch, path, key)
    optional = [(path, _OPTIONAL_POD_FIELDS) for path in _POD_SPECS] + [(("spec",), _OPTIONAL_SPEC_FIELDS)]
    for path, keys in optional:
        have, want = _at(live, path), _at(desired, path)
        if have is not None and want is not None:
            for key in keys:
                if key in have and key not in want:
                    _set_null(patch, path, key)
    return patch


def owned_by(live: dict[str, Any], uid: str) -> bool:
    """Ours to delete: our controller ownerReference and our managed-by label, both."""
    meta = live.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    ours = any(r.get("uid") == uid and r.get("controller") for r in refs if isinstance(r, dict))
    return ours and (meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY


async def apply_child(kube: Kube, desired: dict[str, Any], logger: logging.Logger, *, assume_missing: bool = False) -> Applied:
    """Create or patch one child. `assume_missing`: try the create first (one request instead
    of two for a new CR); an existing object (409) is read and patched as usual."""
    meta = desired["metadata"]
    kind, namespace, name = desired["kind"], meta["namespace"], meta["name"]
    live = None
    if assume_missing:
        try:
            created = await kube.create(desired)
        except KubeTemporaryError as exc:
            if exc.status != 409:
                raise
        else:
            logger.info("Created %s %s/%s", kind, namespace, name)
            return Applied(kind, name, "created", created)
    live = await kube.get(kind, namespace, name)
    if live is None:
        created = await kube.create(desired)
        logger.info("Created %s %s/%s", kind, namespace, name)
        return Applied(kind, name, "created", created)
    patch = merge_patch(live, desired)
    if not patch:
        return Applied(kind, name, "unchanged", live)
    patched = await kube.merge_patch(kind, namespace, name, patch)
    logger.info("Patched %s %s/%s (%s)", kind, namespace, name, ", ".join(_changed_paths(patch)))
    return Applied(kind, name, "patched", patched)


def _changed_paths(patch: Any, prefix: str = "", depth: int = 0) -> list[str]:
    """Short field paths of a patch for the log line (which fields were put back)."""
    if not isinstance(patch, dict) or depth >= 4:
        return [prefix or "."]
    out: list[str] = []
    for key, value in patch.items():
        out += _changed_paths(value, f"{prefix}.{key}" if prefix else key, depth + 1)
    return out[:8]


def owned_selector(cr_name: str) -> str:
    """Every child any version of this operator created for the CR carries these two labels
    (the owner label since the first release, with the CR name as its value where it fits), so
    a label list finds children under names we no longer render, e.g. pre-hash names."""
    return f"{MANAGED_BY_LABEL}={MANAGED_BY},{OWNER_LABEL}={label_value(cr_name)}"


async def owned_children(kube: Kube, namespace: str, cr_name: str, uid: str) -> list[dict[str, Any]]:
    """The children of every kind we create that carry our labels and our ownerReference."""
    found = []
    for kind in CHILD_KINDS:  # a real API server leaves kind out of list items
        found += [{**c, "kind": kind} for c in await kube.list(kind, namespace, owned_selector(cr_name)) if owned_by(c, uid)]
    return found


async def prune(kube: Kube, namespace: str, uid: str, owned: Iterable[dict[str, Any]], keep: set[tuple[str, str]],
                logger: logging.Logger) -> list[Applied]:
    """Delete what we own and no longer render (the Deployment after a switch to a
    LeaderWorkerSet, a child under an older operator's name). Objects without our
    ownerReference and label are never touched; the delete carries the object's uid."""
    deleted = []
    for live in owned:
        kind, meta = live.get("kind", ""), live.get("metadata") or {}
        name = meta.get("name", "")
        if (kind, name) in keep or not owned_by(live, uid):
            continue
        await kube.delete(kind, namespace, name, uid=meta.get("uid"))
        logger.info("Deleted %s %s/%s (no longer rendered)", kind, namespace, name)
        deleted.append(Applied(kind, name, "deleted", live))
    return deleted
