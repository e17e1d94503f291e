"""The parity grid: every target/draft pair in tests/fixtures that makes sense, every method
that applies to it, target TP 1, 2, 3, 4, 6, 8, 16 and draft TP 1 and equal to the target's;
and LOAD_SPLIT_CASES, where a model's own layers decide the TP (up to 32).

Pure data (no vLLM import) so that the grid is the same for vLLM's side and ours. Pairs
include deliberate mismatches (different vocab, wrong family, broken K3 DSpark drafts,
targets without MTP layers) so that both verdicts occur."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL = FIXTURES / "model-configs"
SYNTHETIC = FIXTURES / "synthetic"

TPS = (1, 2, 3, 4, 6, 8, 16)
MODEL_FREE = ("ngram", "suffix")


@lru_cache(maxsize=None)
def configs() -> dict[str, dict[str, Any]]:
    """name -> config.json, for every real and synthetic fixture."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(REAL.glob("*.json")) + sorted(SYNTHETIC.glob("*.json")):
        out[path.stem] = json.loads(path.read_text())
    # Real drafts saved without `architectures` (vLLM names them by model_type, then loads them
    # through its Transformers backend, or refuses the EAGLE-renamed name).
    for name in NO_ARCHITECTURES:
        out[f"{name}-no-architectures"] = {k: v for k, v in out[name].items() if k != "architectures"}
    return {**out, **held_out_configs(out)}


HELD_OUT = FIXTURES / "held-out-splits.json"


def held_out_entries() -> dict[str, dict[str, Any]]:
    """The held-out sub-module cases (tests/fixtures/held-out-splits.json), by name."""
    return {k: v for k, v in json.loads(HELD_OUT.read_text()).items() if not k.startswith("_")}


def held_out_configs(fixtures: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each held-out config: its base fixture with `set` applied at `section` (or a whole `config`)."""
    out = {}
    for name, entry in held_out_entries().items():
        if "config" in entry:
            out[name] = entry["config"]
            continue
        config = json.loads(json.dumps(fixtures[entry["base"]]))
        place = config
        for key in entry.get("section", ()):
            place = place[key]
        place.update(entry["set"])
        out[name] = config
    return out


NO_ARCHITECTURES = ("Qwen__Qwen3-0.6B", "meta-llama__Llama-3.2-1B-Instruct", "specforge__llama3-8B-eagle3")


TARGETS = (
    "Qwen__Qwen2.5-7B-Instruct", "Qwen__Qwen3-235B-A22B", "Qwen__Qwen3-32B", "Qwen__Qwen3-8B",
    "deepseek-ai__DeepSeek-V2-Lite", "deepseek-ai__DeepSeek-V3", "meta-llama__Llama-3.1-70B-Instruct",
    "meta-llama__Llama-3.1-8B-Instruct", "mistralai__Mixtral-8x22B-Instruct-v0.1",
    "moonshotai__Kimi-K2-Instruct", "moonshotai__Kimi-K3", "openai__gpt-oss-120b", "zai-org__GLM-5",
)

K3 = "moonshotai__Kimi-K3"
K3_DRAFTS = (
    "k3-dspark-released", "k3-dspark-block5", "specforge__kimi-k3-dspark", "specforge__kimi-k3-dspark-5mla",
    "k3-dspark-bad-mla-use-nope", "k3-dspark-bad-mla-use-output-gate", "k3-dspark-bad-mla-use-qk-norm",
    "k3-dspark-bad-bonus-anchor", "k3-dspark-bad-no-q-lora", "k3-dspark-bad-draft-vocab",
    "k3-dspark-bad-empty-target-layers", "k3-dspark-bad-target-layer-count",
)

# (target, draft, method) for methods with a draft checkpoint of their own.
DRAFT_PAIRS: tuple[tuple[str, str, str], ...] = (
    # draft_model: same family (valid), different tokenizer (vLLM refuses the vocab)
    ("Qwen__Qwen2.5-7B-Instruct", "Qwen__Qwen2.5-0.5B", "draft_model"),
    ("Qwen__Qwen3-32B", "Qwen__Qwen3-0.6B", "draft_model"),
    ("Qwen__Qwen3-235B-A22B", "Qwen__Qwen3-0.6B", "draft_model"),
    ("Qwen__Qwen3-32B", "Qwen__Qwen3-8B", "draft_model"),
    ("Qwen__Qwen3-8B", "Qwen__Qwen3-0.6B", "draft_model"),
    ("meta-llama__Llama-3.1-70B-Instruct", "meta-llama__Llama-3.2-1B-Instruct", "draft_model"),
    ("meta-llama__Llama-3.1-8B-Instruct", "meta-llama__Llama-3.2-1B-Instruct", "draft_model"),
    ("meta-llama__Llama-3.1-8B-Instruct", "Qwen__Qwen3-0.6B", "draft_model"),
    ("deepseek-ai__DeepSeek-V3", "deepseek-ai__DeepSeek-V2-Lite", "draft_model"),
    # drafts without an `architectures` key
    ("Qwen__Qwen3-8B", "Qwen__Qwen3-0.6B-no-architectures", "draft_model"),
    ("meta-llama__Llama-3.1-8B-Instruct", "meta-llama__Llama-3.2-1B-Instruct-no-architectures", "draft_model"),
    ("meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3-no-architectures", "eagle3"),
    # EAGLE / EAGLE3 heads
    ("meta-llama__Llama-3.1-8B-Instruct", "SafeAILab__EAGLE-LLaMA3-Instruct-8B", "eagle"),
    ("meta-llama__Llama-3.1-8B-Instruct", "eagle-format-llama3-8b", "eagle"),
    ("meta-llama__Llama-3.1-8B-Instruct", "eagle-format-llama3-8b", "eagle3"),
    ("meta-llama__Llama-3.1-70B-Instruct", "SafeAILab__EAGLE-LLaMA3-Instruct-8B", "eagle"),
    ("meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3", "eagle3"),
    ("meta-llama__Llama-3.1-70B-Instruct", "specforge__llama3-8B-eagle3", "eagle3"),
    ("Qwen__Qwen3-32B", "specforge__qwen3-32b-eagle3", "eagle3"),
    ("openai__gpt-oss-120b", "specforge__gpt-oss-120B-eagle3", "eagle3"),
    # speculators-format EAGLE3 head (transformer_layer_config; vLLM's SpeculatorsConfig)
    ("meta-llama__Llama-3.1-8B-Instruct", "speculators-llama3.1-8b-eagle3", "eagle3"),
    ("meta-llama__Llama-3.1-70B-Instruct", "speculators-llama3.1-8b-eagle3", "eagle3"),
    # DFlash
    ("Qwen__Qwen3-8B", "specforge__qwen3-8b-dflash", "dflash"),
    # Medusa and the MLP speculator (disabled in vLLM 0.32.0's registry)
    ("meta-llama__Llama-3.1-8B-Instruct", "medusa-llama3-8b", "medusa"),
    ("meta-llama__Llama-3.1-8B-Instruct", "medusa-old-format-vicuna", "medusa"),
    ("meta-llama__Llama-3.1-8B-Instruct", "mlp-speculator-llama3-8b", "mlp_speculator"),
    # Kimi-K3 DSpark drafts: both PR #54005 layouts, SpecForge templates, each rejection rule
    *((K3, d, "dspark") for d in K3_DRAFTS),
    # A dense (non-DSpark) draft under dspark: vLLM accepts the config (DSparkDraftModel)
    ("Qwen__Qwen3-8B", "Qwen__Qwen3-0.6B", "dspark"),
    # Draft TP 1 is no way out for a draft whose 24 heads the target's TP does not split: draft_model
    # and dspark drafts get a draft-TP parallel_config no layer reads (meta-device build: vLLM's
    # config accepts TP 16 with draft TP 1, the draft's attention asserts at load)
    ("meta-llama__Llama-3.1-70B-Instruct", "draft-tp-llama-24-heads", "draft_model"),
    ("Qwen__Qwen3-8B", "draft-tp-dspark-qwen3-24-heads", "dspark"),
)

DEFAULT_K_PAIRS: tuple[tuple[str, str | None, str], ...] = (
    (K3, "k3-dspark-released", "dspark"),
    (K3, "k3-dspark-block5", "dspark"),
    (K3, "specforge__kimi-k3-dspark", "dspark"),
    (K3, "dspark-qwen3-block-size-in-dflash-config", "dspark"),
    ("deepseek-ai__DeepSeek-V3", None, "mtp"),
    ("deepseek-ai__DeepSeek-V3", None, "dspark"),
    ("meta-llama__Llama-3.1-8B-Instruct", "meta-llama__Llama-3.2-1B-Instruct", "draft_model"),
    ("meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3", "eagle3"),
    ("meta-llama__Llama-3.1-8B-Instruct", "speculators-llama3.1-8b-eagle3", "eagle3"),
    ("meta-llama__Llama-3.1-8B-Instruct", None, "suffix"),
    ("meta-llama__Llama-3.1-8B-Instruct", "medusa-old-format-vicuna", "medusa"),
)

# dspark without a draft model drafts from the target checkpoint (DeepSeek-V4's own head).
DSPARK_TARGETS = ("deepseek-ai__DeepSeek-V3", "Qwen__Qwen3-8B")

# MTP reads the target's own layers: targets with and without MTP layers.
MTP_TARGETS = (
    "deepseek-ai__DeepSeek-V3", "zai-org__GLM-5", K3, "Qwen__Qwen3-8B",
    "deepseek-ai__DeepSeek-V2-Lite", "moonshotai__Kimi-K2-Instruct",
)


@dataclass(frozen=True)
class Case:
    target: str
    draft: str | None
    method: str
    k: int | None  # None: not set, so each side applies its own default (block_size, n_predict)
    tp: int
    draft_tp: int | None  # None: not set (model-free methods use the target's layout)
    speculative_config: tuple[tuple[str, Any], ...] = ()  # further SpeculativeConfig keys

    @property
    def id(self) -> str:
        dtp = "" if self.draft_tp is None else f"-dtp{self.draft_tp}"
        k = "default" if self.k is None else self.k
        extra = "".join(f"-{key}={value}" for key, value in self.speculative_config)
        return f"{self.target}+{self.draft or '-'}-{self.method}-k{k}-tp{self.tp}{dtp}{extra}"

    @property
    def pair(self) -> str:
        return f"{self.target} + {self.draft or '(target)'}"


def _k(method: str, draft: dict[str, Any] | None) -> int:
    """k as a user would set it: the draft's block size for DSpark/DFlash, 1 for MTP."""
    if method in ("dspark", "dflash") and draft and draft.get("block_size"):
        return int(draft["block_size"])
    if method == "mtp":
        return 1
    return 3


def _draft_tps(tp: int) -> tuple[int, ...]:
    return (1,) if tp == 1 else (1, tp)


# Where vLLM releases differ (0.32.0 -> 0.33.0): SpeculativeConfig keys and values one release
# has and the other lacks, and the checks that come with them (vllm/config/speculative.py).
LLAMA8, LLAMA1, EAGLE3 = "meta-llama__Llama-3.1-8B-Instruct", "meta-llama__Llama-3.2-1B-Instruct", "specforge__llama3-8B-eagle3"
QWEN8, DFLASH, K3_DRAFT = "Qwen__Qwen3-8B", "specforge__qwen3-8b-dflash", "k3-dspark-released"
AUX_TARGET = "llama3-8b-aux-hidden-states"
VERSION_CASES: tuple[tuple[str, str | None, str, int | None, dict[str, Any]], ...] = (
    # FLy, a lossy rejection sampler (0.33.0): k >= 2 and fly_window_size < k
    (LLAMA8, None, "ngram", 3, {"rejection_sample_method": "fly"}),
    (LLAMA8, None, "ngram", 1, {"rejection_sample_method": "fly"}),
    (LLAMA8, None, "ngram", 3, {"rejection_sample_method": "fly", "fly_window_size": 3}),
    (LLAMA8, None, "ngram", 4, {"rejection_sample_method": "fly", "fly_window_size": 2}),
    (LLAMA8, None, "ngram", 3, {"fly_entropy_threshold": -0.5}),
    (LLAMA8, EAGLE3, "eagle3", 3, {"rejection_sample_method": "fly"}),
    # a quantized copy of the shared lm_head (0.33.0): EAGLE/EAGLE3/MTP only
    (LLAMA8, EAGLE3, "eagle3", 3, {"draft_lm_head_quantization": "fp8"}),
    (LLAMA8, LLAMA1, "draft_model", 3, {"draft_lm_head_quantization": "fp8"}),
    (LLAMA8, EAGLE3, "eagle3", 3, {"draft_lm_head_quantization": "int4"}),
    (LLAMA8, EAGLE3, "eagle3", 3, {"disable_lookahead_block_hashes": True}),
    # XPress narrowing (0.33.0): only XPress drafts
    (LLAMA8, EAGLE3, "eagle3", 3, {"xpress_topc": 8}),
    # heterogeneous vocab cannot use local argmax (0.33.0 refuses; 0.32.0 takes it)
    (LLAMA8, LLAMA1, "draft_model", 3, {"use_heterogeneous_vocab": True, "use_local_argmax_reduction": True}),
    (LLAMA8, LLAMA1, "draft_model", 3, {"use_heterogeneous_vocab": True}),
    # kv_cache_dtype: 0.33.0 takes any string a platform backend may register
    (LLAMA8, EAGLE3, "eagle3", 3, {"kv_cache_dtype": "fp8"}),
    # 0.34.0 -> parallel_drafting=True only with dflash and dspark (deprecated: False is a no-op)
    (LLAMA8, EAGLE3, "eagle3", 3, {"parallel_drafting": True}),
    (LLAMA8, EAGLE3, "eagle3", 3, {"parallel_drafting": False}),
    (QWEN8, DFLASH, "dflash", 8, {"parallel_drafting": True}),
    # 0.34.0 removed disable_padded_drafter_batch (and use_heterogeneous_vocab, above)
    (LLAMA8, LLAMA1, "draft_model", 3, {"disable_padded_drafter_batch": True}),
    # 0.34.0 added draft_decode_context_parallel_size (1 or the target's DCP: 1 here)
    (LLAMA8, EAGLE3, "eagle3", 3, {"draft_decode_context_parallel_size": 1}),
    (LLAMA8, EAGLE3, "eagle3", 3, {"draft_decode_context_parallel_size": 2}),
    (LLAMA8, None, "ngram", 3, {"draft_decode_context_parallel_size": 2}),
    # 0.34.0 added suffix_decoding_corpus_tokens, in [0, 2**31)
    (LLAMA8, None, "suffix", 4, {"suffix_decoding_corpus_tokens": 0}),
    (LLAMA8, None, "suffix", 4, {"suffix_decoding_corpus_tokens": -1}),
    # 0.34.0 checks the method-specific options against the speculator's supported_options
    (LLAMA8, EAGLE3, "eagle3", 3, {"speculator_options": {"depth": 2}}),
    (LLAMA8, EAGLE3, "eagle3", 3, {"draft_lm_head_quantization": "fp8", "parallel_drafting": False}),
    ("deepseek-ai__DeepSeek-V3", None, "mtp", 1, {"index_share_for_mtp_iteration": True}),
    (LLAMA8, EAGLE3, "eagle3", 3, {"index_share_for_mtp_iteration": True}),
    # suffix's default k: the tree depth up to 0.33.0, min(8, depth) from 0.34.0
    (LLAMA8, None, "suffix", None, {"rejection_sample_method": "fly", "fly_window_size": 10}),
    (LLAMA8, None, "suffix", None, {"rejection_sample_method": "fly", "fly_window_size": 6}),
    # 0.34.0 checks an explicit method against the speculator the draft checkpoint declares
    (QWEN8, DFLASH, "draft_model", 3, {}),
    (QWEN8, DFLASH, "eagle3", 3, {}),
    (QWEN8, DFLASH, "dspark", 3, {}),
    (K3, K3_DRAFT, "dflash", 3, {}),
    (K3, K3_DRAFT, "draft_model", 3, {}),
    # extract_hidden_states: no draft model, k required; FLy refuses it (0.33.0 on). vLLM's
    # speculator also requires k 1 and the target's eagle_aux_hidden_state_layer_ids, at start-up
    # on the GPU, which the judge's CPU build does not reach: those rules are unit-tested
    # (tests/unit/test_plugin_methods.py), the grid keeps to cases both judges reach.
    (AUX_TARGET, None, "extract_hidden_states", 1, {}),
    (AUX_TARGET, None, "extract_hidden_states", None, {}),
    (AUX_TARGET, None, "extract_hidden_states", 1, {"rejection_sample_method": "fly"}),
)


# Sizes the target's (or the draft's) own layers split over TP beyond the heads (validation/load.py,
# vllm/tp_splits.py, vllm/fp8_blocks.py): a TP that builds and one that fails, each decided by
# vLLM's build on the meta device. FP8 block checkpoints keep their quantization at load
# (the judge's _shim_gpu_fp8_kernels). TPs beyond TPS where only they decide (a 600B MoE's
# meta build at TP 32 takes about a second).
LOAD_SPLIT_CASES: tuple[tuple[str, str | None, str, tuple[int, ...], int | None], ...] = (
    ("fp8-qwen3-32b", None, "ngram", (8, 16), None),  # down_proj input 25600/16 = 1600: not 128-blocks
    ("fp8-qwen3-30b-a3b", None, "ngram", (8, 16), None),  # experts 768/8 = 96 refine to 32; /16 = 48 cannot
    ("deepseek-ai__DeepSeek-V3", None, "mtp", (16, 32), None),  # dense down_proj 18432/32 = 576
    ("Qwen__Qwen3-235B-A22B", "fp8-qwen3-32b", "draft_model", (8, 16), 1),  # the FP8 draft split at the target's TP
    ("moe-width-1100", None, "ngram", (4, 8), None),  # FusedMoEConfig asserts 1100 % 8
    ("moe-4-experts", None, "ngram", (4, 8), None),  # Qwen3MoeSparseMoeBlock: TP 8 > 4 experts
    ("Qwen__Qwen3-32B", "moe-4-experts", "draft_model", (4, 8), 1),  # the same, as a draft at the target's TP
    ("ernie-4.5-moe-8-experts", None, "ngram", (8, 16), None),  # Ernie4_5_MoeMoE: TP 16 > 8 moe_num_experts
    ("dense-width-12300", None, "ngram", (4, 8), None),  # MLP gate_up/down_proj: 12300 % 8
    ("meta-llama__Llama-3.1-8B-Instruct", "eagle3-llama3-8b-width-14340", "eagle3", (4, 8), 1),  # the head's MLP 14340 % 8
    ("deepseek-v2-lite-dense-width-10920", None, "ngram", (8, 16), None),  # its first, dense layer: 10920 % 16
    ("moe-unused-dense-width-6150", None, "ngram", (4, 8), None),  # every layer sparse: intermediate_size unused
    ("vl-qwen2.5-vl-3b", None, "ngram", (4, 8), None),  # vision MLP 3420 % 8
    ("vl-glm-4.5v", None, "ngram", (4, 8), None),  # vision heads 12 % 8
    ("vl-gemma-3-27b", None, "ngram", (16, 32), None),  # SigLIP heads 16 % 32
    ("vl-mistral-small-3.1-24b", None, "ngram", (16, 32), None),  # Pixtral heads 16 % 32
    ("vl-qwen3-vl-235b-a22b", None, "ngram", (16, 32), None),  # Qwen3-VL tower heads 16 % 32
    ("nvidia__Qwen3.6-27B-NVFP4", None, "ngram", (8, 12), None),  # Qwen3-VL tower heads 16 % 12
)


def grid() -> list[Case]:
    cfgs = configs()
    cases: list[Case] = []
    for target, draft, method in DRAFT_PAIRS:
        k = _k(method, cfgs[draft])
        cases += [Case(target, draft, method, k, tp, dtp) for tp in TPS for dtp in _draft_tps(tp)]
    for target in MTP_TARGETS:
        cases += [Case(target, None, "mtp", 1, tp, dtp) for tp in TPS for dtp in _draft_tps(tp)]
    for target in DSPARK_TARGETS:
        cases += [Case(target, None, "dspark", 3, tp, dtp) for tp in TPS for dtp in _draft_tps(tp)]
    for target in TARGETS:
        for method in MODEL_FREE:
            cases += [Case(target, None, method, 4, tp, None) for tp in TPS]
    # k left unset: DSpark defaults to block_size, MTP to its layer count, draft_model and
    # EAGLE3 heads have nothing to default from (both sides must refuse).
    for target, draft, method in DEFAULT_K_PAIRS:
        cases += [Case(target, draft, method, None, tp, tp) for tp in (1, 8)]
    for target, draft, method, k, extra in VERSION_CASES:
        cases += [Case(target, draft, method, k, tp, None, tuple(sorted(extra.items()))) for tp in (1, 2)]
    for target, draft, method, tps, draft_tp in LOAD_SPLIT_CASES:
        cases += [Case(target, draft, method, _k(method, None), tp, draft_tp) for tp in tps]
    return cases + held_out_grid()


# Pairs of held-out configs, and draft_lm_head_quantization where the GPU path decides (the draft
# must share the target's lm_head; VERSION_CASES holds the EAGLE-3 head of its own vocabulary).
HELD_OUT_PAIRS: tuple[tuple[str, str, str, tuple[int, ...], dict[str, Any]], ...] = (
    ("llama-24-heads-6-kv", "eagle3-24-heads-vocab-32000", "eagle3", (2, 3, 6), {}),
    (LLAMA8, "eagle3-llama3-8b-full-vocab", "eagle3", (1, 2), {"draft_lm_head_quantization": "fp8"}),
    (LLAMA8, "SafeAILab__EAGLE-LLaMA3-Instruct-8B", "eagle", (1,), {"draft_lm_head_quantization": "nvfp4"}),
    ("deepseek-ai__DeepSeek-V3", None, "mtp", (8,), {"draft_lm_head_quantization": "fp8"}),
)


def held_out_grid() -> list[Case]:
    """Issue 30 item 5's held-out grid: every layer a sub-module (shared experts, MTP layers,
    vision projectors and adapters, mixers, draft heads' LM heads) splits over TP, at a TP where
    vLLM builds it and one where it fails (tests/fixtures/held-out-splits.json says which)."""
    cases = []
    for name, entry in held_out_entries().items():
        method = entry["method"]
        cases += [Case(name, None, method, _k(method, None), tp, None) for tp in entry["tps"]]
    # without their MTP layers, both build
    cases += [Case(name, None, "ngram", 4, 8, None) for name in ("qwen3.6-27b-hidden-5124", "ernie-4.5-moe-all-sparse-mtp-12300")]
    for target, draft, method, tps, extra in HELD_OUT_PAIRS:
        k = 1 if method == "mtp" else 3
        cases += [Case(target, draft, method, k, tp, tp if draft else None, tuple(sorted(extra.items()))) for tp in tps]
    return cases
