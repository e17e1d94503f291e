"""Checks of `spec.draft.speculativeConfig`, the SpeculativeConfig keys the spec passes through.

Each restates a check of vLLM 0.32.0's vllm/config/speculative.py (field types, enums and the
cross-field rules in __post_init__ / _verify_args), so a typo or a combination vLLM refuses
is reported at apply time, naming the key."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.validation import vllm_support
from specdeploy.validation.findings import Finding, error

FIELD = "spec.draft.speculativeConfig"

# Keys the plan writes itself from spec.draft; passing them through would fight the plan.
OWNED_KEYS = frozenset({
    "model", "method", "num_speculative_tokens", "draft_tensor_parallel_size", "revision",
    "tensor_parallel_size", "target_model_config", "target_parallel_config",
    "draft_model_config", "draft_parallel_config",
})
# Every other init field of SpeculativeConfig, with what its value must be.
BOOLEAN_KEYS = frozenset({
    "enforce_eager", "index_share_for_mtp_iteration", "disable_padded_drafter_batch", "disable_eagle_block_drop",
    "use_local_argmax_reduction", "use_heterogeneous_vocab", "parallel_drafting", "enable_adaptive_verification",
})
POSITIVE_INT_KEYS = frozenset({"max_model_len", "prompt_lookup_max", "prompt_lookup_min", "dspark_draft_topk"})
INT_KEYS = frozenset({"suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests"})
NUMBER_KEYS = frozenset({"suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "synthetic_acceptance_length"})
STRING_KEYS = frozenset({"attention_backend", "moe_backend", "kv_cache_dtype", "quantization", "code_revision"})
ENUM_KEYS = {"rejection_sample_method": ("standard", "synthetic", "block"), "draft_sample_method": ("greedy", "probabilistic")}
OTHER_KEYS = frozenset({"draft_load_config", "num_speculative_tokens_per_batch_size", "synthetic_acceptance_rates"})
KNOWN_KEYS = OWNED_KEYS | BOOLEAN_KEYS | POSITIVE_INT_KEYS | INT_KEYS | NUMBER_KEYS | STRING_KEYS | frozenset(ENUM_KEYS) | OTHER_KEYS


def _adapter(key: str) -> TypeAdapter[Any] | None:
    """The pydantic type vLLM's SpeculativeConfig (a pydantic dataclass, lax mode) gives the key."""
    if key in BOOLEAN_KEYS:
        return TypeAdapter(bool)
    if key in POSITIVE_INT_KEYS:
        return TypeAdapter(Annotated[int, Field(ge=1)])
    if key in INT_KEYS:
        return TypeAdapter(int)
    if key in NUMBER_KEYS:
        return TypeAdapter(float)
    if key in STRING_KEYS:
        return TypeAdapter(str)
    if key in ENUM_KEYS:
        return TypeAdapter(Literal[ENUM_KEYS[key]])  # type: ignore[valid-type]
    return None


def _type_finding(key: str, value: Any) -> Finding | None:
    adapter = _adapter(key)
    if adapter is None:
        return None
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        return error("speculative-config-type", f"{FIELD}.{key}", f"{key}: {reason} (got {value!r})")
    return None


def _cross_field_findings(spec: SpeculativeDeploymentSpec, config: dict[str, Any]) -> list[Finding]:
    method, findings = spec.draft.method, []
    if config.get("dspark_draft_topk") is not None and method != "dspark":
        findings.append(error("speculative-config-method", f"{FIELD}.dspark_draft_topk", "dspark_draft_topk is only supported by method dspark"))
    if config.get("index_share_for_mtp_iteration") is not None and method != "mtp":
        findings.append(error("speculative-config-method", f"{FIELD}.index_share_for_mtp_iteration", "index_share_for_mtp_iteration is only supported with method mtp"))
    if config.get("use_heterogeneous_vocab"):
        if method != "draft_model":
            findings.append(error("speculative-config-method", f"{FIELD}.use_heterogeneous_vocab", "use_heterogeneous_vocab only works with method draft_model"))
        if config.get("draft_sample_method", "greedy") != "greedy":
            findings.append(error("speculative-config-combination", f"{FIELD}.use_heterogeneous_vocab", "use_heterogeneous_vocab supports only draft_sample_method greedy"))
    if method != "dspark" and config.get("enable_adaptive_verification") and config.get("use_local_argmax_reduction"):
        findings.append(error("speculative-config-combination", f"{FIELD}.enable_adaptive_verification",
                              "enable_adaptive_verification needs the draft logits that use_local_argmax_reduction never materializes; disable one"))
    synthetic = [k for k in ("synthetic_acceptance_rates", "synthetic_acceptance_length") if config.get(k) is not None]
    if config.get("rejection_sample_method", "standard") == "synthetic":
        if len(synthetic) != 1:
            findings.append(error("speculative-config-combination", f"{FIELD}.rejection_sample_method",
                                  "rejection_sample_method synthetic needs exactly one of synthetic_acceptance_rates or synthetic_acceptance_length"))
    elif synthetic:
        findings.append(error("speculative-config-combination", f"{FIELD}.{synthetic[0]}", f"{synthetic[0]} is only valid with rejection_sample_method synthetic"))
    if method == "suffix":
        findings += _suffix_findings(config)
    low, high = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
    if method == "ngram" and isinstance(low, int) and isinstance(high, int) and low > high:
        findings.append(error("speculative-config-combination", f"{FIELD}.prompt_lookup_min", f"prompt_lookup_min {low} must be <= prompt_lookup_max {high}"))
    return findings


# SpeculativeConfig._validate_suffix_decoding: (key, lowest, highest) for method suffix.
SUFFIX_BOUNDS = {
    "suffix_decoding_max_tree_depth": (1, None),
    "suffix_decoding_max_cached_requests": (0, None),
    "suffix_decoding_max_spec_factor": (0, None),
    "suffix_decoding_min_token_prob": (0, 1),
}


def _suffix_findings(config: dict[str, Any]) -> list[Finding]:
    findings = []
    for key, (low, high) in SUFFIX_BOUNDS.items():
        value = config.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue  # absent (vLLM's default is in range) or already reported as a type error
        if value < low or (high is not None and value > high):
            allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
            findings.append(error("speculative-config-range", f"{FIELD}.{key}", f"{key} must be {allowed} for suffix decoding, got {value}"))
    return findings


def check_speculative_passthrough(spec: SpeculativeDeploymentSpec) -> list[Finding]:
    config = spec.draft.speculative_config
    findings: list[Finding] = []
    for key in sorted(config):
        if key in OWNED_KEYS:
            findings.append(error("speculative-config-owned-key", f"{FIELD}.{key}",
                                  f"{key} is set by the operator from spec.draft (method, model, numSpeculativeTokens, tensorParallelSize, revision); remove it here"))
        elif key not in KNOWN_KEYS:
            findings.append(error("speculative-config-unknown-key", f"{FIELD}.{key}",
                                  f"{key} is not a vLLM {vllm_support.VLLM_VERSION} SpeculativeConfig field; allowed: {', '.join(sorted(KNOWN_KEYS - OWNED_KEYS))}"))
        elif (finding := _type_finding(key, config[key])) is not None:
            findings.append(finding)
    return findings + _cross_field_findings(spec, config)
