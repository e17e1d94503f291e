"""Speculators-format drafts (e.g. RedHatAI's `*-speculator.eagle3`): the LLM layer sits in
`transformer_layer_config` and vLLM renames the architecture per algorithm.

Restates vLLM's vllm/transformers_utils/configs/speculators/{base,algos}.py: a config
with `speculators_config` is parsed by SpeculatorsConfig, whose algorithm updater picks the
architecture vLLM loads (these drafts are not re-wrapped in EAGLEConfig)."""

from __future__ import annotations

from typing import Any

from specdeploy.vllm.drafts import SPECULATORS_ARCHITECTURES


def is_speculators_config(raw: dict[str, Any]) -> bool:
    return raw.get("speculators_config") is not None


def speculators_text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The transformer layer config vLLM builds, with the architecture it will load.
    Raises ValueError with vLLM's reasons when the checkpoint is not one it accepts."""
    kind = raw.get("speculators_model_type")
    if kind not in SPECULATORS_ARCHITECTURES:
        raise ValueError(f"speculators_model_type {kind!r} is not one vLLM supports ({', '.join(SPECULATORS_ARCHITECTURES)})")
    layer = raw.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise ValueError("a speculators config must provide transformer_layer_config as an object")
    text = dict(layer)
    model_type = text.get("model_type", "llama")
    archs = SPECULATORS_ARCHITECTURES[kind]
    if isinstance(archs, dict):
        if model_type not in archs:
            raise ValueError(f"{kind} speculators support transformer_layer_config.model_type {', '.join(archs)}, not {model_type!r}")
        text["architectures"] = [archs[model_type]]
    elif isinstance(archs, str):
        text["architectures"] = [archs]
    else:
        chosen = [a for a in raw.get("architectures") or [] if a in archs]
        text["architectures"] = chosen or [archs[0]]
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
