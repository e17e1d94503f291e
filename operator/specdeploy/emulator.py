"""kmock's Kubernetes emulator with resourceVersions, as the demo, the integration tests and the
benchmark run it.

kmock 0.8 keeps whatever resourceVersion a client sends and never changes it. The real API
server gives every write a new one and refuses (409 Conflict) an update that names a
resourceVersion other than the current one. The operator depends on both: kopf tells the echo
of its own patch from older watch events by it (its consistency wait: without it kopf handles
the event of our status write, which came before its annotations patch, as a new change), and
the lease renewal (`controller/leader.py`) and the telemetry's k rollback carry the version
they read as a precondition.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import kmock
from kmock._internal import enums, k8s


class ResourceVersions:
    """Mixin for `kmock.KubernetesEmulator` (first in the bases): a new resourceVersion per
    create and update, and the update precondition."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()  # type: ignore[misc]
        object.__setattr__(self, "_versions", itertools.count(2))
        object.__setattr__(self, "_writes", asyncio.Lock())

    async def _handle(self, request: Any) -> Any:
        writes = request.action in (enums.action.CREATE, enums.action.UPDATE)
        if request.resource is None or not writes or not isinstance(request.data, dict):
            return await super()._handle(request)  # type: ignore[misc]
        async with self._writes:  # type: ignore[attr-defined]
            meta = request.data.get("metadata")
            if not isinstance(meta, dict):
                meta = request.data["metadata"] = {}
            wanted = meta.get("resourceVersion")
            if request.action == enums.action.UPDATE and wanted is not None:
                key = (request.resource, request.namespace, request.name)
                objects = self._objects  # type: ignore[attr-defined]
                stored = objects[key] if key in objects else None
                if stored is not None and not stored.deleted and stored.raw.get("metadata", {}).get("resourceVersion") != wanted:
                    return await self._render_error(k8s.KubernetesObjectConflictError())  # type: ignore[attr-defined]
            meta["resourceVersion"] = str(next(self._versions))  # type: ignore[attr-defined]
            return await super()._handle(request)  # type: ignore[misc]


class ApiServerEmulator(ResourceVersions, kmock.KubernetesEmulator):
    """kmock's emulator with resourceVersions."""
