"""What the pinned vLLM release can load, as data: read by the validation rules.

The facts come from vLLM's own model registry and config code, extracted once by
`scripts/refresh_vllm_architectures.py` into `vllm_architectures.json` next to this module.
The operator never imports vLLM or torch; a parity test fails when the JSON is stale for
the vLLM version the parity suite installs.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable

_DATA_FILE = "vllm_architectures.json"


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    text = resources.files(__package__).joinpath(_DATA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


VLLM_VERSION: str = _data()["vllm_version"]
# model_types vLLM runs with MLA when kv_lora_rank is set
# (model_arch_config_convertor.py ModelArchConfigConvertorBase.is_deepseek_mla).
MLA_MODEL_TYPES: frozenset[str] = frozenset(_data()["mla_model_types"])
# Draft model_types vLLM treats as MTP (config/speculative.py MTPModelTypes).
MTP_MODEL_TYPES: frozenset[str] = frozenset(_data()["mtp_model_types"])
# Every `method` SpeculativeConfig accepts (config/speculative.py SpeculativeMethod).
SPECULATIVE_METHODS: frozenset[str] = frozenset(_data()["speculative_methods"])


def _arch(arch: str) -> dict[str, Any] | None:
    return _data()["architectures"].get(arch)


def supported_architectures() -> frozenset[str]:
    """All architecture names in vLLM's registry (models, drafts, Transformers backend)."""
    return frozenset(_data()["architectures"])


def is_supported_architecture(arch: str) -> bool:
    """vLLM's registry has this architecture, as a model or as a speculative draft."""
    return _arch(arch) is not None


def is_speculative_architecture(arch: str) -> bool:
    """A draft-only architecture (registry.py `_SPECULATIVE_DECODING_MODELS`)."""
    info = _arch(arch)
    return bool(info and info["speculative"])


def supports_pipeline_parallel(arch: str) -> bool:
    """The model class implements SupportsPP (ModelConfig.verify_with_parallel_config raises
    NotImplementedError for pipeline_parallel_size > 1 otherwise). Unknown archs: False."""
    info = _arch(arch)
    return bool(info and info["supports_pp"])


def is_mla_model_type(model_type: str | None) -> bool:
    """vLLM uses MLA for this model_type when the config also has kv_lora_rank."""
    return model_type in MLA_MODEL_TYPES


def is_mtp_model_type(model_type: str | None) -> bool:
    return model_type in MTP_MODEL_TYPES


def draft_architectures(method: str, architectures: Iterable[str]) -> list[str]:
    """The architecture names vLLM looks up for a draft under `method`.

    eagle/eagle3/dflash drafts are wrapped in EAGLEConfig, which renames the checkpoint's
    architectures (vllm/transformers_utils/configs/eagle.py): LlamaForCausalLM becomes
    EagleLlamaForCausalLM (eagle) or Eagle3LlamaForCausalLM (eagle3) or
    DFlashLlamaForCausalLM (dflash). Other methods keep the names as written."""
    archs = list(architectures)
    if method == "eagle":
        return [a if a.startswith("Eagle") else f"Eagle{a}" for a in archs]
    if method == "eagle3":
        return [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}" for a in archs]
    if method == "dflash":
        return [
            a if a.startswith("DFlash") or a.endswith("DFlash") or a == "LiLiCorrDraftModel"
            else f"DFlash{a}"
            for a in archs
        ]
    return archs


def any_supported(architectures: Iterable[str]) -> bool:
    """vLLM tries each listed architecture in turn (registry.py inspect_model_cls)."""
    return any(is_supported_architecture(a) for a in architectures)
