"""Checks of `spec.draft.speculativeConfig`, the SpeculativeConfig keys the spec passes through.

Which keys exist, and each key's type, bounds and choices, are the judging release's own
(`VllmFacts.speculative_fields`, generated from its SpeculativeConfig dataclass); the cross-field
rules restate `SpeculativeConfig.__post_init__` / `_verify_args` (vllm/config/speculative.py),
with `VllmFacts.logic` switching the ones that differ between releases."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from specdeploy.api.errors import field_message
from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import Finding, Stage, did_you_mean, error, near_misses, some_of
from specdeploy.geometry import Models
from specdeploy.vllm import VllmFacts
from specdeploy.vllm.methods import METHODS, Method, is_listed, method_named

FIELD = "spec.draft.speculativeConfig"

# Keys the plan writes itself from spec.draft; passing them through would fight the plan.
OWNED_KEYS = frozenset({"model", "method", "num_speculative_tokens", "draft_tensor_parallel_size", "revision",
                        "tensor_parallel_size"})
_PYTHON_TYPES: dict[str, Any] = {"bool": bool, "int": int, "float": float, "str": str, "list": list, "object": dict, "any": Any}


@lru_cache(maxsize=None)
def _adapter(kind: str, choices: tuple[str, ...], bounds: tuple[tuple[str, float], ...]) -> TypeAdapter[Any]:
    """The pydantic type vLLM's SpeculativeConfig (a pydantic dataclass, lax mode) gives a key."""
    if kind == "choice":
        return TypeAdapter(Literal[choices])  # type: ignore[valid-type]
    python_type = _PYTHON_TYPES[kind]
    return TypeAdapter(Annotated[python_type, Field(**dict(bounds))] if bounds else python_type)


def _type_finding(key: str, value: Any, rule: dict[str, Any]) -> Finding | None:
    if value is None and "default" in rule and rule["default"] is None:
        return None  # an optional field: None means vLLM's default
    bounds = tuple((b, rule[b]) for b in ("gt", "ge", "lt", "le") if b in rule)
    try:
        _adapter(rule["type"], tuple(rule.get("choices", ())), bounds).validate_python(value)
    except ValidationError as exc:
        return error("speculative-config-type", f"{FIELD}.{key}", f"{key} {field_message(exc.errors(), {})}")
    return None


def _cross_field_findings(spec: SpeculativeDeploymentSpec, k: int | None, models: Models | None,
                          facts: VllmFacts) -> list[Finding]:
    method, config = spec.draft.speculative_method, spec.draft.speculative_config
    logic = facts.logic
    # A plugin's method: which options its speculator takes is the plugin's (the preflight judges).
    by_method = is_listed(method.name)
    if not by_method:
        findings = []
    elif logic.options_checked_per_speculator:
        findings = _speculator_option_findings(method.name, config, models, facts)
    else:
        findings = _exclusive_option_findings(method, config, facts)
    findings += _draft_logits_findings(method, config, facts) + _rejection_sampler_findings(method, config, k, facts)
    if (config.get("draft_lm_head_quantization") is not None and "draft_lm_head_quantization" in facts.speculative_fields
            and not logic.options_checked_per_speculator):
        excluded_mtp = (method.target_mtp_layers and models is not None and models.target.mtp is not None
                        and models.target.mtp.model_type in logic.draft_lm_head_quantization_excluded_mtp)
        if method.name not in logic.draft_lm_head_quantization_methods or excluded_mtp:
            findings.append(error("speculative-config-method", f"{FIELD}.draft_lm_head_quantization",
                                  f"draft_lm_head_quantization is not supported for method {method.name!r} (only {', '.join(sorted(logic.draft_lm_head_quantization_methods))}, whose drafts share the target's lm_head)"))
    topc = config.get("xpress_topc")
    if topc is not None and "xpress_topc" in facts.speculative_fields and models is not None:
        findings += _xpress_topc_findings(topc, method.name, models, facts)
    if by_method:
        findings += _release_option_findings(method.name, config, models, facts)
    return findings + _option_range_findings(method, config)


def _fly_findings(method: Method, k: int | None, config: dict[str, Any]) -> list[Finding]:
    """rejection_sample_method fly (_verify_args, releases with FLy): a method that proposes
    tokens, k >= 2 and fly_window_size < k."""
    def refuse(key: str, message: str) -> list[Finding]:
        return [error("speculative-config-combination", f"{FIELD}.{key}", message)]

    if not method.proposes_draft_tokens:
        return refuse("rejection_sample_method", f"FLy (rejection_sample_method fly) is not compatible with method {method.name}, which proposes no tokens")
    window = config.get("fly_window_size")
    if k is None:
        return []
    if k < 2:
        return refuse("rejection_sample_method", f"FLy (rejection_sample_method fly) requires numSpeculativeTokens >= 2, got {k}")
    if isinstance(window, int) and not isinstance(window, bool) and window >= k:
        return refuse("fly_window_size", f"FLy requires fly_window_size ({window}) to be smaller than numSpeculativeTokens ({k})")
    return []


def _draft_logits_findings(method: Method, config: dict[str, Any], facts: VllmFacts) -> list[Finding]:
    """Options that need the draft's full logits: use_heterogeneous_vocab (greedy drafting only,
    and per release not with use_local_argmax_reduction) and enable_adaptive_verification."""
    findings, logic = [], facts.logic
    if config.get("use_heterogeneous_vocab") and "use_heterogeneous_vocab" in facts.speculative_fields:
        if config.get("draft_sample_method", "greedy") != "greedy":
            findings.append(error("speculative-config-combination", f"{FIELD}.use_heterogeneous_vocab",
                                  "use_heterogeneous_vocab supports only draft_sample_method greedy"))
        if logic.heterogeneous_vocab_excludes_local_argmax and config.get("use_local_argmax_reduction"):
            findings.append(error("speculative-config-combination", f"{FIELD}.use_heterogeneous_vocab",
                                  f"vLLM {facts.version}: use_heterogeneous_vocab is not compatible with use_local_argmax_reduction (token-level intersection needs the full draft logits)"))
    if method.adaptive_verification_uses_draft_logits and config.get("enable_adaptive_verification") and config.get("use_local_argmax_reduction"):
        findings.append(error("speculative-config-combination", f"{FIELD}.enable_adaptive_verification",
                              "enable_adaptive_verification needs the draft logits that use_local_argmax_reduction never materializes; disable one"))
    return findings


def _rejection_sampler_findings(method: Method, config: dict[str, Any], k: int | None, facts: VllmFacts) -> list[Finding]:
    """rejection_sample_method: synthetic takes exactly one synthetic_acceptance_* option (and
    those options need it); FLy, where the release has it, is `_fly_findings`."""
    findings: list[Finding] = []
    synthetic = [key for key in ("synthetic_acceptance_rates", "synthetic_acceptance_length") if config.get(key) is not None]
    sampler = config.get("rejection_sample_method", "standard")
    if sampler == "synthetic":
        if len(synthetic) != 1:
            findings.append(error("speculative-config-combination", f"{FIELD}.rejection_sample_method",
                                  "rejection_sample_method synthetic needs exactly one of synthetic_acceptance_rates or synthetic_acceptance_length"))
    elif synthetic:
        findings.append(error("speculative-config-combination", f"{FIELD}.{synthetic[0]}",
                              f"{synthetic[0]} is only valid with rejection_sample_method synthetic"))
    if facts.logic.fly_rejection_sampler and sampler == "fly":
        findings += _fly_findings(method, k, config)
    return findings

def _release_option_findings(method: str, config: dict[str, Any], models: Models | None, facts: VllmFacts) -> list[Finding]:
    """Options whose rules came with a release: parallel_drafting (_verify_args: only the methods
    of `logic.parallel_drafting_methods`) and draft_decode_context_parallel_size
    (_verify_and_get_draft_dcp, for drafts with a checkpoint: 1 or the target's DCP)."""
    findings, parallel = [], facts.logic.parallel_drafting_methods
    if parallel is not None and config.get("parallel_drafting") is True and method not in parallel:
        findings.append(error("speculative-config-method", f"{FIELD}.parallel_drafting",
                              f"vLLM {facts.version}: parallel_drafting is only supported by the {' and '.join(sorted(parallel))} methods, not {method!r}"))
    dcp = config.get("draft_decode_context_parallel_size")
    if isinstance(dcp, int) and dcp > 1 and _speculator(method, models, facts).get("loads_checkpoint"):
        # The operator leaves the target's decode context parallel size at vLLM's default of 1.
        findings.append(error("speculative-config-range", f"{FIELD}.draft_decode_context_parallel_size",
                              f"draft_decode_context_parallel_size must be 1 or the target's decode context parallel size (1), got {dcp}"))
    return findings


def _xpress_topc_findings(topc: Any, method: str, models: Models, facts: VllmFacts) -> list[Finding]:
    """xpress_topc: XPress drafts only (by architecture, or with per-method speculators the XPress
    speculator's supported_options, refused above), and 0 <= topc <= the draft vocabulary."""
    draft, logic = models.draft, facts.logic
    if logic.options_checked_per_speculator:
        xpress = "xpress_topc" in _speculator(method, models, facts).get("supported_options", ())
        if not xpress:
            return []  # refused by _speculator_option_findings
    elif not (draft is not None and set(draft.architectures) & logic.xpress_architectures):
        return [error("speculative-config-method", f"{FIELD}.xpress_topc",
                      "xpress_topc is only supported by XPress drafts (" + ", ".join(sorted(logic.xpress_architectures)) + ")")]
    if isinstance(topc, int) and draft is not None and not 0 <= topc <= (draft.draft_vocab_size or draft.vocab_size):
        return [error("speculative-config-range", f"{FIELD}.xpress_topc",
                      f"xpress_topc must be between 0 and the draft vocabulary size ({draft.draft_vocab_size or draft.vocab_size})")]
    return []


def _speculator(method: str, models: Models | None, facts: VllmFacts) -> dict[str, Any]:
    """The SpeculatorConfig vLLM settles on for this draft ({} for a release without them)."""
    archs: tuple[str, ...] = ()
    if models is not None and models.draft is not None:
        mtp = models.target.mtp if method_named(method).target_mtp_layers else None
        archs = (mtp.architecture,) if mtp is not None else tuple(models.draft.architectures)
    return facts.speculator(method, archs) or {}


def _speculator_option_findings(method: str, config: dict[str, Any], models: Models | None,
                                facts: VllmFacts) -> list[Finding]:
    """speculative.py __post_init__ (releases with per-method speculators): a method-specific option must be in the settled
    speculator's supported_options (Gemma-4 MTP drops draft_lm_head_quantization, XPress drafts
    take xpress_topc, only custom speculators take speculator_options); DSparkSpeculatorConfig
    .apply_options then takes draft_lm_head_quantization only for DeepSeek-V4's own DSpark head."""
    speculator = _speculator(method, models, facts)
    supported = set(speculator.get("supported_options", ()))
    findings = [error("speculative-config-method", f"{FIELD}.{option}",
                      f"vLLM {facts.version}: {option} is not supported with speculative method {method!r}"
                      + (f" (it takes {', '.join(sorted(supported))})" if supported else ""))
                for option in facts.method_specific_options if config.get(option) is not None and option not in supported]
    own_dspark_draft = models is not None and models.draft is not None and not models.draft_is_target \
        and facts.declared_speculator(models.draft.architectures) is not None
    if method_named(method).builds_dspark_head and config.get("draft_lm_head_quantization") is not None and own_dspark_draft:
        findings.append(error("speculative-config-method", f"{FIELD}.draft_lm_head_quantization",
                              "draft_lm_head_quantization is only supported by the DeepSeek-V4/V4.1 DSpark drafters (a dspark method without draft.model on a DeepSeek-V4 target)"))
    return findings


def _exclusive_option_findings(method: Method, config: dict[str, Any], facts: VllmFacts) -> list[Finding]:
    """Options vLLM takes with one method only: __post_init__ / _verify_args refuse any value but
    the field's default with another method."""
    findings = []
    for other in METHODS.values():
        for key in sorted(other.exclusive_options - method.exclusive_options):
            if key in config and key in facts.speculative_fields and config[key] != facts.option_default(key):
                findings.append(error("speculative-config-method", f"{FIELD}.{key}",
                                      f"{key} is only supported by method {other.name}, not {method.name}"))
    return findings


def _option_range_findings(method: Method, config: dict[str, Any]) -> list[Finding]:
    """The method's range checks (_validate_suffix_decoding) and ordered pairs (prompt_lookup_min <=
    prompt_lookup_max for the n-gram lookups)."""
    findings = []
    for key, low, high in method.option_ranges:
        value = config.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue  # absent (vLLM's default is in range) or already reported as a type error
        if value < low or (high is not None and value > high):
            allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
            findings.append(error("speculative-config-range", f"{FIELD}.{key}", f"{key} must be {allowed} for method {method.name}, got {value}"))
    findings += [error("speculative-config-method", f"{FIELD}.{key}",
                       f"method {method.name} runs with {key} {value!r} only, got {config[key]!r}: the pod would fail at start-up", Stage.LOAD)
                 for key, value in method.fixed_options if key in config and config[key] != value]
    if method.ordered_options:
        low_key, high_key = method.ordered_options
        low, high = config.get(low_key), config.get(high_key)
        if isinstance(low, int) and isinstance(high, int) and low > high:
            findings.append(error("speculative-config-combination", f"{FIELD}.{low_key}", f"{low_key} {low} must be <= {high_key} {high}"))
    return findings


def _allowed_keys(key: str, allowed: list[str]) -> str:
    """The key it misspells, else a few of the many keys there are."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()  # SpeculativeConfig's keys are snake_case
    meant = near_misses(snake, allowed) or near_misses(key, allowed)
    return did_you_mean(meant) if meant else f"it has {some_of(allowed, 5)}"


def check_speculative_config(spec: SpeculativeDeploymentSpec, k: int | None, models: Models | None,
                             facts: VllmFacts) -> list[Finding]:
    """Every passed-through key against the judging release's SpeculativeConfig."""
    config = spec.draft.speculative_config
    allowed = sorted(key for key, rule in facts.speculative_fields.items() if not rule.get("internal") and key not in OWNED_KEYS)
    findings: list[Finding] = []
    for key in sorted(config):
        rule = facts.speculative_fields.get(key)
        if key in OWNED_KEYS:
            findings.append(error("speculative-config-owned-key", f"{FIELD}.{key}",
                                  f"{key} is set by the operator from spec.draft (method, model, numSpeculativeTokens, tensorParallelSize, revision); remove it here"))
        elif rule is None or rule.get("internal"):
            findings.append(error("speculative-config-unknown-key", f"{FIELD}.{key}",
                                  f"{key} is not a vLLM {facts.version} SpeculativeConfig field; {_allowed_keys(key, allowed)}"))
        elif (finding := _type_finding(key, config[key], rule)) is not None:
            findings.append(finding)
    return findings + _cross_field_findings(spec, k, models, facts)
