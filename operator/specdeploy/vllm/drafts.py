"""How vLLM names and rewrites a draft per speculative method (same logic in every supported
release; where a release differs, `release_logic.py` says so). What each method is lives in
`methods.py`.

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
# speculators/algos.py SUPPORTED_SPECULATORS_TYPES: per `speculators_model_type`, the architecture
# vLLM loads: by the layer config's model_type (eagle3, peagle), one fixed name (dflash, dflash2),
# or the first the checkpoint names of a tuple, defaulting to the tuple's first (dspark).
SPECULATORS_ARCHITECTURES: dict[str, dict[str, str] | str | tuple[str, ...]] = {
    "eagle3": {"qwen3": "Eagle3Qwen3ForCausalLM", "llama": "Eagle3LlamaForCausalLM"},
    "peagle": {"qwen3": "PeagleQwen3ForCausalLM", "llama": "PeagleLlamaForCausalLM"},
    "dflash": "DFlashDraftModel",
    "dflash2": "DFlash2DraftModel",
    "dspark": ("Qwen3DSparkModel", "Qwen3OmniDSparkModel"),
}
# Targets whose checkpoint carries its own DSpark head (DSparkDraftModel / the V4.1 variant).
IN_CHECKPOINT_DSPARK_TARGETS = frozenset({"deepseek_v4", "deepseek_v41"})
# What DeepSeek-V4's DSpark head (models/deepseek_v4/nvidia/dspark.py DSparkDeepseekV4Model,
# the class vLLM builds for a `DSparkDraftModel`) reads from the draft's config with no default,
# in the order it reads them.
DSPARK_V4_REQUIRED_FIELDS = ("hidden_size", "hc_mult", "hc_eps", "rms_norm_eps", "num_hidden_layers",
                             "dspark_target_layer_ids", "vocab_size", "index_topk", "head_dim",
                             "dspark_markov_rank")
# DSpark classes whose __init__ reads `config.markov_rank` with no default
# (models/qwen3_dspark.py, models/gemma4_dspark.py).
MARKOV_RANK_DSPARK_ARCHITECTURES = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel"})
# The model_type of a draft saved in vLLM's own EAGLE format (transformers_utils/configs/eagle.py
# EAGLEConfig), whose default method is eagle.
EAGLE_FORMAT_MODEL_TYPE = "eagle"


def eagle_format_architectures(architectures: Iterable[str]) -> list[str]:
    """The names EAGLEConfig gives an EAGLE-format draft (its default method, eagle)."""
    return eagle_architectures(EAGLE_FORMAT_MODEL_TYPE, architectures)


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
    renamed = dspark_rename(model_type, archs) if method == "dspark" else None
    return [renamed] if renamed else eagle_architectures(method, archs)


def dspark_rename(model_type: str, architectures: Iterable[str]) -> str | None:
    """The class vLLM builds a Qwen3 `DSparkDraftModel` as: SpeculativeConfig.__post_init__
    (vllm/config/speculative.py) rewrites the draft's architectures to `Qwen3DSparkModel` when
    they include `DSparkDraftModel` and `hf_config.model_type` (the top-level one) is qwen3.
    None when no rename applies."""
    return "Qwen3DSparkModel" if "DSparkDraftModel" in architectures and model_type == "qwen3" else None
