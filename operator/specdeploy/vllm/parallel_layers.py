"""Every layer vLLM splits over TP in the architectures specdeploy supports, and the rule that
covers it (or why none is needed).

The sites and builds come from scripts/audit_tp_layers.py, run in each release's venv
(data/parallel_layers-<version>.json): it walks each architecture's class in vLLM's source and
records each parallel layer built, the width it splits and where it stands (file and line)."""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data"

# What specdeploy judges: the fixtures' targets and drafts, under the names vLLM looks up
# (EAGLE renames, DSpark classes), the MTP modules those targets give, and every architecture
# a rule of tp_splits.py names.
AUDITED_ARCHITECTURES = frozenset({
    # dense and MoE targets (and the drafts built from them, draft_model)
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Qwen2MoeForCausalLM", "MixtralForCausalLM", "GptOssForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM",
    "GlmMoeDsaForCausalLM", "Ernie4_5_MoeForCausalLM", "Llama4ForCausalLM",
    # hybrid (linear attention, state-space) targets
    "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "JambaForCausalLM", "Mamba2ForCausalLM",
    "FalconMambaForCausalLM", "FalconH1ForCausalLM", "Zamba2ForCausalLM", "NemotronHForCausalLM",
    "GraniteMoeHybridForCausalLM",
    # multimodal targets: their vision towers and projectors
    "KimiK3ForConditionalGeneration", "KimiK25ForConditionalGeneration", "KimiVLForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
    "Glm4vForConditionalGeneration", "Glm4vMoeForConditionalGeneration", "Gemma3ForConditionalGeneration",
    "Llama4ForConditionalGeneration", "Mistral3ForConditionalGeneration",
    # drafts: EAGLE, EAGLE-3, DFlash, DSpark heads, Medusa (vLLM registers no MLP speculator class)
    "EagleLlamaForCausalLM", "Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3Qwen3ForCausalLM",
    "DFlashDraftModel", "Qwen3DSparkModel", "K3DSparkModel", "DSparkDraftModel", "MedusaModel",
    # MTP modules of the targets above
    "DeepSeekMTPModel", "DeepseekV32MTPModel", "DeepSeekV4MTPModel", "KimiK3MTPModel", "Qwen3NextMTP",
    "Qwen3_5MTP", "Qwen3_5MoeMTP", "ErnieMTPModel", "NemotronHMTPModel",
})


def audit_path(version: str) -> Path:
    """Where scripts/audit_tp_layers.py keeps a release's audit."""
    return DATA_DIR / f"parallel_layers-{version}.json"


@lru_cache(maxsize=None)
def audit(version: str) -> dict[str, Any]:
    """A release's audit (sites, builds, architectures)."""
    return json.loads(audit_path(version).read_text(encoding="utf-8"))


def audit_key(version: str, architecture: str, key: str) -> bool:
    """Whether the release's audit reaches the site or build `key` from `architecture`'s class."""
    try:
        reached = audit(version)["architectures"].get(architecture)
    except FileNotFoundError:
        return False
    return reached is not None and (key in reached["sites"] or key in reached["builds"])


def cite(version: str, key: str) -> str:
    """`file:line Class.attr` of an audited site or build in the release."""
    path, _, where = key.partition("::")
    data = audit(version)
    entry = data["sites"].get(key) or data["builds"].get(key) or {}
    line = f":{entry['line']}" if "line" in entry else ""
    return f"{path}{line} {where.split('->')[0]}, vLLM {version}"


def audited(version: str, architecture: str) -> bool:
    """Whether the release's audit holds the architecture (its registry has it and we audit it)."""
    try:
        return architecture in audit(version)["architectures"]
    except FileNotFoundError:
        return False


# What covers each audited site and build: a rule (the dotted name, under specdeploy, of the
# function or table that checks the width) or, after "none:", why no rule is needed. The first
# matching glob wins; tests/unit/test_parallel_layers.py fails for an audited key none matches,
# and for a glob no release's audit has.
HEADS = "validation.rules.check_model_tp"
VOCAB = "vllm.tp_splits.vocab_failures"
DENSE = "vllm.tp_splits.dense_mlp_failures"
EXPERTS = "vllm.tp_splits.expert_width_failures"
GDN = "vllm.tp_splits.gated_delta_net_failures"
TOWERS = "vllm.tp_splits.TP_SPLITS"
LAYERS = "vllm.layer_splits.LAYER_SPLITS"
BUILDER = "none: the width is its builder's argument, covered where it is built (the builds)"
STRUCTURE = "none: passes the config on; what it builds is audited on its own"
TOWER_MULTIPLE = "none: a multiple of the vision tower's heads (hidden size × merge²), which TP_SPLITS checks"
RUNTIME = "none: pads the tokens at run time (no weight is split)"
SEQUENCE_PARALLEL = "none: only under sequence-parallel MoE (data parallel with expert parallel), which specdeploy never plans"
MAMBA_STATE = "none: the state shapes of a mixer whose heads, groups and width LAYER_SPLITS checks"
K3_TAIL = ("none: Kimi-K3's latent-MoE tail kernels, only on SM100 at TP 8 or 16 (latent_moe_runner.py), "
           "which split the hidden size 7168 whole")
_MLP_CLASSES = ("*::*MLP.*", "*::Zamba2LoRA.B*")
_TOWER_FILES = ("siglip", "pixtral", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4_1v", "moonvit", "kimi_k25_vit", "mllama4", "vision")

COVERAGE: tuple[tuple[str, str], ...] = (
    # sites: vision towers, projectors and mergers; attention (every family's QKV/o_proj, MLA's
    # q/kv_b/o projections, KDA, GDN); mixers; MLPs (their width is the builder's)
    ("*::Qwen2VisionPatchMerger.*", TOWER_MULTIPLE), ("*::Qwen2_5_VisionPatchMerger.*", TOWER_MULTIPLE),
    ("*::Qwen3_VisionPatchMerger.*", TOWER_MULTIPLE),
    *((f"*/{name}.py::*", TOWERS) for name in _TOWER_FILES if name not in ("mllama4", "vision")),
    ("*/mllama4.py::Llama4Vision*", TOWERS), ("*/mllama4.py::Llama4UnfoldConvolution.*", TOWER_MULTIPLE),
    ("*/mllama4.py::Llama4MultiModalProjector.*", LAYERS), ("*/vision.py::is_vit_use_data_parallel.*", TOWERS),
    ("*::GraniteMoeHybridAttention.o_proj", LAYERS), ("*::*Attention*.__init__*", HEADS), ("*::*Attention*.o_proj", HEADS), ("*::*Attention.qkv_proj", HEADS),
    ("*::*Attention.q_proj", HEADS), ("*::*Attention.q_b_proj", HEADS), ("*::*Attention.kv_b_proj", HEADS),
    ("*::*Attention.g_proj", HEADS), ("*::*Attention.wq_b", HEADS), ("*::*DecoderLayer.qkv_proj", HEADS),
    ("*::MultiHeadLatentAttention.*", HEADS),
    ("*/deepseek_v4/attention.py::DeepseekV4Attention.wo_*", LAYERS),
    ("*/kda.py::KimiK3DeltaAttention.*", LAYERS), ("*::KimiGatedDeltaNetAttention.*", LAYERS),
    ("*::QwenGatedDeltaNetAttention.*", GDN),
    ("*/grouped_wo_a.py::DeepseekV4GroupedWoA.*", LAYERS),
    ("*/mamba_mixer2.py::*", LAYERS), ("*/mamba_mixer.py::*", LAYERS), ("*/mamba_utils.py::*", MAMBA_STATE),
    ("*::Zamba2LoRA.A", LAYERS), ("*/mistral.py::MistralDecoderLayer.ada_rms_norm_t_cond*", LAYERS),
    ("*/mistral3.py::Mistral3MultiModalProjector.*", LAYERS),
    ("*::*MultiTokenPredictor.fc", LAYERS), ("*::NemotronHMTP*.eh_proj", LAYERS),
    ("*::*.sp_pad", RUNTIME), ("*::shard_sequence_parallel_mlp.*", SEQUENCE_PARALLEL),
    ("*/latent_moe_tail/*", K3_TAIL), ("*/ops/latent_moe_tail.py::*", K3_TAIL),
    *((glob, BUILDER) for glob in _MLP_CLASSES),
    # builds: where each MLP gets its width, and the structure between
    ("*::*shared_expert*", LAYERS), ("*::*.shared_mlp->*", LAYERS),
    ("*/llama4.py::Llama4DecoderLayer.feed_forward->LlamaMLP", LAYERS),
    ("*.mlp->*MLP", DENSE), ("*.feed_forward->*MLP", DENSE), ("*.mixer->*MLP", DENSE), ("*_adapter->Zamba2LoRA", LAYERS),
    ("*->*MoE", EXPERTS), ("*->*SparseMoeBlock", EXPERTS),
    ("*->*Attention", HEADS), ("*->KimiK3DSAIndexer", HEADS), ("*->Indexer", HEADS), ("*->*Compressor", HEADS),
    ("*->*Indexer", HEADS), ("*->MambaMixer*", LAYERS),
    ("*->*MultiModalProjector", LAYERS), ("*->DSparkMarkovHead", VOCAB), ("*->SharedHead", VOCAB),
    ("*->*", STRUCTURE),
)


def coverage(key: str, record: dict[str, Any]) -> str | None:
    """The rule (or reason) COVERAGE gives an audited site or build; a replicated layer
    (disable_tp=True), a vocabulary split or the routed experts are covered whatever their
    class. None: nothing covers it (a gap to close before the release is supported)."""
    layer, split = record.get("layer", ""), " ".join(record.get("split", ()))
    if record.get("disable_tp") == "True":
        return "none: replicated (disable_tp=True)"
    if layer in ("VocabParallelEmbedding", "ParallelLMHead"):
        return LAYERS if "draft_vocab_size" in split or "truncated_vocab_size" in split else VOCAB
    if layer.startswith(("FusedMoE", "SharedFusedMoE")):
        return EXPERTS
    return next((rule for glob, rule in COVERAGE if fnmatchcase(key, glob)), None)
