"""kmock's Kubernetes emulator, indexed for benchmarks (kmock 0.8 does not scale).

Out of the box every request is matched against each reaction through filters that walk the
recorded request history, and every object lookup scans all stored objects: about 28 s of the
emulator's own CPU for 50 CRs. For the benchmark the emulator must not be the bottleneck:

- object lookups by name are one dict access (`__get_objs`, which kmock name-mangles);
- the request history kmock scans per request is only that request (`_RecentRequests`);
- requests are counted per (user agent, method) instead, for "requests per create".

Behaviour is otherwise kmock's own (the same create/patch/watch/delete code paths), with the
resourceVersions of `specdeploy.emulator` that kopf's consistency wait needs.
"""

from __future__ import annotations

import collections
import contextvars
from typing import Any

import kmock
from kmock._internal import k8s, rendering

from specdeploy.emulator import ResourceVersions


_SERVING: contextvars.ContextVar[Any] = contextvars.ContextVar("serving")


class _RecentRequests(list):  # type: ignore[type-arg]
    """kmock decides whether a reaction applies to a request by scanning the whole request
    history through the reaction's filters for that request (by identity): every request
    costs more than the last. Here the task serving a request sees only that request in the
    history (a context variable: aiohttp serves each request in its own task), and the
    history kept is cut to the last 256."""

    keep = 256

    def append(self, request: Any) -> None:
        super().append(request)
        _SERVING.set(request)
        if len(self) > 2 * self.keep:
            del self[: len(self) - self.keep]

    def __iter__(self) -> Any:
        serving = _SERVING.get(None)
        return iter((serving,)) if serving is not None else super().__iter__()


class IndexedEmulator(ResourceVersions, kmock.KubernetesEmulator):
    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.request_counts: collections.Counter[tuple[str, str]] = collections.Counter()
        object.__setattr__(self, "_requests", _RecentRequests())

    async def __call__(self, raw_request: Any) -> Any:
        agent = raw_request.headers.get("User-Agent", "")
        who = "operator" if ("kopf" in agent or "OpenAPI" in agent or "specdeploy" in agent) else "other"
        self.request_counts[(who, raw_request.method.upper())] += 1
        return await super().__call__(raw_request)

    def _KubernetesEmulator__get_objs(self, request: rendering.Request, strict: bool) -> list[Any]:  # noqa: N802
        if request.name is not None and request.resource is not None:
            key = (request.resource, request.namespace, request.name)
            try:
                return [self._objects[key]] if key in self._objects else []
            except KeyError:
                return []
        return k8s.KubernetesEmulator._KubernetesEmulator__get_objs(self, request, strict)  # type: ignore[attr-defined]
