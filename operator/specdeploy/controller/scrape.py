"""The scraper's transport and trust: which pods it reads, and how much of a pod it reads.

A pod's /metrics is input from a workload, not from the operator: it may be slow, endless,
huge or malformed, and any pod in the namespace may carry the CR's labels. So:

- only pods the CR's workload owns are read: the controller owner chain with uids (a Deployment's
  pods through its ReplicaSets, a LeaderWorkerSet's leaders through its leader StatefulSet),
  never a label match alone (labels are free to copy; a uid is the API server's);
- a read has a byte limit (`SPECDEPLOY_METRICS_MAX_BYTES`, default 8 MiB: vLLM's own text is a
  few hundred KiB) and a total deadline (`SPECDEPLOY_METRICS_TIMEOUT_S`, default 5 s), not only
  a connect timeout: a body is streamed in chunks and the read stops at the limit, so memory
  never holds more than the limit per read, and a pod that trickles bytes costs its own
  deadline, never the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

import aiohttp

from specdeploy.controller.env import Number
from specdeploy.controller.kube import Kube
from specdeploy.render.labels import LWS_NAME_LABEL, selector_string

MAX_BYTES = Number("SPECDEPLOY_METRICS_MAX_BYTES", 8 * 1024 * 1024, minimum=1024, integer=True)
TIMEOUT_S = Number("SPECDEPLOY_METRICS_TIMEOUT_S", 5.0, minimum=0, exclusive=True)
_CHUNK = 64 * 1024
# The kind that owns a workload's pods, by workload kind (what its controller creates).
_POD_OWNER_KIND = {"Deployment": "ReplicaSet", "LeaderWorkerSet": "StatefulSet"}


class ScrapeError(Exception):
    """A pod's /metrics could not be read within the limits; the message says which."""


async def read_metrics(session: aiohttp.ClientSession, url: str, *, max_bytes: int, timeout_s: float) -> bytes:
    """The body of GET url, at most `max_bytes`, within `timeout_s` in all. Compressed bodies
    are refused rather than inflated (we ask for identity): a small gzip can inflate to GiBs."""
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url, headers={"Accept-Encoding": "identity"}, allow_redirects=False) as response:
                if response.status != 200:
                    raise ScrapeError(f"GET {url}: HTTP {response.status}")
                if response.headers.get("Content-Encoding", "identity").lower() != "identity":
                    raise ScrapeError(f"GET {url}: Content-Encoding {response.headers['Content-Encoding']!r}; only identity is read")
                if (response.content_length or 0) > max_bytes:
                    raise ScrapeError(f"GET {url}: body of {response.content_length} bytes is over the limit of {max_bytes}")
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


def _controller_uid(obj: Mapping[str, Any], kind: str) -> str | None:
    """The uid of obj's controlling owner when it is of `kind` (the API server's ownership)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True and ref.get("kind") == kind:
            return ref.get("uid") or None
    return None


def owned_pods(pods: list[Mapping[str, Any]], owners: list[Mapping[str, Any]], workload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pods whose controller chain leads to `workload` by uid: pod → ReplicaSet →
    Deployment, or pod → StatefulSet → LeaderWorkerSet. `owners` are the candidate
    ReplicaSets or StatefulSets; a pod that only carries the CR's labels is not among them."""
    kind, uid = workload.get("kind"), (workload.get("metadata") or {}).get("uid")
    owner_kind = _POD_OWNER_KIND.get(str(kind))
    if not uid or owner_kind is None:
        return []
    owner_uids = {(o.get("metadata") or {}).get("uid") for o in owners if _controller_uid(o, str(kind)) == uid}
    owner_uids.discard(None)
    return [p for p in pods if _controller_uid(p, owner_kind) in owner_uids]


async def list_owned_pods(kube: Kube, namespace: str, cr_name: str, workload_kind: str, workload_name: str) -> list[dict[str, Any]]:
    """The live workload's own pods (the API calls around `owned_pods`): none when the
    workload is gone."""
    workload = await kube.get(workload_kind, namespace, workload_name)
    if workload is None:
        return []
    owner_kind = _POD_OWNER_KIND.get(workload_kind)
    if owner_kind is None:
        return []
    # A Deployment copies its pod labels onto its ReplicaSets; LWS labels its StatefulSets by name.
    owner_selector = selector_string(cr_name) if workload_kind == "Deployment" else f"{LWS_NAME_LABEL}={workload_name}"
    owners = await kube.list(owner_kind, namespace, owner_selector)
    pods = await kube.list("Pod", namespace, selector_string(cr_name))
    return [dict(p) for p in owned_pods(pods, owners, workload)]
