"""The oracle for geometry/hf_classes.py: a config parsed by transformers itself, the way the
verdict parsed it before the classes' data was generated (transformers' classes, and the MLA
draft classes built on DeepseekV3Config as vLLM builds them). Tests only."""

from __future__ import annotations

import copy
from typing import Any

from transformers import CONFIG_MAPPING, DeepseekV3Config, PretrainedConfig


class K3DSparkConfig(DeepseekV3Config):
    """Kimi-K3 MLA DSpark draft (model_type `k3_dspark`, architecture `K3DSparkModel`).

    Mirrors vLLM 0.32's class: dense (0 experts), default RoPE parameters, and the
    same rejections, each with "MLA DSpark" in the message."""

    model_type = "k3_dspark"
    has_no_defaults_at_init = True

    def __init__(
        self,
        mla_use_nope: bool = False,
        mla_use_output_gate: bool = False,
        mla_use_qk_norm: bool = False,
        rope_theta: float = 50000.0,
        **kwargs,
    ) -> None:
        # DeepseekV3Config defaults to a MoE topology; the draft is dense.
        kwargs.setdefault("n_routed_experts", 0)
        kwargs.setdefault("n_shared_experts", 0)
        kwargs.setdefault("num_experts_per_tok", 0)
        rope_parameters = dict(kwargs.get("rope_parameters") or {})
        rope_parameters.setdefault("rope_type", "default")
        rope_parameters.setdefault("rope_theta", rope_theta)
        kwargs["rope_parameters"] = rope_parameters

        super().__init__(**kwargs)
        self.mla_use_nope = mla_use_nope
        self.mla_use_output_gate = mla_use_output_gate
        self.mla_use_qk_norm = mla_use_qk_norm

        unsupported = [
            name
            for name in ("mla_use_nope", "mla_use_output_gate", "mla_use_qk_norm", "dspark_bonus_anchor")
            if getattr(self, name, False)
        ]
        if self.q_lora_rank is None:
            unsupported.append("q_lora_rank=None")
        if unsupported:
            raise ValueError("MLA DSpark does not support " + ", ".join(unsupported) + ".")

        self.draft_vocab_size = getattr(self, "draft_vocab_size", None) or self.vocab_size
        if self.draft_vocab_size != self.vocab_size:
            raise ValueError(
                "MLA DSpark requires draft_vocab_size to equal vocab_size when "
                "sharing the target embedding and LM head."
            )

        target_layer_ids = getattr(self, "target_layer_ids", None)
        if not target_layer_ids or getattr(self, "num_target_layers", None) != len(target_layer_ids):
            raise ValueError(
                "MLA DSpark requires non-empty target_layer_ids and a matching num_target_layers."
            )


class KimiK2Config(DeepseekV3Config):
    """Kimi-K2 is DeepSeek-V3's architecture; vLLM parses it with DeepseekV3Config
    (vllm/transformers_utils/config.py _CONFIG_REGISTRY), never with V2's MHA rule."""

    model_type = "kimi_k2"


# model_type -> class, for the MLA families whose checkpoints name a type transformers
# does not register (or registers with an MHA-only validator).
MLA_CONFIG_CLASSES = {
    K3DSparkConfig.model_type: K3DSparkConfig,
    KimiK2Config.model_type: KimiK2Config,
    "deepseek_v32": DeepseekV3Config,
}


def reference_class(model_type: Any) -> type | None:
    if not isinstance(model_type, str):
        return None
    return MLA_CONFIG_CLASSES.get(model_type) or (CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None)


def reference_parse(raw: dict[str, Any]) -> PretrainedConfig | dict[str, Any]:
    """`cls(**raw)` with transformers' class (raises what it raises); the raw dict for unknown types."""
    cls = reference_class(raw.get("model_type"))
    return cls(**copy.deepcopy(raw)) if cls is not None else raw


def as_plain(value: Any) -> Any:
    """A parsed config as plain data: transformers' to_dict(), ours as it is."""
    if isinstance(value, PretrainedConfig):
        return value.to_dict()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value


def as_hf_config(config: PretrainedConfig | dict[str, Any]) -> Any:
    """transformers' parse in the shape geometry/hf_classes.py gives, for the same geometry code."""
    from specdeploy.geometry.hf_classes import from_transformers

    return from_transformers(config) if isinstance(config, PretrainedConfig) else config
