"""vLLM's facts, per release: the one layer that names a vLLM version or restates a vLLM list.

`data/<version>.json` is generated from each release's own source by
`scripts/refresh_vllm_facts.py`; the modules beside it hold vLLM logic the data cannot carry
(`drafts`, `mtp`, `server_args`), and `versions` picks the release that judges a spec."""

from specdeploy.vllm.facts import BatchDefaults, ServerFlag, VllmFacts
from specdeploy.vllm.versions import (
    DEFAULT_IMAGE,
    DEFAULT_VERSION,
    NEWEST_VERSION,
    RELEASE_REFUSALS,
    SUPPORTED_VERSIONS,
    VERSION_UNKNOWN,
    judging_version,
    rule_set,
)

__all__ = [
    "BatchDefaults", "DEFAULT_IMAGE", "DEFAULT_VERSION", "NEWEST_VERSION", "RELEASE_REFUSALS", "SUPPORTED_VERSIONS", "ServerFlag",
    "VERSION_UNKNOWN", "VllmFacts",
    "judging_version", "rule_set",
]
