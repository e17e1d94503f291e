"""vLLM 0.32.0, the oldest supported release, and the one with a CPU build on PyPI (the e2e
suite serves with it)."""

from specdeploy.vllm.release_logic import Release, ReleaseLogic

RELEASE = Release("0.32.0", ReleaseLogic(
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
), cpu_build=True)
