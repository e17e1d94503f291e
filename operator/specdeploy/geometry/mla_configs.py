"""MLA-aware config classes for drafts that transformers does not know.

Multi-head latent attention declares its head dimensions independently
(q_lora_rank, kv_lora_rank, qk_nope/rope_head_dim, v_head_dim), so the plain-MHA rule
`hidden_size % num_attention_heads == 0` must never apply to it. transformers'
DeepseekV2Config enforces that rule through a @strict validator; DeepseekV3Config does
not. This is the bug fixed by vLLM PR #54005 (vllm/transformers_utils/configs/k3_dspark.py).
Built on DeepseekV3Config's generated data (geometry/hf_classes.py), not on transformers.
"""

from __future__ import annotations

from typing import Any, Callable

from specdeploy.geometry.hf_classes import HFConfig, build

BASE_CLASS = "DeepseekV3Config"


def _deepseek_v3(raw: dict[str, Any], model_type: str) -> HFConfig:
    """DeepseekV3Config(**raw) under another model_type (vLLM's _CONFIG_REGISTRY aliases)."""
    config = build(BASE_CLASS, raw)
    if model_type in ("kimi_k2", "k3_dspark"):  # our subclasses' own model_type; deepseek_v32 reads as deepseek_v3
        config["model_type"] = model_type
        config.class_name = {"kimi_k2": "KimiK2Config"}.get(model_type, BASE_CLASS)
    return config


def k3_dspark(raw: dict[str, Any]) -> HFConfig:
    """Kimi-K3 MLA DSpark draft (model_type `k3_dspark`, architecture `K3DSparkModel`).

    Mirrors vLLM 0.32's class: dense (0 experts), default RoPE parameters, and the
    same rejections, each with "MLA DSpark" in the message."""
    kwargs = dict(raw)
    # DeepseekV3Config defaults to a MoE topology; the draft is dense.
    for key in ("n_routed_experts", "n_shared_experts", "num_experts_per_tok"):
        kwargs.setdefault(key, 0)
    theta = kwargs.pop("rope_theta", 50000.0)
    rope_parameters = dict(kwargs.get("rope_parameters") or {})
    rope_parameters.setdefault("rope_type", "default")
    rope_parameters.setdefault("rope_theta", theta)
    kwargs["rope_parameters"] = rope_parameters
    flags = {name: kwargs.pop(name, False) for name in ("mla_use_nope", "mla_use_output_gate", "mla_use_qk_norm")}
    config = _deepseek_v3(kwargs, "k3_dspark")
    config.class_name = "K3DSparkConfig"
    config.update(flags)
    unsupported = [name for name in (*flags, "dspark_bonus_anchor") if config.get(name)]
    if config.get("q_lora_rank") is None:
        unsupported.append("q_lora_rank=None")
    if unsupported:
        raise ValueError("MLA DSpark does not support " + ", ".join(unsupported) + ".")
    config["draft_vocab_size"] = config.get("draft_vocab_size") or config.get("vocab_size")
    if config["draft_vocab_size"] != config.get("vocab_size"):
        raise ValueError("MLA DSpark requires draft_vocab_size to equal vocab_size when "
                         "sharing the target embedding and LM head.")
    target_layer_ids = config.get("target_layer_ids")
    if not target_layer_ids or config.get("num_target_layers") != len(target_layer_ids):
        raise ValueError("MLA DSpark requires non-empty target_layer_ids and a matching num_target_layers.")
    return config


# model_type -> builder, for the MLA families whose checkpoints name a type transformers
# does not register (or registers with an MHA-only validator).
MLA_CONFIG_BUILDERS: dict[str, tuple[str, Callable[[dict[str, Any]], HFConfig]]] = {
    "k3_dspark": ("K3DSparkConfig", k3_dspark),
    "kimi_k2": ("KimiK2Config", lambda raw: _deepseek_v3(raw, "kimi_k2")),
    "deepseek_v32": (BASE_CLASS, lambda raw: _deepseek_v3(raw, "deepseek_v32")),
}
