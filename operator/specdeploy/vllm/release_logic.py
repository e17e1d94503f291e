"""vLLM logic that differs between releases and that the generated data cannot carry.

One entry per supported release; each switch cites the code that decides it. Adding a release:
copy the newest entry and change what its `vllm/config/speculative.py` changed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReleaseLogic:
    # SpeculativeConfig._verify_args: use_heterogeneous_vocab needs the full draft logits, which
    # use_local_argmax_reduction never builds (0.33.0 refuses the pair; 0.32.0 takes it).
    heterogeneous_vocab_excludes_local_argmax: bool
    # rejection_sample_method "fly" (0.33.0): k >= 2, fly_window_size < k, not extract_hidden_states.
    fly_rejection_sampler: bool
    # draft_lm_head_quantization (0.33.0): only methods whose draft shares the target's lm_head,
    # and not the MTP layers of these model types (SpeculativeConfig.use_gemma4_mtp()).
    draft_lm_head_quantization_methods: frozenset[str]
    draft_lm_head_quantization_excluded_mtp: frozenset[str]
    # xpress_topc (0.33.0): only XPress drafts (XPRESS_ARCHITECTURES), 0 <= topc <= draft vocab.
    xpress_architectures: frozenset[str]


RELEASE_LOGIC: dict[str, ReleaseLogic] = {
    "0.32.0": ReleaseLogic(
        heterogeneous_vocab_excludes_local_argmax=False,
        fly_rejection_sampler=False,
        draft_lm_head_quantization_methods=frozenset(),
        draft_lm_head_quantization_excluded_mtp=frozenset(),
        xpress_architectures=frozenset(),
    ),
    "0.33.0": ReleaseLogic(
        heterogeneous_vocab_excludes_local_argmax=True,
        fly_rejection_sampler=True,
        draft_lm_head_quantization_methods=frozenset({"eagle", "eagle3", "mtp"}),
        draft_lm_head_quantization_excluded_mtp=frozenset({"gemma4_mtp"}),
        xpress_architectures=frozenset({"Qwen3XPressModel", "DFlashQwen3XPressModel"}),
    ),
}
