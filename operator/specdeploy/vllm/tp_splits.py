"""Sizes a model class divides by the tensor-parallel size while vLLM builds it, beyond the
attention heads and KV heads every model splits (QKVParallelLinear, validation/rules.py): where
vLLM's config check accepts a TP and the build then fails.

Each rule restates one model class, read in 0.32.0, 0.33.0 and 0.34.0 alike (found by reading every
model file for KV-head divisions without QKVParallelLinear's replication, and the towers that
choose TP or data parallel by their heads). Kimi-K3 and gpt-oss were confirmed by building them
with vLLM's own classes on the meta device (tests/parity/memory_judge.py's build at the TP under
test, 0.32.0 and 0.33.0; gpt-oss under 0.34.0 too): Kimi-K3 fails at TP 3, 6 and 12 with "4096 is
not divisible by 3" (6, 12) and builds at 4 and 8; gpt-oss-20b fails at TP 16 with
"ZeroDivisionError: integer modulo by zero" and builds at 8. Param2MoE and Ricursive restate their
source (no checkpoint config among the fixtures).

Vision towers: of the multimodal families a user would serve as a target, only MoonViT
(kimi_k25_vit.py) passes its heads to vision.py is_vit_use_data_parallel(num_heads) and falls
back to data parallel where TP does not divide them; InternViT pads its heads with dummy heads
and falls back likewise (intern_vit.py). Qwen2-VL, Qwen2.5-VL, Qwen3-VL (and -MoE, and Qwen3.5,
which builds Qwen3-VL's tower), GLM-4.1V/4.5V, SigLIP (Gemma-3), Llama-4, Pixtral (Mistral3) and
Kimi-VL's MoonViT (moonvit.py, not Kimi-K2.5's) call it without heads: they split over TP unless mm_encoder_tp_mode is "data", and divide
their heads and MLP widths by TP (the same in all three releases). Built on the meta device in
0.32.0, 0.33.0 and 0.34.0: Qwen3.6-27B fails at TP 12 ("16 is not divisible by 12"), GLM-4.5V
at TP 8 ("12 is not divisible by 8"), Qwen2.5-VL-3B at TP 8 (its 3420-wide MLP), Gemma-3-27B at
TP 32, Mistral-Small-3.1 at TP 32, a Kimi-VL tower of 12 heads at TP 8; each builds at the
TP below. Generic to every model: the experts' width, the padded vocabulary
and GatedDeltaNet's key width and value heads (expert_width_failures, vocab_failures,
gated_delta_net_failures), the dense MLP's width (dense_mlp_failures); and the MoE blocks that
refuse more ranks than experts (expert_count_failures)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from specdeploy.vllm.hf_config import EXPERT_COUNT_KEYS, first_value


@dataclass(frozen=True)
class TpSplit:
    """One size a model's layers divide by the TP size."""

    what: str  # for messages
    size_keys: tuple[str, ...]  # where the config states the size, first present wins
    source: str  # the vLLM code that divides it
    section: str = ""  # the sub-config holding the keys ("" for the LLM config)
    default: int | None = None  # the config class's default when no key is present
    # vision.py is_vit_use_data_parallel(num_heads): a tower whose heads the TP does not divide
    # runs data parallel, unsplit; these keys hold those heads.
    tp_only_when_heads_divide: tuple[str, ...] = ()
    heads_default: int | None = None


def config_int(section: Mapping[str, Any], keys: tuple[str, ...], default: int | None = None) -> int | None:
    """The first of `keys` the config holds as an integer (a bool is not one), else `default`."""
    value = next((section[k] for k in keys if isinstance(section.get(k), int) and not isinstance(section.get(k), bool)), None)
    return default if value is None else value


_MOONVIT_MLP = TpSplit(
    "vision tower MLP (MoonViT)", ("intermediate_size", "vt_intermediate_size"),
    "model_executor/models/kimi_k25_vit.py MLP2.__init__ (fc0 ColumnParallelLinear: divide(mlp_dim, tp)); "
    "MoonViTEncoderLayer.__init__ splits the tower only when is_vit_use_data_parallel(num_heads) is False",
    section="vision_config", tp_only_when_heads_divide=("num_attention_heads", "vt_num_attention_heads"))


def _tower(what: str, key: str, default: int, source: str) -> TpSplit:
    """A vision tower size split over TP whatever the heads: these towers call
    vision.py is_vit_use_data_parallel() without heads, so they run TP unless
    mm_encoder_tp_mode is "data", which specdeploy never sets. The default is the
    vision config class's (transformers), for a config that omits the key."""
    return TpSplit(f"vision tower {what}", (key,), source, section="vision_config", default=default)


_QWEN_VIT_HEADS = "model_executor/models/qwen2_5_vl.py Qwen2_5_VisionAttention.__init__ (divide(num_heads, tp_size))"
_QWEN3_VIT = (_tower("heads", "num_heads", 16, _QWEN_VIT_HEADS + ", built by qwen3_vl.py Qwen3_VisionBlock"),
              _tower("MLP", "intermediate_size", 4304, "model_executor/models/qwen3_vl.py Qwen3_VisionMLP.__init__ "
                     "(linear_fc1 ColumnParallelLinear)"))
_GLM4V_VIT = (_tower("heads", "num_heads", 12, "model_executor/models/glm4_1v.py Glm4vVisionAttention.__init__ "
                     "(divide(num_heads, tp_size))"),
              _tower("MLP", "out_hidden_size", 4096, "model_executor/models/glm4_1v.py Glm4vVisionBlock's "
                     "Glm4vVisionMLP (MergedColumnParallelLinear of out_hidden_size)"),
              _tower("patch merger", "intermediate_size", 13696, "model_executor/models/glm4_1v.py "
                     "Glm4vPatchMerger.__init__ (MergedColumnParallelLinear of intermediate_size)"))
_SIGLIP_VIT = (_tower("heads", "num_attention_heads", 12, "model_executor/models/siglip.py SiglipAttention.__init__ "
                      "(divide(num_heads, tp_size))"),
               _tower("MLP", "intermediate_size", 3072, "model_executor/models/siglip.py SiglipMLP.__init__ "
                      "(fc1 ColumnParallelLinear)"))
_LLAMA4_VIT = (_tower("heads", "num_attention_heads", 16, "model_executor/models/mllama4.py "
                      "Llama4VisionAttention.__init__ (assert num_heads % tp_size == 0)"),
               _tower("MLP", "intermediate_size", 5632, "model_executor/models/mllama4.py Llama4VisionMLP.__init__ "
                      "(fc1 ColumnParallelLinear)"),
               _tower("pixel-shuffle adapter", "projector_input_dim", 4096, "model_executor/models/mllama4.py "
                      "Llama4VisionPixelShuffleMLP.__init__ (a Llama4VisionMLP whose fc1 ColumnParallelLinear is "
                      "projector_input_dim wide)"))
_PIXTRAL_VIT = (_tower("heads", "num_attention_heads", 16, "model_executor/models/pixtral.py "
                       "PixtralHFAttention.__init__ (divide(num_attention_heads, tp_size))"),
                _tower("MLP", "intermediate_size", 4096, "model_executor/models/pixtral.py PixtralHFMLP.__init__ "
                       "(MergedColumnParallelLinear of intermediate_size)"))

_MOONVIT_TP = (_tower("heads", "num_attention_heads", 16, "model_executor/models/moonvit.py "
                      "MoonVitEncoderLayer.__init__ (divide(num_heads, tp_size))"),
               _tower("MLP", "intermediate_size", 4304, "model_executor/models/moonvit.py MLP2.__init__ "
                      "(fc0 ColumnParallelLinear)"))
# InternViT's attention falls back to data parallel where TP does not divide its heads
# (intern_vit.py InternParallelAttention.__init__), its MLP does not: InternMLP splits
# intermediate_size with disable_tp=is_vit_use_data_parallel(). Its config is remote code (no
# class default); not built here for that reason, restated from the source.
_INTERNVIT_MLP = TpSplit("vision tower MLP (InternViT)", ("intermediate_size",),
                         "model_executor/models/intern_vit.py InternMLP.__init__ (fc1 ColumnParallelLinear)",
                         section="vision_config")

# Architecture -> the sizes its class splits.
TP_SPLITS: dict[str, tuple[TpSplit, ...]] = {
    "Qwen2VLForConditionalGeneration": (_tower("heads", "num_heads", 16, "model_executor/models/qwen2_vl.py "
                                               "Qwen2VisionAttention.__init__ (divide(num_heads, tp_size))"),),
    "Qwen2_5_VLForConditionalGeneration": (
        _tower("heads", "num_heads", 16, _QWEN_VIT_HEADS),
        _tower("MLP", "intermediate_size", 3420, "model_executor/models/qwen2_5_vl.py Qwen2_5_VisionMLP.__init__ "
               "(MergedColumnParallelLinear: linear.py asserts each output size % tp_size == 0)")),
    "Qwen3VLForConditionalGeneration": _QWEN3_VIT,
    "Qwen3VLMoeForConditionalGeneration": _QWEN3_VIT,
    "Qwen3_5ForConditionalGeneration": _QWEN3_VIT,
    "Qwen3_5MoeForConditionalGeneration": _QWEN3_VIT,
    "Glm4vForConditionalGeneration": _GLM4V_VIT,
    "Glm4vMoeForConditionalGeneration": _GLM4V_VIT,
    "Gemma3ForConditionalGeneration": _SIGLIP_VIT,
    "Llama4ForConditionalGeneration": _LLAMA4_VIT,
    "Mistral3ForConditionalGeneration": _PIXTRAL_VIT,
    # kimi_vl.py builds MoonVitPretrainedModel (moonvit.py), not Kimi-K2.5's heads-aware tower.
    "KimiVLForConditionalGeneration": _MOONVIT_TP,
    "InternVLChatModel": (_INTERNVIT_MLP,),
    # KimiK3VisionConfig (transformers_utils/configs/kimi_k3.py) defaults: 12 heads, MLP 4096.
    "KimiK3ForConditionalGeneration": (replace(_MOONVIT_MLP, default=4096, heads_default=12),),
    "KimiK25ForConditionalGeneration": (_MOONVIT_MLP,),
    # KV heads split without the replication QKVParallelLinear does for TP > KV heads: each rank
    # needs a whole share.
    "GptOssForCausalLM": (TpSplit("KV heads", ("num_key_value_heads",), "model_executor/models/gpt_oss.py "
                                  "OAIAttention.__init__ (num_key_value_heads // tp_size; Attention then takes "
                                  "num_heads % num_kv_heads)"),),
    "Param2MoEForCausalLM": (TpSplit("KV heads", ("num_key_value_heads",), "model_executor/models/param2moe.py "
                                     "Param2MoEAttention.__init__ (assert num_kv_heads % tp_size == 0)"),),
    # 0.34.0 on (no older release registers it).
    "RicursiveForCausalLM": (TpSplit("KV heads", ("num_key_value_heads",), "model_executor/models/ricursive.py "
                                     "attention __init__ (raises unless num_key_value_heads % tp_size == 0)"),),
}


_EXPERT_WIDTH = ("model_executor/layers/fused_moe/config.py FusedMoEConfig.__post_init__ "
                 "(assert intermediate_size % tp_size == 0)")


EXPERT_PARALLEL_FLAGS = ("--enable-expert-parallel", "--enable_expert_parallel", "-ep")  # vllm serve's own spellings
NO_EXPERT_PARALLEL_FLAGS = ("--no-enable-expert-parallel", "--no_enable_expert_parallel")


def expert_parallel(extra_args: tuple[str, ...] | list[str]) -> bool:
    """Whether the server args enable expert parallel (the last of its flags wins, as argparse)."""
    flags = [a for a in extra_args if a in EXPERT_PARALLEL_FLAGS + NO_EXPERT_PARALLEL_FLAGS]
    return bool(flags) and flags[-1] in EXPERT_PARALLEL_FLAGS


def experts_and_width(config: Mapping[str, Any]) -> tuple[int, int]:
    """How many routed experts the LLM config has and each one's width: its own key where the
    config has one (a list there, per layer, is not read), else intermediate_size; 0 when absent."""
    width_key = "moe_intermediate_size" if "moe_intermediate_size" in config else "intermediate_size"
    return config_int(config, EXPERT_COUNT_KEYS) or 0, config_int(config, (width_key,)) or 0


# Kimi-K3's MoE pads its experts' width to a floor per rank before FusedMoE splits it
# (models/kimi_k3/nvidia/model.py KimiMoE.__init__: padded_moe_intermediate_size, unless expert
# parallel): a width whose share falls under min_moe_intermediate_per_partition (default 256)
# becomes that floor × TP, which always splits.
PADDED_EXPERT_ARCHITECTURES = frozenset({"KimiK3ForConditionalGeneration", "KimiK3MTPModel"})


def expert_width_failures(config: Mapping[str, Any], tp: int, architectures: tuple[str, ...] = ()) -> list[str]:
    """Every FusedMoE layer splits its experts' width over TP unless expert parallel is on
    (see expert_parallel) and asserts it splits whole, whatever the architecture or
    quantization. Built on the meta device: a Qwen3-MoE with 1100-wide experts builds at TP 4 and
    fails at TP 8 with an AssertionError; Kimi-K3 with 3000-wide experts builds at TP 16 (padded
    to 256 per rank) and one of 3004 fails at TP 8 (375.5 per rank is above the floor)."""
    experts, width = experts_and_width(config)
    if not experts or not width or width % tp == 0:
        return []
    floor = config_int(config, ("min_moe_intermediate_per_partition",), 256) or 0
    if PADDED_EXPERT_ARCHITECTURES & set(architectures) and width // tp < floor:
        return []
    return [f"mlp.experts: the experts' width {width} is not divisible by TP {tp} ({_EXPERT_WIDTH})"]


_DENSE_MLP = ("model_executor/layers/linear.py MergedColumnParallelLinear.__init__ (gate_up_proj: assert every "
              "output size % tp_size == 0) and RowParallelLinear.__init__ (down_proj: divide(input_size, tp_size))")


def _has_dense_layers(config: Mapping[str, Any]) -> bool:
    """Whether the model builds a dense MLP: no experts, or MoE layers that leave some layers dense
    (DeepSeek's first_k_dense_replace, Qwen-MoE's mlp_only_layers and decoder_sparse_step, ERNIE-4.5's
    moe_layer_start_index / moe_layer_end_index / moe_layer_interval: ernie45_moe.py
    Ernie4_5_MoeDecoderLayer.__init__)."""
    def key(name: str, default: int) -> int:
        return config_int(config, (name,), default) or 0

    layers = key("num_hidden_layers", 0)
    return (not experts_and_width(config)[0] or key("first_k_dense_replace", 0) > 0 or bool(config.get("mlp_only_layers"))
            or key("decoder_sparse_step", 1) > 1 or key("moe_layer_start_index", 0) > 0 or key("moe_layer_interval", 1) > 1
            or 0 < layers and key("moe_layer_end_index", layers - 1) < layers - 1)


def dense_mlp_failures(config: Mapping[str, Any], tp: int) -> list[str]:
    """Every dense MLP layer splits intermediate_size over TP (gate_up_proj and down_proj), in
    any architecture, EAGLE heads included: a dense model's, a MoE's leading dense layers
    (first_k_dense_replace), a Qwen-MoE's mlp_only_layers or off-step layers. A MoE whose every
    layer is sparse builds no dense MLP, whatever its intermediate_size. Built on the meta device:
    Qwen3-8B with intermediate_size 12300 builds at TP 4 and fails at TP 8, and so does an
    ERNIE-4.5-MoE whose first layer is dense (moe_layer_start_index 1)."""
    width = config_int(config, ("intermediate_size",))
    if not width or width % tp == 0 or not _has_dense_layers(config):
        return []
    return [f"mlp: the dense MLP's intermediate_size {width} is not divisible by TP {tp} ({_DENSE_MLP})"]


# The MoE blocks that refuse a TP above their routed experts, expert parallel or not
# (`if self.tp_size > config.<key>: raise ValueError("Tensor parallel size ... is greater than the
# number of experts ...")`), by the architectures that build them and the key they read. Found by
# reading every model file of 0.32.0, 0.33.0 and 0.34.0 for that test; an architecture a release
# does not register is refused before its build. Their MTP layers build the same block with the
# target's count. Other MoE classes (Mixtral, DeepSeek, gpt-oss, ...) build at any TP.
_EXPERT_COUNT_SOURCE = "the MoE block's __init__ (raises if tp_size > its routed experts)"
EXPERTS_AT_LEAST_TP: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("Qwen2MoeForCausalLM",), ("num_experts", "qwen2_moe.py Qwen2MoeSparseMoeBlock")),
    **dict.fromkeys(("Qwen3MoeForCausalLM", "Qwen3VLMoeForConditionalGeneration"),
                    ("num_experts", "qwen3_moe.py Qwen3MoeSparseMoeBlock")),
    **dict.fromkeys(("Qwen3NextForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"),
                    ("num_experts", "qwen3_next.py Qwen3NextSparseMoeBlock")),
    "Cohere2MoeForCausalLM": ("num_experts", "cohere2_moe.py Cohere2Moe"),
    **dict.fromkeys(("ExaoneMoeForCausalLM", "ExaoneMoEForCausalLM"), ("num_experts", "exaone_moe.py ExaoneMoe")),
    "HYV3ForCausalLM": ("num_experts", "hy_v3.py HYV3MoEFused"),
    "HYV4ForCausalLM": ("num_experts", "vllm/models/hy_v4/nvidia/moe.py (0.34.0)"),
    "InternS1ProForConditionalGeneration": ("num_experts", "interns1_pro.py InternS1ProMoeSparseMoeBlock"),
    "InternS2MobiusForConditionalGeneration": ("num_experts", "interns2_mobius.py InternS2MobiusMetaMoeBlock"),
    "K2HorizonForCausalLM": ("num_experts", "k2_horizon.py K2HorizonSparseMoeBlock"),
    "LagunaForCausalLM": ("num_experts", "laguna.py LagunaMoE"),
    "Lfm2MoeForCausalLM": ("num_experts", "lfm2_moe.py Lfm2MoeSparseMoeBlock"),
    "AliceAIForCausalLM": ("num_experts", "alice_ai.py AliceAISparseMoeBlock (0.33.0 on)"),
    **dict.fromkeys(("MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM"), ("n_routed_experts", "mimo_v2.py MiMoV2MoE")),
    "MiniMaxM2ForCausalLM": ("num_local_experts", "minimax_m2.py MiniMaxM2MoE"),
    **dict.fromkeys(("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"),
                    ("num_local_experts", "vllm/models/minimax_m3 model.py (0.34.0)")),
    "Ernie4_5_MoeForCausalLM": ("moe_num_experts", "ernie45_moe.py Ernie4_5_MoeMoE"),
    "Ernie4_5_VLMoeForConditionalGeneration": ("moe_num_experts", "ernie45_vl_moe.py Ernie4_5_VLMoeMoE (the largest of its list)"),
    **dict.fromkeys(("Step3TextForCausalLM", "Step3p5ForCausalLM"), ("moe_num_experts", "step3_text.py / step3p5.py FusedMoEBlock")),
    **dict.fromkeys(("Step5ForCausalLM", "Step5ForConditionalGeneration"),
                    ("moe_num_experts", "vllm/models/step5 model.py Step5MoE (0.34.0)")),
}


def expert_count_failures(architectures: tuple[str, ...], config: Mapping[str, Any], tp: int) -> list[str]:
    """The MoE blocks above raise while vLLM builds them when TP exceeds the routed experts: a
    4-expert Qwen3-MoE draft builds at TP 4 and fails at TP 8 ("Tensor parallel size 8 is greater
    than the number of experts 4"), with or without expert parallel."""
    arch = next((a for a in architectures if a in EXPERTS_AT_LEAST_TP), None)
    if arch is None:
        return []
    key, source = EXPERTS_AT_LEAST_TP[arch]
    # transformers 5 stores some under another name (Qwen3MoeConfig: num_experts is an
    # attribute_map alias of num_local_experts), which vLLM's getattr resolves.
    value = first_value(config, (key, *EXPERT_COUNT_KEYS))
    counts = value if isinstance(value, list) else [value]
    experts = max((c for c in counts if isinstance(c, int) and not isinstance(c, bool)), default=0)
    if not experts or tp <= experts:
        return []
    return [f"mlp: TP {tp} is greater than its {experts} routed experts ({key}; model_executor/models/{source}: "
            f"{_EXPERT_COUNT_SOURCE})"]


_GDN = ("model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py QwenGatedDeltaNetAttention.__init__ "
        "(conv1d ColumnParallelLinear of 2 x key width + value width, in_proj_qkvz MergedColumnParallelLinear "
        "of the key and value widths, A_log divide(num_v_heads, tp_size))")


# The classes that build QwenGatedDeltaNetAttention (qwen3_next.py; qwen3_5.py, from 0.34.0
# models/qwen3_5/); other GatedDeltaNet variants (OLMo-hybrid's) are not restated here.
QWEN_GDN_ARCHITECTURES = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})


def gated_delta_net_failures(architectures: tuple[str, ...], config: Mapping[str, Any], tp: int) -> list[str]:
    """GatedDeltaNet layers (Qwen3-Next, Qwen3.5) split their key width and value heads over
    TP. Built on the meta device: Qwen3.6-27B (16 key heads of 128) with a tower and a vocabulary
    TP 12 splits fails at TP 12 ("10240 is not divisible by 12"); Qwen3.5-122B's 16 key heads
    at TP 32 build (2048 / 32 is whole)."""
    value_heads = config_int(config, ("linear_num_value_heads",), None)
    if value_heads is None or not QWEN_GDN_ARCHITECTURES & set(architectures):
        return []
    key_width = (config_int(config, ("linear_num_key_heads",), 0) or 0) * (config_int(config, ("linear_key_head_dim",), 0) or 0)
    out = []
    if key_width % tp:
        out.append(f"linear_attn (GatedDeltaNet): the key width {key_width} is not divisible by TP {tp} ({_GDN})")
    if value_heads % tp:
        out.append(f"linear_attn (GatedDeltaNet): the {value_heads} value heads are not divisible by TP {tp} ({_GDN})")
    return out


VOCAB_PADDING = 64  # vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
_VOCAB = ("model_executor/layers/vocab_parallel_embedding.py VocabParallelEmbedding.__init__ -> "
          "vocab_range_from_global_vocab_size (divide(pad_vocab_size(vocab_size, 64), tp_size))")


def vocab_failures(vocab_size: int, tp: int) -> list[str]:
    """Every model's embedding and LM head split the vocabulary, padded to a multiple of 64, over
    TP. Built on the meta device: Qwen3.6-27B's 248320 fails at TP 12 ("248320 is not divisible
    by 12") once its vision tower splits."""
    padded = -(-vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    if vocab_size <= 0 or padded % tp == 0:
        return []
    return [f"embed_tokens: the vocabulary {vocab_size} (padded to {padded}) is not divisible by TP {tp} ({_VOCAB})"]


def tp_split_failures(architectures: tuple[str, ...], config: Mapping[str, Any], sections: Mapping[str, Mapping[str, Any]],
                      tp: int) -> list[str]:
    """Why the first registered of `architectures` cannot be built at `tp`: one sentence per
    size that does not split ([] when all do). `config` is the LLM config, `sections` the
    sub-configs by name (vision_config, ...)."""
    arch = next((a for a in architectures if a in TP_SPLITS), None)
    out = []
    for rule in TP_SPLITS.get(arch, ()) if arch else ():
        section = sections.get(rule.section, {}) if rule.section else config
        size = config_int(section, rule.size_keys, rule.default)
        if size is None:
            continue
        if rule.tp_only_when_heads_divide:
            heads = config_int(section, rule.tp_only_when_heads_divide, rule.heads_default)
            if heads is None or heads % tp:
                continue  # the tower runs data parallel, unsplit
        if size % tp:
            out.append(f"{arch}'s {rule.what}: {size} is not divisible by TP {tp} ({rule.source})")
    return out
