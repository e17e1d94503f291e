"""config.json (and the safetensors index size) from the Hugging Face Hub.

Two ways to read, one error mapping. The CLI and the webhook use `hf_hub_download` (the
user's file cache, `local_only` for the cache alone). The operator reads straight into memory
with one bounded request per file (`direct=True`): no writable cache needed, a size cap on what
a repo can make it parse, and no client-side retry loop (huggingface_hub retries 5xx and
network errors for ~23 s), because the operator retries with its own backoff without holding
a worker.
"""

from __future__ import annotations

import json
from typing import Any, Callable, TypeVar

from specdeploy.findings import cut
from specdeploy.sources.errors import SourceInvalid, SourceUnavailable
from specdeploy.sources.local import MAX_CONFIG_BYTES, MAX_INDEX_BYTES, parse_config_text, weight_bytes_from_index

DIRECT_TIMEOUT_S = 10.0
T = TypeVar("T")


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether a TCP connection to the Hub endpoint opens: the CLI and the admission webhook
    ask once and, when it does not, read only the local cache instead of spending ~20 s in
    huggingface_hub's retries."""
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=timeout).close()
    except OSError:
        return False
    return True


def _mapped(repo_id: str, filename: str, revision: str | None, field: str, read: Callable[[], T]) -> T | None:
    """`read()`, with the Hub's errors turned into the retry policy (None: no such file)."""
    # Imported here: a verdict on local configs never pays for huggingface_hub's import.
    import httpx2
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HFValidationError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return read()
    except HFValidationError as exc:  # huggingface_hub checks the id before any request
        raise SourceInvalid(field, f"{repo_id[:120]!r} is neither a path nor a Hub repo id ('name' or 'org/name': letters, digits, "
                                   "'-', '_' and '.', at most 96 characters, not starting or ending with '-' or '.')") from exc
    except LocalEntryNotFoundError as exc:  # subclass of EntryNotFoundError: test it first
        raise SourceUnavailable(field, f"the Hub is unreachable for {repo_id} and nothing is cached ({type(exc).__name__})") from exc
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
        raise SourceUnavailable(field, f"the Hub failed for {repo_id}/{filename}: {cut(str(exc), 150)}") from exc
    except (OSError, httpx2.HTTPError) as exc:  # connection errors and timeouts
        raise SourceUnavailable(field, f"the Hub is unreachable for {repo_id}: {type(exc).__name__}: {cut(str(exc), 150)}") from exc


def _limit(filename: str) -> int:
    return MAX_CONFIG_BYTES if filename == "config.json" else MAX_INDEX_BYTES


def _too_large(repo_id: str, filename: str, field: str) -> SourceInvalid:
    return SourceInvalid(field, f"{repo_id}/{filename} is larger than {_limit(filename) // 2**20} MiB")


def _cached_file(repo_id: str, filename: str, revision: str | None, token: str | None, field: str, local_only: bool) -> str:
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(repo_id, filename, revision=revision, token=token, local_files_only=local_only)
    with open(path, "rb") as handle:
        data = handle.read(_limit(filename) + 1)
    if len(data) > _limit(filename):
        raise _too_large(repo_id, filename, field)
    return data.decode("utf-8", errors="replace")


def _direct(repo_id: str, filename: str, revision: str | None, token: str | None, field: str) -> str:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = hf_hub_url(repo_id, filename, revision=revision)
    with get_session().stream("GET", url, headers=build_hf_headers(token=token), timeout=DIRECT_TIMEOUT_S,
                              follow_redirects=True) as response:
        if response.status_code >= 400:
            response.read()
            hf_raise_for_status(response)
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > _limit(filename):
                raise _too_large(repo_id, filename, field)
    return body.decode("utf-8", errors="replace")


def read_hub(repo_id: str, revision: str | None, token: str | None, field: str, *, local_only: bool = False,
             direct: bool = False) -> tuple[dict[str, Any], int | None]:
    """`local_only`: the Hugging Face cache alone (no request); a miss is SourceUnavailable.
    `direct`: one bounded request per file, nothing written to disk (the operator)."""

    def text(filename: str) -> str | None:
        if direct:
            return _mapped(repo_id, filename, revision, field, lambda: _direct(repo_id, filename, revision, token, field))
        return _mapped(repo_id, filename, revision, field,
                       lambda: _cached_file(repo_id, filename, revision, token, field, local_only))

    config_text = text("config.json")
    if config_text is None:
        raise SourceInvalid(field, f"{repo_id} has no config.json")
    config = parse_config_text(config_text, field, f"{repo_id}/config.json")
    try:
        index_text = text("model.safetensors.index.json")
    except SourceUnavailable:
        if not local_only:
            raise
        index_text = None  # cached config without its index: the size is estimated instead
    weights = None
    if index_text is not None:
        try:
            weights = weight_bytes_from_index(json.loads(index_text))
        except (ValueError, RecursionError, AttributeError):
            weights = None  # an unreadable index only loses the exact weight size
    return config, weights
