"""config.json (and the safetensors index size) from the Hugging Face Hub.

Two ways to read, one error mapping. The CLI uses `hf_hub_download` (the user's file cache,
offline mode). The operator reads straight into memory with one bounded request per file
(`direct=True`): no writable cache needed, a size cap on what a repo can make it parse, and
no client-side retry loop (huggingface_hub retries 5xx and network errors for ~23 s), because
the operator retries with its own backoff without holding a worker.
"""

from __future__ import annotations

import json
from typing import Any, Callable, TypeVar

import httpx2
from huggingface_hub import hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from specdeploy.sources.errors import SourceInvalid, SourceUnavailable
from specdeploy.sources.local import MAX_CONFIG_BYTES, MAX_INDEX_BYTES, parse_config_text, weight_bytes_from_index

DIRECT_TIMEOUT_S = 10.0
T = TypeVar("T")


def _mapped(repo_id: str, filename: str, revision: str | None, field: str, read: Callable[[], T]) -> T | None:
    """`read()`, with the Hub's errors turned into the retry policy (None: no such file)."""
    try:
        return read()
    except LocalEntryNotFoundError as exc:  # subclass of EntryNotFoundError: test it first
        raise SourceUnavailable(field, f"the Hub is unreachable for {repo_id} and nothing is cached: {exc}") from exc
    except EntryNotFoundError:
        return None
    except GatedRepoError as exc:  # subclass of RepositoryNotFoundError
        raise SourceInvalid(field, f"{repo_id} is gated: accept its license and set hfTokenSecretRef") from exc
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise SourceInvalid(field, f"{repo_id}@{revision or 'main'} not found on the Hub (private repos need hfTokenSecretRef)") from exc
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status is not None and 400 <= status < 500 and status not in (408, 429):
            raise SourceInvalid(field, f"the Hub refused {repo_id}/{filename}: HTTP {status}") from exc
        raise SourceUnavailable(field, f"the Hub failed for {repo_id}/{filename}: {exc}") from exc
    except (OSError, httpx2.HTTPError) as exc:  # connection errors and timeouts
        raise SourceUnavailable(field, f"the Hub is unreachable for {repo_id}: {type(exc).__name__}: {exc}") from exc


def _limit(filename: str) -> int:
    return MAX_CONFIG_BYTES if filename == "config.json" else MAX_INDEX_BYTES


def _cached_file(repo_id: str, filename: str, revision: str | None, token: str | None, field: str) -> str:
    path = hf_hub_download(repo_id, filename, revision=revision, token=token)
    with open(path, "rb") as handle:
        data = handle.read(_limit(filename) + 1)
    if len(data) > _limit(filename):
        raise SourceInvalid(field, f"{repo_id}/{filename} is larger than {_limit(filename) // 2**20} MiB")
    return data.decode("utf-8", errors="replace")


def _direct(repo_id: str, filename: str, revision: str | None, token: str | None, field: str) -> str:
    url = hf_hub_url(repo_id, filename, revision=revision)
    headers = build_hf_headers(token=token)
    with get_session().stream("GET", url, headers=headers, timeout=DIRECT_TIMEOUT_S, follow_redirects=True) as response:
        if response.status_code >= 400:
            response.read()
            hf_raise_for_status(response)
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > _limit(filename):
                raise SourceInvalid(field, f"{repo_id}/{filename} is larger than {_limit(filename) // 2**20} MiB")
    return body.decode("utf-8", errors="replace")


def read_hub(repo_id: str, revision: str | None, token: str | None, field: str, *,
             direct: bool = False) -> tuple[dict[str, Any], int | None]:
    def text(filename: str) -> str | None:
        if direct:
            return _mapped(repo_id, filename, revision, field, lambda: _direct(repo_id, filename, revision, token, field))
        return _mapped(repo_id, filename, revision, field, lambda: _cached_file(repo_id, filename, revision, token, field))

    config_text = text("config.json")
    if config_text is None:
        raise SourceInvalid(field, f"{repo_id} has no config.json")
    config = parse_config_text(config_text, field, f"{repo_id}/config.json")
    index_text = text("model.safetensors.index.json")
    weights = None
    if index_text is not None:
        try:
            weights = weight_bytes_from_index(json.loads(index_text))
        except (ValueError, AttributeError):
            weights = None  # an unreadable index only loses the exact weight size
    return config, weights
