"""A draft's config as vLLM builds it for the chosen method, before it is read.

vLLM rewrites some draft configs in SpeculativeConfig.__post_init__
(vllm/config/speculative.py): with method medusa it forces model_type medusa (old
checkpoints have none), MedusaConfig.from_pretrained renames any "num..heads"/"num..layers"
key (vllm/transformers_utils/configs/medusa.py), and the target's vocab_size replaces the
draft's. Reading the draft any other way would judge a config vLLM never sees."""

from __future__ import annotations

from typing import Any

from specdeploy.vllm.methods import Method

MEDUSA_DEFAULTS = {"hidden_size": 4096, "num_heads": 5, "num_hidden_layers": 1, "architectures": ["MedusaModel"]}


def vllm_draft_config(method: Method, raw: dict[str, Any], target_vocab_size: int) -> dict[str, Any]:
    if not method.forces_draft_model_type:
        return raw
    config = {k: v for k, v in raw.items() if not ("num" in k and ("heads" in k or "layers" in k))}
    for key, value in raw.items():
        if "num" in key and "heads" in key:
            config["num_heads"] = value
        elif "num" in key and "layers" in key:
            config["num_hidden_layers"] = value
    for key, value in MEDUSA_DEFAULTS.items():
        config.setdefault(key, value)
    config["model_type"] = method.draft_model_type
    config["vocab_size"] = target_vocab_size
    return config
