"""config.json (and the safetensors index size) from the Hugging Face Hub."""

from __future__ import annotations

import json
from typing import Any

from specdeploy.sources.errors import SourceInvalid, SourceUnavailable
from specdeploy.sources.local import parse_config_text, weight_bytes_from_index


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


def _download(repo_id: str, filename: str, revision: str | None, token: str | None, field: str, local_only: bool = False) -> str | None:
    # Imported here: a verdict on local configs never pays for huggingface_hub's import.
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return hf_hub_download(repo_id, filename, revision=revision, token=token, local_files_only=local_only)
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
    except OSError as exc:  # connection errors and timeouts surface as OSError subclasses
        raise SourceUnavailable(field, f"the Hub is unreachable for {repo_id}: {exc}") from exc


def read_hub(repo_id: str, revision: str | None, token: str | None, field: str, *, local_only: bool = False) -> tuple[dict[str, Any], int | None]:
    """`local_only`: the Hugging Face cache alone (no request); a miss is SourceUnavailable."""
    config_path = _download(repo_id, "config.json", revision, token, field, local_only)
    if config_path is None:
        raise SourceInvalid(field, f"{repo_id} has no config.json")
    with open(config_path) as handle:
        config = parse_config_text(handle.read(), field, f"{repo_id}/config.json")
    try:
        index_path = _download(repo_id, "model.safetensors.index.json", revision, token, field, local_only)
    except SourceUnavailable:
        if not local_only:
            raise
        index_path = None  # cached config without its index: the size is estimated instead
    weights = None
    if index_path is not None:
        with open(index_path) as handle:
            weights = weight_bytes_from_index(json.load(handle))
    return config, weights
