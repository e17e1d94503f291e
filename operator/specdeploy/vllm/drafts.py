"""How vLLM names and rewrites a draft per speculative method (same logic in every supported
release; where a release differs, `rule_sets.py` says so).

Sources: vllm/transformers_utils/configs/eagle.py (EAGLEConfig's renaming),
vllm/config/speculative.py (SpeculativeConfig.__post_init__: DSpark detection, the target
as its own draft, k defaults), vllm/transformers_utils/configs/speculators/algos.py."""

from __future__ import annotations

from typing import Iterable

# DSpark draft architectures vLLM keeps as they are (speculative.py `_QWEN3*_DSPARK`, Gemma4,
# K3 MLA, MuseSpark in 0.33); any other architecture under method dspark is rewritten into
# DeepSeek-V4's in-checkpoint DSpark head (DSparkDraftModel).
DSPARK_ARCHITECTURES = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel",
                                  "K3DSparkModel", "MuseSparkDSparkModel"})
# The DSpark architectures a speculators-format checkpoint may name (speculators/algos.py).
SPECULATORS_DSPARK_ARCHITECTURES = ("Qwen3DSparkModel", "Qwen3OmniDSparkModel")
# Targets whose checkpoint carries its own DSpark head (DSparkDraftModel / the V4.1 variant).
IN_CHECKPOINT_DSPARK_TARGETS = frozenset({"deepseek_v4", "deepseek_v41"})
# Methods with no draft checkpoint of their own.
MODEL_FREE_METHODS = frozenset({"ngram", "suffix"})
# Without a draft model vLLM drafts from the target checkpoint itself, when k is set: its MTP
# layers, or the DSpark head a DeepSeek-V4 checkpoint ships (__post_init__).
TARGET_AS_DRAFT_METHODS = frozenset({"mtp", "dspark"})
# Pipeline parallelism: vLLM forces the draft to PP=1; DSpark stops sharing the target embedding
# under PP and MTP+PP is broken upstream (reference/vllm-facts.md §1.8).
NO_PIPELINE_PARALLEL = frozenset({"dspark", "mtp"})
# Drafts built with the target's VllmConfig and TP group, whatever draft_tensor_parallel_size
# says: v1/worker/gpu/spec_decode/eagle/utils.py `load_eagle_model` (eagle, eagle3, mtp) and
# dflash/utils.py `load_dflash_model`; dspark and draft_model build with the draft's.
DRAFT_AT_TARGET_TP_METHODS = frozenset({"eagle", "eagle3", "mtp", "dflash"})
# SpeculativeConfig.use_eagle(): drafts on the target's hidden states. With chunked local
# attention in the target, config/vllm.py turns the hybrid KV cache manager off for them.
USE_EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})
# What DeepSeek-V4's DSpark head (models/deepseek_v4/nvidia/dspark.py DSparkDeepseekV4Model,
# the class vLLM builds for a `DSparkDraftModel`) reads from the draft's config with no default,
# in the order it reads them.
DSPARK_V4_REQUIRED_FIELDS = ("hidden_size", "hc_mult", "hc_eps", "rms_norm_eps", "num_hidden_layers",
                             "dspark_target_layer_ids", "vocab_size", "index_topk", "head_dim",
                             "dspark_markov_rank")
# DSpark classes whose __init__ reads `config.markov_rank` with no default
# (models/qwen3_dspark.py, models/gemma4_dspark.py).
MARKOV_RANK_DSPARK_ARCHITECTURES = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel"})
# Drafts that borrow the target's embedding and lm_head unless they ship different ones
# (eagle/utils.py `maybe_share_target_embed` and the lm_head share, used by dflash and dspark).
SHARES_TARGET_EMBEDDINGS = frozenset({"eagle", "eagle3", "dflash", "dspark"})
# Drafts that keep no KV cache of their own (MLP heads, or no draft model at all).
DRAFT_KV_FREE_METHODS = frozenset({"medusa", "mlp_speculator", "ngram", "suffix"})


def eagle_architectures(method: str, architectures: Iterable[str]) -> list[str]:
    """The names EAGLEConfig gives a draft wrapped for `method` (eagle.py __init__):
    LlamaForCausalLM -> EagleLlamaForCausalLM (eagle), Eagle3LlamaForCausalLM (eagle3),
    DFlashLlamaForCausalLM (dflash). Other methods keep the names as written."""
    archs = list(architectures)
    if method == "eagle":
        return [a if a.startswith("Eagle") else f"Eagle{a}" for a in archs]
    if method == "eagle3":
        return [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}" for a in archs]
    if method == "dflash":
        return [a if a.startswith("DFlash") or a.endswith("DFlash") or a == "LiLiCorrDraftModel" else f"DFlash{a}"
                for a in archs]
    return archs


def draft_architectures(method: str, model_type: str, architectures: Iterable[str]) -> list[str]:
    """The architecture names vLLM looks up for a draft under `method`: the EAGLE renaming,
    DSpark's rename of a Qwen3 `DSparkDraftModel` to `Qwen3DSparkModel`, and no re-wrap for
    drafts whose config class already chose them (speculators format, vLLM's EAGLE format)."""
    archs = list(architectures)
    if model_type in ("speculators", "eagle"):
        return archs
    if method == "dspark" and "DSparkDraftModel" in archs and model_type == "qwen3":
        return ["Qwen3DSparkModel"]
    return eagle_architectures(method, archs)


def default_k_source(method: str) -> str:
    """The draft-config field vLLM defaults k from, for messages."""
    return "block_size" if method == "dspark" else "n_predict"
