"""vLLM 0.33.0: what its vllm/config/speculative.py changed against 0.32.0."""

from specdeploy.vllm.releases.v0_32_0 import RELEASE as PREVIOUS

RELEASE = PREVIOUS.then(
    "0.33.0",
    heterogeneous_vocab_excludes_local_argmax=True,
    fly_rejection_sampler=True,
    draft_lm_head_quantization_methods=frozenset({"eagle", "eagle3", "mtp"}),
    draft_lm_head_quantization_excluded_mtp=frozenset({"gemma4_mtp"}),
    xpress_architectures=frozenset({"Qwen3XPressModel", "DFlashQwen3XPressModel"}),
)
