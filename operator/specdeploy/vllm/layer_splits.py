"""Widths split over TP in sub-modules the older rules (tp_splits.py) did not reach: shared
experts, MTP layers' input projections, vision projectors, linear-attention and state-space
mixers, draft heads' own vocabularies.

Each entry names the vLLM layer that splits the width by its key in the release's audit
(data/parallel_layers-<version>.json, written by scripts/audit_tp_layers.py), so it fires only
for a release whose audit finds that layer reachable from the architecture, and cites that
release's file and line. Every entry was confirmed by vLLM's own build on the meta device in
0.32.0, 0.33.0 and 0.34.0 (tests/parity/cases.py HELD_OUT_SPLIT_CASES)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from specdeploy.vllm.parallel_layers import audit_key, cite
from specdeploy.vllm.tp_splits import VOCAB_PADDING, config_int

Config = Mapping[str, Any]
_MODELS = "vllm/model_executor/models/"
_LAYERS = "vllm/model_executor/layers/"


def _key(*keys: str) -> Callable[[Config], int | None]:
    """The width at the first of `keys` the config holds."""
    return lambda c: config_int(c, keys)


def _product(width: str, count: str) -> Callable[[Config], int | None]:
    """`width` × `count` (a DeepSeek-style shared expert: moe_intermediate_size × n_shared_experts);
    None where either is unset (no shared expert is built)."""
    def value(c: Config) -> int | None:
        a, b = config_int(c, (width,)), config_int(c, (count,))
        return a * b if a and b else None
    return value


def _expand(hidden: str, expand: str) -> Callable[[Config], int | None]:
    """A state-space mixer's inner width, `expand` × `hidden` (vLLM's int of the product)."""
    def value(c: Config) -> int | None:
        h, e = c.get(hidden), c.get(expand)
        return int(e * h) if isinstance(h, int) and isinstance(e, (int, float)) and not isinstance(e, bool) else None
    return value


def _kda_heads(c: Config) -> int | None:
    """Kimi's KDA heads (linear_attn_config.num_heads), where the model has KDA layers."""
    kda = c.get("linear_attn_config")
    return config_int(kda, ("num_heads",)) if isinstance(kda, dict) and kda.get("kda_layers") else None


def _draft_vocab(c: Config) -> int | None:
    """A draft head's own LM head: draft_vocab_size, else the vocabulary (the class's default)."""
    return config_int(c, ("draft_vocab_size", "vocab_size"))


def _divides(width: int, tp: int) -> bool:
    return width % tp == 0


def _groups_split(groups: int, tp: int) -> bool:
    """mamba_mixer2.py MambaMixer2.__init__: TP divides the groups, or a single group is replicated."""
    return groups % tp == 0 or groups == 1


@dataclass(frozen=True)
class LayerSplit:
    """One width a layer splits over TP, in the architectures that build it."""

    what: str
    architectures: frozenset[str]
    sites: tuple[str, ...]  # audit keys of the layer (any one reachable makes the rule apply)
    width: Callable[[Config], int | None]  # None: the config builds no such layer
    splits: Callable[[int, int], bool] = _divides
    padding: int = 1  # the width is first rounded up to a multiple of this (the vocabulary's 64)
    needs: str = "divisible by"
    since: str = "0.32.0"  # the first release that builds the layer (the audit then must reach it)


_QWEN_SHARED = "shared expert (shared_expert_intermediate_size)"
_DEEPSEEK_MOE = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                           "GlmMoeDsaForCausalLM", "DeepSeekMTPModel", "DeepseekV32MTPModel"})
_MAMBA2 = f"{_LAYERS}mamba/mamba_mixer2.py::MambaMixer2.__init__"
_MAMBA2_MODELS = {  # architecture -> (heads key, groups key, inner width)
    "Mamba2ForCausalLM": ("num_heads", "n_groups", lambda c: config_int(c, ("intermediate_size",)) or _expand("hidden_size", "expand")(c)),
    "Zamba2ForCausalLM": ("n_mamba_heads", "mamba_ngroups", _expand("hidden_size", "mamba_expand")),
    "FalconH1ForCausalLM": ("mamba_n_heads", "mamba_n_groups", lambda c: config_int(c, ("mamba_d_ssm",)) or _expand("hidden_size", "mamba_expand")(c)),
    "GraniteMoeHybridForCausalLM": ("mamba_n_heads", "mamba_n_groups", _expand("hidden_size", "mamba_expand")),
    "NemotronHForCausalLM": ("mamba_num_heads", "n_groups", lambda c: (config_int(c, ("mamba_num_heads",)) or 0) * (config_int(c, ("mamba_head_dim",)) or 0) or None),
}


def _mamba2_splits() -> tuple[LayerSplit, ...]:
    """MambaMixer2's heads, groups and inner width, per family's config keys."""
    out = []
    for arch, (heads, groups, inner) in _MAMBA2_MODELS.items():
        archs = frozenset({arch})
        out += [LayerSplit(f"Mamba-2 mixer's heads ({heads})", archs, (_MAMBA2,), _key(heads)),
                LayerSplit(f"Mamba-2 mixer's groups ({groups}; one group is replicated)", archs, (_MAMBA2,), _key(groups),
                           splits=_groups_split, needs="1 or divisible by"),
                LayerSplit("Mamba-2 mixer's inner width", archs, (f"{_LAYERS}mamba/mamba_mixer2.py::MambaMixer2.out_proj",), inner)]
    return tuple(out)


LAYER_SPLITS: tuple[LayerSplit, ...] = (
    # Shared experts: an MLP beside the routed experts, split over TP even under expert parallel.
    LayerSplit(_QWEN_SHARED, frozenset({"Qwen2MoeForCausalLM"}),
               (f"{_MODELS}qwen2_moe.py::Qwen2MoeSparseMoeBlock.shared_expert->Qwen2MoeMLP",), _key("shared_expert_intermediate_size")),
    LayerSplit(_QWEN_SHARED, frozenset({"Qwen3MoeForCausalLM", "Qwen3VLMoeForConditionalGeneration"}),
               (f"{_MODELS}qwen3_moe.py::Qwen3MoeSparseMoeBlock.shared_expert->Qwen3MoeMLP",), _key("shared_expert_intermediate_size")),
    LayerSplit(_QWEN_SHARED, frozenset({"Qwen3NextForCausalLM", "Qwen3NextMTP", "Qwen3_5MoeForCausalLM",
                                             "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeMTP"}),
               (f"{_MODELS}qwen3_next.py::Qwen3NextSparseMoeBlock.shared_expert->Qwen2MoeMLP",), _key("shared_expert_intermediate_size")),
    LayerSplit("shared experts (moe_intermediate_size × n_shared_experts)", _DEEPSEEK_MOE,
               (f"{_MODELS}deepseek_v2.py::DeepseekV2MoE.shared_experts->DeepseekV2MLP",),
               _product("moe_intermediate_size", "n_shared_experts")),
    LayerSplit("shared experts (moe_intermediate_size × n_shared_experts)", frozenset({"DeepseekV4ForCausalLM", "DeepSeekV4MTPModel"}),
               ("vllm/models/deepseek_v4/nvidia/model.py::DeepseekV4MoE.shared_experts->DeepseekV4MLP",),
               _product("moe_intermediate_size", "n_shared_experts")),
    LayerSplit("shared experts (moe_intermediate_size × moe_num_shared_experts)", frozenset({"Ernie4_5_MoeForCausalLM"}),
               (f"{_MODELS}ernie45_moe.py::Ernie4_5_MoeMoE.shared_experts->Ernie4_5_MoeMLP",),
               _product("moe_intermediate_size", "moe_num_shared_experts")),
    LayerSplit("shared experts (moe_intermediate_size × num_shared_experts)", frozenset({"KimiK3ForConditionalGeneration", "KimiK3MTPModel"}),
               ("vllm/models/kimi_k3/nvidia/model.py::KimiMoE.shared_experts->KimiMLP",),
               _product("moe_intermediate_size", "num_shared_experts")),
    LayerSplit("shared expert (intermediate_size)", frozenset({"Llama4ForConditionalGeneration", "Llama4ForCausalLM"}),
               (f"{_MODELS}llama4.py::Llama4MoE.shared_expert->LlamaMLP",), _key("intermediate_size")),
    LayerSplit("shared MLP (shared_intermediate_size)", frozenset({"GraniteMoeHybridForCausalLM"}),
               (f"{_MODELS}granitemoehybrid.py::GraniteMoeHybridAttentionDecoderLayer.shared_mlp->GraniteMoeSharedMLP",),
               _key("shared_intermediate_size")),
    LayerSplit("shared experts (moe_shared_expert_intermediate_size)", frozenset({"NemotronHForCausalLM", "NemotronHMTPModel"}),
               (f"{_MODELS}nemotron_h.py::NemotronHMoE.shared_experts->NemotronHMLP",),
               _key("moe_shared_expert_intermediate_size")),
    # ERNIE-4.5's MTP layer is a dense Llama decoder layer, whatever the target's layers are.
    LayerSplit("MTP layer's dense MLP (intermediate_size)", frozenset({"ErnieMTPModel"}),
               (f"{_MODELS}ernie_mtp.py::ErnieMultiTokenPredictorLayer.mtp_block->LlamaDecoderLayer",), _key("intermediate_size")),
    # Llama-4's dense layers (every layer off interleave_moe_layer_step) use their own width.
    LayerSplit("dense MLP (intermediate_size_mlp)", frozenset({"Llama4ForConditionalGeneration", "Llama4ForCausalLM"}),
               (f"{_MODELS}llama4.py::Llama4DecoderLayer.feed_forward->LlamaMLP",),
               lambda c: config_int(c, ("intermediate_size_mlp",)) if config_int(c, ("interleave_moe_layer_step",), 1) != 1 else None),
    # MTP layers: the projection of [embedding, hidden state] back to the hidden size is split.
    LayerSplit("MTP layer's fc (hidden_size)", frozenset({"Qwen3NextMTP"}),
               (f"{_MODELS}qwen3_next_mtp.py::Qwen3NextMultiTokenPredictor.fc",), _key("hidden_size")),
    LayerSplit("MTP layer's fc (hidden_size)", frozenset({"Qwen3_5MTP", "Qwen3_5MoeMTP"}),
               (f"{_MODELS}qwen3_5_mtp.py::Qwen3_5MultiTokenPredictor.fc",), _key("hidden_size")),
    LayerSplit("MTP layer's eh_proj (hidden_size)", frozenset({"NemotronHMTPModel"}),
               (f"{_MODELS}nemotron_h_mtp.py::NemotronHMTPAttentionDecoderLayer.eh_proj",), _key("hidden_size")),
    # Vision projectors into the text model's width.
    LayerSplit("multimodal projector (the text hidden_size)", frozenset({"Mistral3ForConditionalGeneration"}),
               (f"{_MODELS}mistral3.py::Mistral3MultiModalProjector.linear_1",), _key("hidden_size")),
    LayerSplit("multimodal projector (the text hidden_size)", frozenset({"Llama4ForConditionalGeneration"}),
               (f"{_MODELS}mllama4.py::Llama4MultiModalProjector.linear_1",), _key("hidden_size")),
    # Linear attention: Kimi's KDA heads (not the MLA heads, which validation/rules.py checks).
    LayerSplit("KDA linear attention's heads (linear_attn_config.num_heads)", frozenset({"KimiK3ForConditionalGeneration"}),
               ("vllm/models/kimi_k3/nvidia/kda.py::KimiK3DeltaAttention.local_num_heads",
                f"{_LAYERS}mamba/gdn/kimi_gdn_linear_attn.py::KimiGatedDeltaNetAttention.local_num_heads"), _kda_heads),
    # State-space mixers.
    *_mamba2_splits(),
    LayerSplit("Mamba mixer's inner width (mamba_expand × hidden_size)", frozenset({"JambaForCausalLM"}),
               (f"{_LAYERS}mamba/mamba_mixer.py::MambaMixer.in_proj",), _expand("hidden_size", "mamba_expand")),
    LayerSplit("Mamba mixer's inner width (intermediate_size)", frozenset({"FalconMambaForCausalLM"}),
               (f"{_LAYERS}mamba/mamba_mixer.py::MambaMixer.in_proj",), _key("intermediate_size")),
    LayerSplit("adapters' rank (adapter_rank)", frozenset({"Zamba2ForCausalLM"}), (f"{_MODELS}zamba2.py::Zamba2LoRA.A",), _key("adapter_rank")),
    # Draft heads whose LM head covers their own vocabulary.
    LayerSplit("LM head (draft_vocab_size)", frozenset({"Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3"}),
               (f"{_MODELS}llama_eagle3.py::Eagle3LlamaForCausalLM.lm_head",), _draft_vocab, padding=VOCAB_PADDING),
    LayerSplit("LM head (draft_vocab_size)", frozenset({"Eagle3Qwen3ForCausalLM"}),
               (f"{_MODELS}qwen3_eagle3.py::Eagle3Qwen3ForCausalLM.lm_head",), _draft_vocab, padding=VOCAB_PADDING),
    LayerSplit("LM head (draft_vocab_size)", frozenset({"DFlashDraftModel", "Qwen3DSparkModel"}),
               (f"{_MODELS}qwen3_dflash.py::DFlashQwen3ForCausalLM.lm_head",), _draft_vocab, padding=VOCAB_PADDING),
    LayerSplit("Medusa LM head (truncated_vocab_size)", frozenset({"MedusaModel"}),
               (f"{_MODELS}medusa.py::Medusa.lm_head",), _key("truncated_vocab_size", "vocab_size"), padding=VOCAB_PADDING),
    # GraniteMoeHybridAttention's o_proj takes hidden_size, not heads × head_dim.
    LayerSplit("attention output (hidden_size)", frozenset({"GraniteMoeHybridForCausalLM"}),
               (f"{_MODELS}granitemoehybrid.py::GraniteMoeHybridAttention.o_proj",), _key("hidden_size")),
    # Mistral's time-conditioned norm (Voxtral's decoder), only where the config turns it on.
    LayerSplit("time-conditioned norm (ada_rms_norm_t_cond_dim)", frozenset({"MistralForCausalLM"}),
               (f"{_MODELS}mistral.py::MistralDecoderLayer.ada_rms_norm_t_cond",),
               lambda c: config_int(c, ("ada_rms_norm_t_cond_dim",)) if c.get("ada_rms_norm_t_cond") else None),
    # DeepSeek-V4's grouped output projection: its first half splits o_groups × o_lora_rank, and
    # from 0.34.0 (common/grouped_wo_a.py) divides the groups themselves.
    LayerSplit("attention output projection (o_groups × o_lora_rank)", frozenset({"DeepseekV4ForCausalLM", "DeepSeekV4MTPModel"}),
               ("vllm/models/deepseek_v4/attention.py::DeepseekV4Attention.wo_a",), _product("o_lora_rank", "o_groups")),
    LayerSplit("attention output groups (o_groups)", frozenset({"DeepseekV4ForCausalLM", "DeepSeekV4MTPModel"}),
               ("vllm/models/deepseek_v4/common/grouped_wo_a.py::DeepseekV4GroupedWoA.n_local_groups",), _key("o_groups"),
               since="0.34.0"),
)


def layer_split_failures(architecture: str | None, config: Config, tp: int, version: str) -> list[str]:
    """Why `architecture`'s sub-modules cannot be built at `tp` under release `version`: one
    sentence per width of LAYER_SPLITS that does not split there ([] when all do)."""
    out = []
    for rule in LAYER_SPLITS:
        if architecture not in rule.architectures:
            continue
        site = next((s for s in rule.sites if audit_key(version, architecture, s)), None)
        width = rule.width(config) if site else None
        if not width:
            continue
        padded = -(-width // rule.padding) * rule.padding
        if not rule.splits(padded, tp):
            shown = f"{width} (padded to {padded})" if padded != width else str(width)
            out.append(f"{rule.what}: {shown} is not {rule.needs} TP {tp} ({cite(version, site)})")
    return out
