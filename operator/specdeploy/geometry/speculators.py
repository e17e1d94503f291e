"""Speculators-format drafts (e.g. RedHatAI's `*-speculator.eagle3`): the LLM layer sits in
`transformer_layer_config` and vLLM renames the architecture per algorithm.

Restates vLLM's vllm/transformers_utils/configs/speculators/{base,algos}.py: a config
with `speculators_config` is parsed by SpeculatorsConfig, whose algorithm updater picks the
architecture vLLM loads (these drafts are not re-wrapped in EAGLEConfig)."""

from __future__ import annotations

from typing import Any

from specdeploy.vllm.drafts import SPECULATORS_DSPARK_ARCHITECTURES

EAGLE3_ARCHITECTURES = {"qwen3": "Eagle3Qwen3ForCausalLM", "llama": "Eagle3LlamaForCausalLM"}
PEAGLE_ARCHITECTURES = {"qwen3": "PeagleQwen3ForCausalLM", "llama": "PeagleLlamaForCausalLM"}
SUPPORTED_TYPES = ("eagle3", "peagle", "dflash", "dflash2", "dspark")


def is_speculators_config(raw: dict[str, Any]) -> bool:
    return raw.get("speculators_config") is not None


def speculators_text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The transformer layer config vLLM builds, with the architecture it will load.
    Raises ValueError with vLLM's reasons when the checkpoint is not one it accepts."""
    kind = raw.get("speculators_model_type")
    if kind not in SUPPORTED_TYPES:
        raise ValueError(f"speculators_model_type {kind!r} is not one vLLM supports ({', '.join(SUPPORTED_TYPES)})")
    layer = raw.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise ValueError("a speculators config must provide transformer_layer_config as an object")
    text = dict(layer)
    model_type = text.get("model_type", "llama")
    if kind in ("eagle3", "peagle"):
        table = EAGLE3_ARCHITECTURES if kind == "eagle3" else PEAGLE_ARCHITECTURES
        if model_type not in table:
            raise ValueError(f"{kind} speculators support transformer_layer_config.model_type {', '.join(table)}, not {model_type!r}")
        text["architectures"] = [table[model_type]]
    elif kind == "dflash":
        text["architectures"] = ["DFlashDraftModel"]
    elif kind == "dflash2":
        text["architectures"] = ["DFlash2DraftModel"]
    else:
        chosen = [a for a in raw.get("architectures") or [] if a in SPECULATORS_DSPARK_ARCHITECTURES]
        text["architectures"] = chosen or ["Qwen3DSparkModel"]
    if raw.get("draft_vocab_size") is not None:
        text["draft_vocab_size"] = raw["draft_vocab_size"]
    for key in ("dtype", "torch_dtype"):
        if key in raw and key not in text:
            text[key] = raw[key]
    return text


def speculators_source_path(raw: dict[str, Any], path: tuple[str, ...]) -> tuple[str, ...]:
    """Where a key of `speculators_text_config(raw)` is written in `raw`: transformer_layer_config,
    or the top-level keys copied into it."""
    layer = raw.get("transformer_layer_config") or {}
    if path[0] in layer or path[0] not in raw:
        return ("transformer_layer_config",) + path
    return path
