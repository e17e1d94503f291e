"""vLLM logic that differs between releases and that the generated data cannot carry.

One entry per supported release; each switch cites the code that decides it. Adding a release:
`make vllm-release VERSION=X` lists what changed; state the new release as `replace(newest, ...)` with what its
`vllm/config/speculative.py` (and, from 0.34.0, `vllm/v1/worker/gpu/spec_decode/<method>/config.py`)
changed."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ReleaseLogic:
    # SpeculativeConfig._verify_args: use_heterogeneous_vocab needs the full draft logits, which
    # use_local_argmax_reduction never builds (0.33.0 refuses the pair; 0.32.0 takes it).
    heterogeneous_vocab_excludes_local_argmax: bool
    # rejection_sample_method "fly" (0.33.0): k >= 2, fly_window_size < k, not extract_hidden_states.
    fly_rejection_sampler: bool
    # draft_lm_head_quantization (0.33.0): only methods whose draft shares the target's lm_head,
    # and not the MTP layers of these model types (SpeculativeConfig.use_gemma4_mtp()).
    # 0.34.0 reads this from the data instead: each speculator's supported_options.
    draft_lm_head_quantization_methods: frozenset[str]
    draft_lm_head_quantization_excluded_mtp: frozenset[str]
    # xpress_topc (0.33.0): only XPress drafts (XPRESS_ARCHITECTURES), 0 <= topc <= draft vocab.
    xpress_architectures: frozenset[str]
    # A method's optional package (`Method.needs_package`) must be in the image: 0.32.0/0.33.0
    # speculative.py `_validate_suffix_decoding` (`has_arctic_inference()`); 0.34.0's suffix
    # speculator is native (v1/worker/gpu/spec_decode/suffix/config.py checks no package).
    method_packages_required: bool
    # 0.34.0 speculator_config.py `_resolve_checkpoint_config_class`: an explicit method is
    # checked against the speculator the draft checkpoint's architecture declares
    # (`SpeculativeDraftModel.speculator_config_class`, in the data per architecture).
    method_checked_against_checkpoint: bool
    # 0.34.0 speculative.py `__post_init__`: every option of `_METHOD_SPECIFIC_OPTIONS` that is set
    # must be in the speculator's `supported_options` (both in the data); before, one rule per key.
    options_checked_per_speculator: bool
    # 0.34.0 speculative.py `_verify_args`: `parallel_drafting=True` only with these methods
    # (a literal `("dflash", "dspark")` there); None: not restricted (0.32.0/0.33.0 take it on any).
    parallel_drafting_methods: frozenset[str] | None
    # 0.34.0 config/cache.py `enable_extensible_kv_cache`: on CUDA and ROCm by default, the KV
    # cache is sized from the memory free after CUDA-graph capture, and an unset
    # gpu_memory_utilization means `resolved_gpu_memory_utilization` (1.0, in the data).
    extensible_kv_cache_on_gpu: bool
    # method mtp needs a draft whose model_type is an MTP type (one of MTPModelTypes, from the
    # target's MTP layers): 0.32.0/0.33.0 speculative.py __post_init__ otherwise raises
    # "Unsupported speculative method". 0.34.0 mtp/config.py MTPSpeculatorConfig checks no such
    # thing for an explicit method (its `matches` only detects one): the target drafts itself.
    mtp_needs_an_mtp_draft: bool


_V0_32_0 = ReleaseLogic(
    heterogeneous_vocab_excludes_local_argmax=False,
    fly_rejection_sampler=False,
    draft_lm_head_quantization_methods=frozenset(),
    draft_lm_head_quantization_excluded_mtp=frozenset(),
    xpress_architectures=frozenset(),
    method_packages_required=True,
    method_checked_against_checkpoint=False,
    options_checked_per_speculator=False,
    parallel_drafting_methods=None,
    extensible_kv_cache_on_gpu=False,
    mtp_needs_an_mtp_draft=True,
)
# Each later release states only what its code changed against the one before.
_V0_33_0 = replace(
    _V0_32_0,
    heterogeneous_vocab_excludes_local_argmax=True,
    fly_rejection_sampler=True,
    draft_lm_head_quantization_methods=frozenset({"eagle", "eagle3", "mtp"}),
    draft_lm_head_quantization_excluded_mtp=frozenset({"gemma4_mtp"}),
    xpress_architectures=frozenset({"Qwen3XPressModel", "DFlashQwen3XPressModel"}),
)
_V0_34_0 = replace(
    _V0_33_0,
    # use_heterogeneous_vocab is gone (the key is refused as unknown, from the data).
    heterogeneous_vocab_excludes_local_argmax=False,
    # draft_lm_head_quantization and xpress_topc: per speculator's supported_options, from the data.
    draft_lm_head_quantization_methods=frozenset(),
    draft_lm_head_quantization_excluded_mtp=frozenset(),
    xpress_architectures=frozenset(),
    method_packages_required=False,
    method_checked_against_checkpoint=True,
    options_checked_per_speculator=True,
    parallel_drafting_methods=frozenset({"dflash", "dspark"}),
    extensible_kv_cache_on_gpu=True,
    mtp_needs_an_mtp_draft=False,
)

RELEASE_LOGIC: dict[str, ReleaseLogic] = {"0.32.0": _V0_32_0, "0.33.0": _V0_33_0, "0.34.0": _V0_34_0}
