"""Which MTP module vLLM builds from a target, and how many layers it predicts.

Restates SpeculativeConfig.hf_config_override (vllm/config/speculative.py, 0.32.0 and 0.33.0):
each family maps to an MTP model_type and architecture, with `n_predict` read from its own
field (`num_nextn_predict_layers`, `mtp_num_hidden_layers`, `num_mtp_modules`), some with a
default of 1 and MiMo-V2 with a fixed 1. A target no entry matches keeps its own type, which
vLLM then refuses as "Unsupported speculative method: 'mtp'". Releases differ only by the
families they know (0.33.0 adds Step5's `step5_mtp`), which their MTPModelTypes list says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

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


@dataclass(frozen=True)
class _Target:
    """What hf_config_override tests: the top-level config, its text config, and their names."""

    config: Any
    text: Any
    facts: VllmFacts

    @property
    def model_type(self) -> str:
        return str(_get(self.config, "model_type") or "")

    @property
    def architectures(self) -> list[str]:
        return list(_get(self.config, "architectures") or [])

    @property
    def arch(self) -> str:
        return self.architectures[0] if self.architectures else ""

    @property
    def nemotron(self) -> Any:
        """Nemotron-H omni models keep the LLM's fields in the text config."""
        return self.text if self.arch in ("NemotronH_Super_Omni_Reasoning_V3", "NemotronH_Omni_Reasoning_V3") else self.config


def _qwen4_exp(t: _Target) -> MtpModule:
    layers = _get(t.text, "mtp_num_hidden_layers")
    return MtpModule("qwen4_exp_mtp", "Qwen4ExpMTP", layers if layers is not None else _nextn(t.text))


def _qwen3_5(t: _Target) -> MtpModule:
    moe = t.model_type in ("qwen3_5_moe", "qwen3_5_moe_text")
    layers = _get(t.config, "mtp_num_hidden_layers")
    return MtpModule("qwen3_5_mtp", "Qwen3_5MoeMTP" if moe else "Qwen3_5MTP",
                     layers if layers is not None else _get(t.text, "mtp_num_hidden_layers"))


def _intern_s2(t: _Target) -> MtpModule:
    mobius = t.model_type == "interns2_mobius"
    moe = mobius or str(_get(t.text, "model_type") or "") == "qwen3_5_moe_text"
    return MtpModule("qwen3_5_mtp", "InternS2MobiusMTP" if mobius else ("Qwen3_5MoeMTP" if moe else "Qwen3_5MTP"),
                     _get(t.text, "mtp_num_hidden_layers"))


def _inkling(t: _Target) -> MtpModule:
    depths = (_get(t.config, "mtp_config") or {}).get("num_nextn_predict_layers", 0)
    return MtpModule("inkling_mtp", "InklingMTPModel", depths, None if depths >= 1 else "The Inkling checkpoint does not contain MTP weights")


def _minimax_m3(t: _Target) -> MtpModule:
    in_text = t.model_type == "minimax_m3_vl" or t.arch == "MiniMaxM3SparseForConditionalGeneration"
    modules = _get(t.text if in_text else t.config, "num_mtp_modules")
    return MtpModule("minimax_m3_mtp", "MiniMaxM3MTP", 1 if modules is None else modules)


_MIMO_V2 = ("MiMoV2ForCausalLM", "MiMoV2OmniForCausalLM", "MiMoV2FlashForCausalLM")
_GLM = {"Glm4MoeForCausalLM": ("glm4_moe_mtp", "Glm4MoeMTPModel"),
        "Glm4MoeLiteForCausalLM": ("glm4_moe_lite_mtp", "Glm4MoeLiteMTPModel"),
        "GlmOcrForConditionalGeneration": ("glm_ocr_mtp", "GlmOcrMTPModel")}
_STEP5 = {"Step5ForCausalLM", "Step5ForConditionalGeneration"}
_BAILING_V3 = ("BailingMoeV3ForCausalLM", "BailingMoeV3VLForConditionalGeneration")

# hf_config_override's families in its order (the first that matches wins): when, then what.
_FAMILIES: tuple[tuple[Callable[[_Target], bool], Callable[[_Target], MtpModule]], ...] = (
    (lambda t: t.model_type == "dots3_note", lambda t: MtpModule("dots3_note_mtp", "Dots3NoteMTPModel", _nextn(t.config, 1))),
    (lambda t: t.model_type in ("deepseek_v3", "deepseek_mtp"), lambda t: MtpModule("deepseek_mtp", "DeepSeekMTPModel", _nextn(t.config))),
    (lambda t: t.model_type in ("deepseek_v32", "glm_moe_dsa"), lambda t: MtpModule("deepseek_mtp", "DeepseekV32MTPModel", _nextn(t.config))),
    (lambda t: t.model_type == "deepseek_v4", lambda t: MtpModule("deepseek_mtp", "DeepSeekV4MTPModel", _nextn(t.config))),
    (lambda t: t.model_type == "deepseek_v41", lambda t: MtpModule(
        "deepseek_mtp", t.arch, _nextn(t.config), "DeepSeek-V4.1 has no classic MTP draft (its checkpoints ship DSpark stages): use method dspark")),
    (lambda t: t.model_type in ("pangu_ultra_moe", "pangu_ultra_moe_mtp"), lambda t: MtpModule("pangu_ultra_moe_mtp", "OpenPanguMTPModel", _nextn(t.config))),
    (lambda t: t.model_type == "kimi_k3", lambda t: MtpModule("kimi_k3_mtp", "KimiK3MTPModel", _nextn(t.text))),
    (lambda t: t.arch == "MiMoForCausalLM", lambda t: MtpModule("mimo_mtp", "MiMoMTPModel", _nextn(t.config))),
    # vLLM serves only the first MiMo-V2 MTP layer.
    (lambda t: t.arch in _MIMO_V2, lambda t: MtpModule("mimo_v2_mtp", "MiMoV2OmniMTPModel" if t.arch == "MiMoV2OmniForCausalLM" else "MiMoV2MTPModel", 1)),
    (lambda t: t.arch in _GLM, lambda t: MtpModule(*_GLM[t.arch], _nextn(t.config))),
    (lambda t: t.model_type in ("ernie4_5_moe", "ernie_mtp"), lambda t: MtpModule("ernie_mtp", "ErnieMTPModel", _nextn(t.config))),
    (lambda t: (str(_get(t.nemotron, "model_type") or "") in ("nemotron_h", "nemotron_h_puzzle") and (_nextn(t.nemotron) or 0) > 0)
     or str(_get(t.nemotron, "model_type") or "") == "nemotron_h_mtp",
     lambda t: MtpModule("nemotron_h_mtp", "NemotronHMTPModel", _nextn(t.nemotron, 1))),
    (lambda t: t.model_type in ("qwen3_next", "qwen3_next_mtp"), lambda t: MtpModule("qwen3_next_mtp", "Qwen3NextMTP", _nextn(t.config))),
    (lambda t: t.model_type in ("qwen4_exp", "qwen4_exp_text", "qwen4_exp_mtp"), _qwen4_exp),
    (lambda t: t.arch in _BAILING_V3, lambda t: MtpModule(
        "bailing_hybrid_v3_mtp", "BailingMoeV3MTPModel", _nextn(t.text if t.arch.endswith("VLForConditionalGeneration") else t.config))),
    (lambda t: t.model_type in ("bailing_hybrid", "bailing_hybrid_mtp") or "BailingMoeV2_5ForCausalLM" in t.architectures,
     lambda t: MtpModule("bailing_hybrid_mtp", "BailingMoeV25MTPModel", _nextn(t.config))),
    (lambda t: t.model_type in ("exaone_moe", "exaone_moe_mtp"), lambda t: MtpModule("exaone_moe_mtp", "ExaoneMoeMTP", _nextn(t.config))),
    (lambda t: "exaone4_5" in t.model_type, lambda t: MtpModule("exaone4_5_mtp", "Exaone4_5_MTP", _nextn(t.config))),
    (lambda t: t.model_type in ("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"), _qwen3_5),
    (lambda t: t.model_type in ("intern_s2_preview", "interns2_mobius"), _intern_s2),
    (lambda t: t.model_type == "longcat_flash", lambda t: MtpModule("longcat_flash_mtp", "LongCatFlashMTPModel", _nextn(t.config, 1))),
    # 0.33.0: Step5's own draft module; n_predict from its text config, default 1.
    (lambda t: "step5_mtp" in t.facts.mtp_model_types and (t.model_type in ("step5", "step5_vl") or bool(_STEP5 & set(t.architectures))),
     lambda t: MtpModule("step5_mtp", "Step5MTP", _nextn(t.text, 1))),
    (lambda t: t.model_type in ("step3p5", "step3p7") or t.arch in ("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration"),
     lambda t: MtpModule("step3p5_mtp", "Step3p5MTP", _nextn(t.text, 1))),
    (lambda t: t.model_type in ("hy_v3", "hy_v4"), lambda t: MtpModule(
        f"{t.model_type}_mtp", "HYV3MTPModel" if t.model_type == "hy_v3" else "HYV4MTPModel", _nextn(t.config))),
    (lambda t: t.model_type in ("inkling_mm_model", "inkling_model"), _inkling),
    (lambda t: t.model_type in ("minimax_m3_vl", "minimax_m3_mtp") or t.arch in ("MiniMaxM3SparseForConditionalGeneration", "MiniMaxM3MTP"), _minimax_m3),
    (lambda t: t.model_type == "glm5_next", lambda t: MtpModule("glm5_next_mtp", "Glm5NextMTPModel", _nextn(t.text))),
)


def mtp_module(config: Any, text: Any, facts: VllmFacts) -> MtpModule | None:
    """The MTP module `facts`' release builds from this target, testing families in vLLM's order."""
    target = _Target(config, text, facts)
    return next((build(target) for matches, build in _FAMILIES if matches(target)), None)
