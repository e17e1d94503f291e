"""Which MTP module vLLM builds from a target, and how many layers it predicts.

Restates SpeculativeConfig.hf_config_override (vllm/config/speculative.py, 0.32.0 and 0.33.0):
each family maps to an MTP model_type and architecture, with `n_predict` read from its own
field (`num_nextn_predict_layers`, `mtp_num_hidden_layers`, `num_mtp_modules`), some with a
default of 1 and MiMo-V2 with a fixed 1. A target no entry matches keeps its own type, which
vLLM then refuses as "Unsupported speculative method: 'mtp'". Releases differ only by the
families they know (0.33.0 adds Step5's `step5_mtp`), which their MTPModelTypes list says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdeploy.vllm.facts import VllmFacts
from specdeploy.vllm.hf_config import config_value as _get


@dataclass(frozen=True)
class MtpModule:
    model_type: str
    architecture: str
    n_predict: int | None  # None: the config does not say (k must then be set)
    refusal: str | None = None  # vLLM refuses this target for MTP, and why


def _nextn(obj: Any, default: int | None = None) -> int | None:
    value = _get(obj, "num_nextn_predict_layers")
    return default if value is None else value


def mtp_module(config: Any, text: Any, facts: VllmFacts) -> MtpModule | None:
    """The MTP module `facts`' release builds from this target, testing families in vLLM's order."""
    model_type = str(_get(config, "model_type") or "")
    architectures = list(_get(config, "architectures") or [])
    arch = architectures[0] if architectures else ""
    text_type = str(_get(text, "model_type") or "")

    if model_type == "dots3_note":
        return MtpModule("dots3_note_mtp", "Dots3NoteMTPModel", _nextn(config, 1))
    if model_type in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa", "deepseek_mtp"):
        v32 = model_type in ("deepseek_v32", "glm_moe_dsa")
        return MtpModule("deepseek_mtp", "DeepseekV32MTPModel" if v32 else "DeepSeekMTPModel", _nextn(config))
    if model_type == "deepseek_v4":
        return MtpModule("deepseek_mtp", "DeepSeekV4MTPModel", _nextn(config))
    if model_type == "deepseek_v41":
        return MtpModule("deepseek_mtp", arch, _nextn(config),
                         "DeepSeek-V4.1 has no classic MTP draft (its checkpoints ship DSpark stages): use method dspark")
    if model_type in ("pangu_ultra_moe", "pangu_ultra_moe_mtp"):
        return MtpModule("pangu_ultra_moe_mtp", "OpenPanguMTPModel", _nextn(config))
    if model_type == "kimi_k3":
        return MtpModule("kimi_k3_mtp", "KimiK3MTPModel", _nextn(text))
    if arch == "MiMoForCausalLM":
        return MtpModule("mimo_mtp", "MiMoMTPModel", _nextn(config))
    if arch in ("MiMoV2ForCausalLM", "MiMoV2OmniForCausalLM", "MiMoV2FlashForCausalLM"):
        target = {"MiMoV2OmniForCausalLM": "MiMoV2OmniMTPModel"}.get(arch, "MiMoV2MTPModel")
        return MtpModule("mimo_v2_mtp", target, 1)  # vLLM serves only the first MiMo-V2 MTP layer
    glm = {"Glm4MoeForCausalLM": ("glm4_moe_mtp", "Glm4MoeMTPModel"),
           "Glm4MoeLiteForCausalLM": ("glm4_moe_lite_mtp", "Glm4MoeLiteMTPModel"),
           "GlmOcrForConditionalGeneration": ("glm_ocr_mtp", "GlmOcrMTPModel")}
    if arch in glm:
        return MtpModule(*glm[arch], _nextn(config))
    if model_type in ("ernie4_5_moe", "ernie_mtp"):
        return MtpModule("ernie_mtp", "ErnieMTPModel", _nextn(config))
    nemotron = text if arch in ("NemotronH_Super_Omni_Reasoning_V3", "NemotronH_Omni_Reasoning_V3") else config
    nemotron_type = str(_get(nemotron, "model_type") or "")
    if (nemotron_type in ("nemotron_h", "nemotron_h_puzzle") and (_nextn(nemotron) or 0) > 0) or nemotron_type == "nemotron_h_mtp":
        return MtpModule("nemotron_h_mtp", "NemotronHMTPModel", _nextn(nemotron, 1))
    if model_type in ("qwen3_next", "qwen3_next_mtp"):
        return MtpModule("qwen3_next_mtp", "Qwen3NextMTP", _nextn(config))
    if model_type in ("qwen4_exp", "qwen4_exp_text", "qwen4_exp_mtp"):
        layers = _get(text, "mtp_num_hidden_layers")
        return MtpModule("qwen4_exp_mtp", "Qwen4ExpMTP", layers if layers is not None else _nextn(text))
    if arch in ("BailingMoeV3ForCausalLM", "BailingMoeV3VLForConditionalGeneration"):
        return MtpModule("bailing_hybrid_v3_mtp", "BailingMoeV3MTPModel", _nextn(text if arch.endswith("VLForConditionalGeneration") else config))
    if model_type in ("bailing_hybrid", "bailing_hybrid_mtp") or "BailingMoeV2_5ForCausalLM" in architectures:
        return MtpModule("bailing_hybrid_mtp", "BailingMoeV25MTPModel", _nextn(config))
    if model_type in ("exaone_moe", "exaone_moe_mtp"):
        return MtpModule("exaone_moe_mtp", "ExaoneMoeMTP", _nextn(config))
    if "exaone4_5" in model_type:
        return MtpModule("exaone4_5_mtp", "Exaone4_5_MTP", _nextn(config))
    if model_type in ("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"):
        moe = model_type in ("qwen3_5_moe", "qwen3_5_moe_text")
        layers = _get(config, "mtp_num_hidden_layers")
        return MtpModule("qwen3_5_mtp", "Qwen3_5MoeMTP" if moe else "Qwen3_5MTP",
                         layers if layers is not None else _get(text, "mtp_num_hidden_layers"))
    if model_type in ("intern_s2_preview", "interns2_mobius"):
        mobius = model_type == "interns2_mobius"
        moe = mobius or text_type == "qwen3_5_moe_text"
        target = "InternS2MobiusMTP" if mobius else ("Qwen3_5MoeMTP" if moe else "Qwen3_5MTP")
        return MtpModule("qwen3_5_mtp", target, _get(text, "mtp_num_hidden_layers"))
    if model_type == "longcat_flash":
        return MtpModule("longcat_flash_mtp", "LongCatFlashMTPModel", _nextn(config, 1))
    if "step5_mtp" in facts.mtp_model_types and (
            model_type in ("step5", "step5_vl") or {"Step5ForCausalLM", "Step5ForConditionalGeneration"} & set(architectures)):
        # 0.33.0: Step5's own draft module; n_predict from its text config, default 1.
        return MtpModule("step5_mtp", "Step5MTP", _nextn(text, 1))
    if model_type in ("step3p5", "step3p7") or arch in ("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration"):
        return MtpModule("step3p5_mtp", "Step3p5MTP", _nextn(text, 1))
    if model_type in ("hy_v3", "hy_v4"):
        return MtpModule(f"{model_type}_mtp", "HYV3MTPModel" if model_type == "hy_v3" else "HYV4MTPModel", _nextn(config))
    if model_type in ("inkling_mm_model", "inkling_model"):
        depths = (_get(config, "mtp_config") or {}).get("num_nextn_predict_layers", 0)
        refusal = None if depths >= 1 else "The Inkling checkpoint does not contain MTP weights"
        return MtpModule("inkling_mtp", "InklingMTPModel", depths, refusal)
    if model_type == "minimax_m3_vl" or arch in ("MiniMaxM3SparseForConditionalGeneration", "MiniMaxM3MTP") or model_type == "minimax_m3_mtp":
        source = text if model_type == "minimax_m3_vl" or arch == "MiniMaxM3SparseForConditionalGeneration" else config
        modules = _get(source, "num_mtp_modules")
        return MtpModule("minimax_m3_mtp", "MiniMaxM3MTP", 1 if modules is None else modules)
    if model_type == "glm5_next":
        return MtpModule("glm5_next_mtp", "Glm5NextMTPModel", _nextn(text))
    return None
