"""vLLM 0.34.0: what its vllm/config/speculative.py and the per-method speculator configs
(vllm/v1/worker/gpu/spec_decode/<method>/config.py) changed against 0.33.0."""

from specdeploy.vllm.releases.v0_33_0 import RELEASE as PREVIOUS

RELEASE = PREVIOUS.then(
    "0.34.0",
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
