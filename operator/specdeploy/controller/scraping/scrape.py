"""The scraper's transport and trust: which pods it reads, and how much of a pod it reads.

A pod's /metrics is input from a workload, not from the operator: it may be slow, endless,
huge or malformed, and any pod in the namespace may carry the CR's labels. So:

- only pods the CR's workload owns are read: the controller owner chain with uids (a Deployment's
  pods through its ReplicaSets, a LeaderWorkerSet's leaders through its leader StatefulSet),
  never a label match alone (labels are free to copy; a uid is the API server's). The pods come
  from the operator's pod watch (`PodIndex`), the owners' uids from two reads per CR, made again
  only when a pod names an owner not seen yet: a round costs no API call in the steady state;
- a read has a byte limit (`SPECDEPLOY_METRICS_MAX_BYTES`, default 8 MiB: vLLM's own text is a
  few hundred KiB) and a total deadline (`SPECDEPLOY_METRICS_TIMEOUT_S`, default 5 s), not only
  a connect timeout: a body is streamed in chunks and the read stops at the limit, so memory
  never holds more than the limit per read times the bodies received at once, and a pod that
  trickles bytes costs its own deadline, never the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Mapping

import aiohttp

from specdeploy.controller.process.env import Number
from specdeploy.controller.process.kube import Kube
from specdeploy.render.labels import LWS_NAME_LABEL, LWS_WORKER_INDEX_LABEL, label_value, selector_labels, selector_string

MAX_BYTES = Number("SPECDEPLOY_METRICS_MAX_BYTES", 8 * 1024 * 1024, minimum=1024, integer=True)
TIMEOUT_S = Number("SPECDEPLOY_METRICS_TIMEOUT_S", 5.0, minimum=0, exclusive=True)
_CHUNK = 64 * 1024
# The kind that owns a workload's pods, by workload kind (what its controller creates).
_POD_OWNER_KIND = {"Deployment": "ReplicaSet", "LeaderWorkerSet": "StatefulSet"}
# Of a CR's selector labels (render.labels.selector_labels), the one that names the CR.
_INSTANCE_LABEL = "app.kubernetes.io/instance"


class ScrapeError(Exception):
    """A pod's /metrics could not be read within the limits; the message says which."""


async def read_metrics(session: aiohttp.ClientSession, url: str, *, max_bytes: int, timeout_s: float,
                       body_slot: contextlib.AbstractAsyncContextManager[Any] | None = None) -> bytes:
    """The body of GET url, at most `max_bytes`, within `timeout_s` in all. Compressed bodies
    are refused rather than inflated (we ask for identity): a small gzip can inflate to GiBs.
    The body is received inside `body_slot` (the operator's bound on bodies in memory): a pod
    that never answers holds a connection, not a body's worth of memory."""
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url, headers={"Accept-Encoding": "identity"}, allow_redirects=False) as response:
                if response.status != 200:
                    raise ScrapeError(f"GET {url}: HTTP {response.status}")
                if response.headers.get("Content-Encoding", "identity").lower() != "identity":
                    raise ScrapeError(f"GET {url}: Content-Encoding {response.headers['Content-Encoding']!r}; only identity is read")
                if (response.content_length or 0) > max_bytes:
                    raise ScrapeError(f"GET {url}: body of {response.content_length} bytes is over the limit of {max_bytes}")
                async with body_slot or contextlib.nullcontext():
                    body = bytearray()
                    async for chunk in response.content.iter_chunked(_CHUNK):
                        if len(body) + len(chunk) > max_bytes:
                            raise ScrapeError(f"GET {url}: body over the limit of {max_bytes} bytes (read stopped)")
                        body += chunk
                    return bytes(body)
    except TimeoutError:
        raise ScrapeError(f"GET {url}: no complete answer within {timeout_s:g} s") from None
    except aiohttp.ClientConnectorError as exc:  # say why (refused, unreachable), not aiohttp's wrapper
        raise ScrapeError(f"GET {url}: cannot connect: {type(exc.os_error).__name__}") from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise ScrapeError(f"GET {url}: {type(exc).__name__}: {exc}") from None


def session() -> aiohttp.ClientSession:
    """A client for one round of scrapes: no cookies kept, no connection reused, no inflation."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True), auto_decompress=False,
                                 cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)


def controller_uid(obj: Mapping[str, Any], kind: str) -> str | None:
    """The uid of obj's controlling owner when it is of `kind` (the API server's ownership)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True and ref.get("kind") == kind:
            return ref.get("uid") or None
    return None


def pod_owner_kind(workload_kind: str) -> str | None:
    """The kind whose objects own a workload's pods (ReplicaSet, StatefulSet); None: not a workload."""
    return _POD_OWNER_KIND.get(workload_kind)


def controlled_uids(owners: list[Mapping[str, Any]], workload: Mapping[str, Any]) -> frozenset[str]:
    """The uids of the `owners` (ReplicaSets or StatefulSets) that `workload` controls by uid:
    pod → ReplicaSet → Deployment, or pod → StatefulSet → LeaderWorkerSet."""
    kind, uid = str(workload.get("kind")), (workload.get("metadata") or {}).get("uid")
    if not uid or kind not in _POD_OWNER_KIND:
        return frozenset()
    return frozenset(u for o in owners if controller_uid(o, kind) == uid and (u := (o.get("metadata") or {}).get("uid")))


async def workload_owners(kube: Kube, namespace: str, cr_name: str, workload_kind: str, workload_name: str) -> frozenset[str]:
    """The uids of the live workload's ReplicaSets or StatefulSets (two reads): a pod is the
    workload's when its controller is one of them. None when the workload is gone."""
    workload = await kube.get(workload_kind, namespace, workload_name)
    owner_kind = pod_owner_kind(workload_kind)
    if workload is None or owner_kind is None:
        return frozenset()
    # A Deployment copies its pod labels onto its ReplicaSets; LWS labels its StatefulSets by name.
    owner_selector = selector_string(cr_name) if workload_kind == "Deployment" else f"{LWS_NAME_LABEL}={workload_name}"
    return controlled_uids(await kube.list(owner_kind, namespace, owner_selector), workload)


@dataclass
class _Entry:
    key: tuple[str, str]  # (namespace, the pods' instance label)
    pod: dict[str, Any]
    seq: int  # the index's event count when this pod was last seen


class PodIndex:
    """The serving pods, by namespace and the CR they serve (their instance label), as the
    operator's pod watch delivers them (kopf's, filtered to ours by the API server): a round
    reads its CR's pods here, not through a LIST. Each pod is kept as the few fields the scraper
    reads (`slim_pod`).

    A watch that restarts after its resourceVersion expired lists again and reports what it
    lists, but not what was deleted in between: `resync` drops what a fresh LIST no longer holds
    and no event has touched since it began."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], _Entry] = {}  # (namespace, pod name) -> entry
        self._by_cr: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}  # (namespace, instance) -> {pod name: pod}
        self._seq = 0

    def observe(self, pod: Mapping[str, Any], type_: str | None) -> None:
        """One watch event (ADDED, MODIFIED, DELETED, or None for a listed pod)."""
        meta = pod.get("metadata") or {}
        where = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        self._seq += 1
        self._drop(where)
        labels = meta.get("labels") or {}
        instance = str(labels.get(_INSTANCE_LABEL) or "")
        if type_ == "DELETED" or not instance or any(labels.get(k) != v for k, v in selector_labels(instance).items()):
            return
        key = (where[0], instance)
        slim = slim_pod(pod)
        self._pods[where] = _Entry(key, slim, self._seq)
        self._by_cr.setdefault(key, {})[where[1]] = slim

    def of(self, namespace: str, cr_name: str) -> list[dict[str, Any]]:
        """The CR's pods (by their instance label: any pod may carry it, so owners are checked after)."""
        return list((self._by_cr.get((namespace, label_value(cr_name))) or {}).values())

    def mark(self) -> int:
        """Taken before a resync's LIST: pods seen after it are kept whatever the LIST says."""
        return self._seq

    def resync(self, namespace: str, listed: list[Mapping[str, Any]], mark: int) -> int:
        """Drop the namespace's pods that a LIST begun at `mark` does not hold and no event has
        touched since; never adds one (a pod deleted after the LIST would come back). How many went."""
        names = {str((p.get("metadata") or {}).get("name", "")) for p in listed}
        gone = [w for w, e in self._pods.items() if w[0] == namespace and w[1] not in names and e.seq <= mark]
        for where in gone:
            self._drop(where)
        return len(gone)

    def _drop(self, where: tuple[str, str]) -> None:
        entry = self._pods.pop(where, None)
        if entry is None:
            return
        pods = self._by_cr.get(entry.key) or {}
        pods.pop(where[1], None)
        if not pods:
            self._by_cr.pop(entry.key, None)


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the scraper reads of a pod (name, LWS worker index, deletion, controller owners,
    readiness, IP, the http port), in containers of its own: not the whole pod for every pod."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    worker = (meta.get("labels") or {}).get(LWS_WORKER_INDEX_LABEL)
    ports = [{"name": "http", "containerPort": p["containerPort"]}
             for c in (pod.get("spec") or {}).get("containers") or [] for p in c.get("ports") or []
             if isinstance(p, dict) and p.get("name") == "http" and p.get("containerPort")]
    slim: dict[str, Any] = {
        "metadata": {"name": meta.get("name", ""), "labels": {LWS_WORKER_INDEX_LABEL: worker} if worker is not None else {},
                     "ownerReferences": [{"kind": r.get("kind"), "uid": r.get("uid"), "controller": True}
                                         for r in meta.get("ownerReferences") or [] if isinstance(r, dict) and r.get("controller") is True]},
        "spec": {"containers": [{"ports": ports[:1]}]},
        "status": {"podIP": status.get("podIP"),
                   "conditions": [{"type": "Ready", "status": c.get("status")} for c in status.get("conditions") or []
                                  if isinstance(c, dict) and c.get("type") == "Ready"]},
    }
    if meta.get("deletionTimestamp"):
        slim["metadata"]["deletionTimestamp"] = meta["deletionTimestamp"]
    return slim
