"""Every layer vLLM splits over TP in the architectures specdeploy supports, and the rule that
covers it (or why none is needed).

The sites and builds come from scripts/audit_tp_layers.py, run in each release's venv
(data/parallel_layers-<version>.json): it walks each architecture's class in vLLM's source and
records each parallel layer built, the width it splits and where it stands (file and line)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data"

# What specdeploy judges: the fixtures' targets and drafts, under the names vLLM looks up
# (EAGLE renames, DSpark classes), the MTP modules those targets give, and every architecture
# a rule of tp_splits.py names.
AUDITED_ARCHITECTURES = frozenset({
    # dense and MoE targets (and the drafts built from them, draft_model)
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Qwen2MoeForCausalLM", "MixtralForCausalLM", "GptOssForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM",
    "GlmMoeDsaForCausalLM", "Ernie4_5_MoeForCausalLM", "Llama4ForCausalLM",
    # hybrid (linear attention, state-space) targets
    "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "JambaForCausalLM", "Mamba2ForCausalLM",
    "FalconMambaForCausalLM", "FalconH1ForCausalLM", "Zamba2ForCausalLM", "NemotronHForCausalLM",
    "GraniteMoeHybridForCausalLM",
    # multimodal targets: their vision towers and projectors
    "KimiK3ForConditionalGeneration", "KimiK25ForConditionalGeneration", "KimiVLForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Glm4vForConditionalGeneration", "Glm4vMoeForConditionalGeneration", "Gemma3ForConditionalGeneration",
    "Llama4ForConditionalGeneration", "Mistral3ForConditionalGeneration",
    # drafts: EAGLE, EAGLE-3, DFlash, DSpark heads, Medusa, MLP speculator
    "EagleLlamaForCausalLM", "Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3Qwen3ForCausalLM",
    "DFlashDraftModel", "DFlashQwen3ForCausalLM", "Qwen3DSparkModel", "K3DSparkModel", "DSparkDraftModel",
    "MedusaModel", "MLPSpeculatorPreTrainedModel",
    # MTP modules of the targets above
    "DeepSeekMTPModel", "DeepseekV32MTPModel", "DeepSeekV4MTPModel", "KimiK3MTPModel", "Qwen3NextMTP",
    "Qwen3_5MTP", "Qwen3_5MoeMTP", "ErnieMTPModel", "NemotronHMTPModel",
})


def audit_path(version: str) -> Path:
    """Where scripts/audit_tp_layers.py keeps a release's audit."""
    return DATA_DIR / f"parallel_layers-{version}.json"


@lru_cache(maxsize=None)
def audit(version: str) -> dict[str, Any]:
    """A release's audit (sites, builds, architectures)."""
    return json.loads(audit_path(version).read_text(encoding="utf-8"))


def audit_key(version: str, architecture: str, key: str) -> bool:
    """Whether the release's audit reaches the site or build `key` from `architecture`'s class."""
    try:
        reached = audit(version)["architectures"].get(architecture)
    except FileNotFoundError:
        return False
    return reached is not None and (key in reached["sites"] or key in reached["builds"])


def cite(version: str, key: str) -> str:
    """`file:line Class.attr` of an audited site or build in the release."""
    path, _, where = key.partition("::")
    data = audit(version)
    entry = data["sites"].get(key) or data["builds"].get(key) or {}
    line = f":{entry['line']}" if "line" in entry else ""
    return f"{path}{line} {where.split('->')[0]}, vLLM {version}"


def audited(version: str, architecture: str) -> bool:
    """Whether the release's audit holds the architecture (its registry has it and we audit it)."""
    try:
        return architecture in audit(version)["architectures"]
    except FileNotFoundError:
        return False
