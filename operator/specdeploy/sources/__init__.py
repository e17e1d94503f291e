"""Config fetching, the only I/O before the pure core: inline, ConfigMap, local path, Hub.

Errors carry the retry policy: `SourceUnavailable` is transient (retry with backoff),
`SourceInvalid` is permanent (the spec must change)."""

from specdeploy.sources.errors import SourceInvalid, SourceUnavailable
from specdeploy.sources.resolve import ConfigMapReader, load_model_ref, path_exists, resolve_model, resolve_pair

__all__ = ["ConfigMapReader", "SourceInvalid", "SourceUnavailable", "load_model_ref", "path_exists", "resolve_model", "resolve_pair"]
