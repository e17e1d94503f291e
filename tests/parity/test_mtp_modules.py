"""The MTP module we expect vLLM to build from a target equals what vLLM's own
SpeculativeConfig.hf_config_override makes of the same config, family by family."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXT = {"model_type": "x_text"}
# name -> (top-level config, text_config or None)
FAMILIES: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "deepseek_v3": ({"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "deepseek_v3-no-field": ({"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"]}, None),
    "deepseek_v32": ({"model_type": "deepseek_v32", "architectures": ["DeepseekV32ForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "glm_moe_dsa": ({"model_type": "glm_moe_dsa", "architectures": ["GlmMoeDsaForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "deepseek_v4": ({"model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "pangu": ({"model_type": "pangu_ultra_moe", "architectures": ["PanguUltraMoEForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "kimi_k3": ({"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"]}, {"model_type": "kimi_linear", "num_nextn_predict_layers": 2}),
    "mimo": ({"model_type": "mimo", "architectures": ["MiMoForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "mimo_v2": ({"model_type": "mimo_v2", "architectures": ["MiMoV2ForCausalLM"], "num_nextn_predict_layers": 3}, None),
    "mimo_v2_flash": ({"model_type": "mimo_v2_flash", "architectures": ["MiMoV2FlashForCausalLM"]}, None),
    "glm4_moe": ({"model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "glm4_moe_lite": ({"model_type": "glm4_moe_lite", "architectures": ["Glm4MoeLiteForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "ernie": ({"model_type": "ernie4_5_moe", "architectures": ["Ernie4_5_MoeForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "nemotron_h-mtp": ({"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "num_nextn_predict_layers": 2}, None),
    "nemotron_h-no-mtp": ({"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "num_nextn_predict_layers": 0}, None),
    "qwen3_next": ({"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "bailing_v3": ({"model_type": "bailing_moe_v3", "architectures": ["BailingMoeV3ForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "bailing_hybrid": ({"model_type": "bailing_hybrid", "architectures": ["BailingMoeV2_5ForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "exaone_moe": ({"model_type": "exaone_moe", "architectures": ["ExaoneMoEForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "exaone4_5": ({"model_type": "exaone4_5", "architectures": ["Exaone4_5ForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "qwen3_5_moe": ({"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"]}, {"model_type": "qwen3_5_moe_text", "num_attention_heads": 32, "mtp_num_hidden_layers": 1}),
    "qwen3_5_text": ({"model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"], "mtp_num_hidden_layers": 2}, None),
    "longcat": ({"model_type": "longcat_flash", "architectures": ["LongcatFlashForCausalLM"]}, None),
    "step3p5": ({"model_type": "step3p5", "architectures": ["Step3p5ForCausalLM"], "num_nextn_predict_layers": 3}, None),
    "step5": ({"model_type": "step5", "architectures": ["Step5ForCausalLM"], "num_nextn_predict_layers": 2}, None),
    "hy_v3": ({"model_type": "hy_v3", "architectures": ["HYV3ForCausalLM"], "num_nextn_predict_layers": 1}, None),
    "minimax_m3_vl": ({"model_type": "minimax_m3_vl", "architectures": ["MiniMaxM3ForConditionalGeneration"]}, {"model_type": "minimax_m3", "num_mtp_modules": 3}),
    "llama": ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, None),
    "qwen3": ({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "num_nextn_predict_layers": 1}, None),
}


def _vllm(top: dict[str, Any], text: dict[str, Any] | None) -> tuple[str, str, Any]:
    from transformers import PretrainedConfig
    from vllm.config.speculative import SpeculativeConfig

    config = PretrainedConfig(**copy.deepcopy(top))
    config.model_type = top["model_type"]
    if text is not None:
        sub = PretrainedConfig(**copy.deepcopy(text))
        sub.model_type = text["model_type"]
        config.text_config = sub
    out = SpeculativeConfig.hf_config_override(config)
    return out.model_type, out.architectures[0], getattr(out, "n_predict", None)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_mtp_module_matches_vllm_hf_config_override(name: str) -> None:
    vllm = pytest.importorskip("vllm")
    from specdeploy.vllm import rule_set
    from specdeploy.vllm.mtp import mtp_module

    top, text = FAMILIES[name]
    vllm_type, vllm_arch, vllm_n = _vllm(top, text)
    ours = mtp_module(top, text if text is not None else top, rule_set(vllm.__version__))
    if ours is None:  # vLLM leaves the config as it was: not an MTP draft, refused later
        assert (vllm_type, vllm_arch) == (top["model_type"], top["architectures"][0])
        return
    assert (ours.model_type, ours.architecture, ours.n_predict) == (vllm_type, vllm_arch, vllm_n)
