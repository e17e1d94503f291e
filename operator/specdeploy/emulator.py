"""kmock's Kubernetes emulator with resourceVersions, as the demo, the integration tests and the
benchmark run it.

kmock 0.8 keeps whatever resourceVersion a client sends and never changes it. The real API
server gives every write a new one and refuses (409 Conflict) an update that names a
resourceVersion other than the current one. The operator depends on both: kopf tells the echo
of its own patch from older watch events by it (its consistency wait: without it kopf handles
the event of our status write, which came before its annotations patch, as a new change), and
the lease renewal (`controller/process/leader.py`) and the telemetry's k rollback carry the version
they read as a precondition.

kmock also ignores `metadata.generateName`: every create without a name is stored under the
name None, so the second one is refused 409. kopf posts every Event with
`generateName: kopf-event-`, so all but the first Event of a run were lost. The API server
names such an object itself; so does `ResourceVersions` (`generated_name`). It also gives a
created object a uid, as the API server does: the telemetry trusts a pod only through the
uids of its owner chain.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from typing import Any

import kmock
from kmock._internal import enums, k8s


# k8s.io/apiserver/pkg/storage/names/generate.go (SimpleNameGenerator): the prefix cut to
# 63 - 5 characters, then 5 characters of utilrand.String
# (k8s.io/apimachinery/pkg/util/rand/rand.go: lowercase consonants and digits, no vowels and
# no 0/1/3 so that no generated name spells a word).
_NAME_MAX = 63
_RANDOM_LENGTH = 5
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_NAME_REQUIRED = k8s.KubernetesError(
    status=422, reason="Invalid", message="metadata.name: Required value: name or generateName is required",
    details={"causes": [{"reason": "FieldValueRequired", "message": "Required value: name or generateName is required",
                         "field": "metadata.name"}]})


def generated_name(prefix: str, taken: Any = ()) -> str:
    """A name for an object created with `generateName: prefix`, as the API server makes one,
    not in `taken` (the API server retries a collision itself; the client never sees it)."""
    base = prefix[: _NAME_MAX - _RANDOM_LENGTH]
    while True:
        name = base + "".join(random.choice(_ALPHABET) for _ in range(_RANDOM_LENGTH))
        if name not in taken:
            return name


class ResourceVersions:
    """Mixin for `kmock.KubernetesEmulator` (first in the bases): a new resourceVersion per
    create and update, the update precondition, and names for creates by `generateName`."""

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
            if request.action == enums.action.CREATE and not meta.get("uid"):
                meta["uid"] = str(uuid.uuid4())  # the API server gives every object one (owner chains need it)
            if request.action == enums.action.CREATE and not meta.get("name"):
                prefix = meta.get("generateName")
                if not prefix or not isinstance(prefix, str):
                    return await self._render_error(_NAME_REQUIRED)  # type: ignore[attr-defined]
                namespace = request.namespace or meta.get("namespace")
                meta["name"] = generated_name(prefix, _Live(self._objects, request.resource, namespace))  # type: ignore[attr-defined]
            wanted = meta.get("resourceVersion")
            if request.action == enums.action.UPDATE and wanted is not None:
                key = (request.resource, request.namespace, request.name)
                objects = self._objects  # type: ignore[attr-defined]
                stored = objects[key] if key in objects else None
                if stored is not None and not stored.deleted and stored.raw.get("metadata", {}).get("resourceVersion") != wanted:
                    return await self._render_error(k8s.KubernetesObjectConflictError())  # type: ignore[attr-defined]
            meta["resourceVersion"] = str(next(self._versions))  # type: ignore[attr-defined]
            return await super()._handle(request)  # type: ignore[misc]


class _Live:
    """`name in _Live(...)`: an object of that name exists (not deleted) in the namespace."""

    def __init__(self, objects: Any, resource: Any, namespace: str | None) -> None:
        self.objects, self.resource, self.namespace = objects, resource, namespace

    def __contains__(self, name: object) -> bool:
        key = (self.resource, self.namespace, name)
        return key in self.objects and not self.objects[key].deleted


class ApiServerEmulator(ResourceVersions, kmock.KubernetesEmulator):
    """kmock's emulator with resourceVersions."""
