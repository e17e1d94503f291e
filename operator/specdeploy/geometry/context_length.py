"""The longest context vLLM will serve for a config, derived the way vLLM derives it.

Restates vllm/config/model.py `_get_and_verify_max_len` and the convertor's
`derive_max_model_len_and_key` (same in every supported release): the smallest of the length keys (a
`model_max_length` wins outright), 2048 when none is present, times the RoPE scaling factor
for scaling types that do not already count it in max_position_embeddings (not for Gemma 3)."""

from __future__ import annotations

from typing import Any

from specdeploy.vllm.hf_config import config_value as _get

LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
DEFAULT_MAX_LEN = 2048
# RoPE types whose factor is already part of max_position_embeddings.
FACTOR_INCLUDED = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})
LAYER_TYPE_KEYS = frozenset({"full_attention", "sliding_attention", "chunked_attention", "linear_attention", "attention"})


def _rope_parameters(config: Any) -> list[dict[str, Any]]:
    params = _get(config, "rope_parameters")
    if not isinstance(params, dict):
        params = _get(config, "rope_scaling")  # raw configs keep the pre-v5 name
    if not isinstance(params, dict) or not params:
        return []
    if set(params) <= LAYER_TYPE_KEYS:  # nested per layer type
        return [p for p in params.values() if isinstance(p, dict) and p]
    return [params]


def derived_max_model_len(config: Any, text: Any) -> int:
    """`config` is the top-level config (RoPE lives there for vLLM), `text` its LLM part."""
    lengths = [(key, _get(text, key)) for key in LENGTH_KEYS]
    found = [value for _, value in lengths if isinstance(value, (int, float)) and value > 0]
    derived: float = min(found) if found else DEFAULT_MAX_LEN
    if isinstance(_get(text, "model_max_length"), (int, float)) and _get(text, "model_max_length"):
        derived = _get(text, "model_max_length")
    rope = _rope_parameters(config) or _rope_parameters(text)
    model_type = str(_get(config, "model_type") or "")
    if rope and "gemma3" not in model_type:
        factor = 1.0
        for params in rope:
            rope_type = params.get("rope_type") or params.get("type") or "default"
            if rope_type not in FACTOR_INCLUDED:
                factor = params.get("factor", factor)
        derived *= factor if factor is not None else 1.0
    return int(derived)
