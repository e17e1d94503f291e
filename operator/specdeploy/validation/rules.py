"""Draft-vs-target rules, each restating one vLLM check (file cited per rule), judged with the
facts of the release that will run (`VllmFacts`).

Two kinds: `check_pair` (independent of the parallel layout) and `check_layout`
(one TP/draft-TP/PP candidate). Both return every finding, never stop at the first."""

from __future__ import annotations

from specdeploy.api.spec import DRAFT_TP_FIELD, PP_FIELD, TP_FIELD, SpeculativeDeploymentSpec
from specdeploy.findings import Finding, Stage, error, has_errors, info, some_of, warning
from specdeploy.geometry import Geometry, Models
from specdeploy.validation.speculative_config import FIELD as PASSTHROUGH_FIELD
from specdeploy.vllm import VllmFacts
from specdeploy.vllm.methods import METHODS as METHOD_TABLE
from specdeploy.vllm.methods import is_listed
from specdeploy.vllm.drafts import (
    DSPARK_ARCHITECTURES,
    IN_CHECKPOINT_DSPARK_TARGETS,
    draft_architectures,
)


def divisors_note(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


# Fast rules cannot judge the method: the workload waits for a preflight of the image's own vLLM
# (controller/reconcile/steps.py); the CLI reports the spec as not judged.
METHOD_NEEDS_PREFLIGHT = "method-needs-preflight"


def _accepted_by(facts: VllmFacts) -> str:
    """A few of the methods a release accepts (the CRD's description lists them all)."""
    return some_of([name for name in METHOD_TABLE if name in facts.speculative_methods], 8)


def _check_method(spec: SpeculativeDeploymentSpec, facts: VllmFacts) -> list[Finding]:
    """SpeculativeConfig.method is a Literal of the release's methods (config/speculative.py);
    where plugins may register methods, `_validate_method` also takes a name a plugin registered
    (v1/worker/gpu/spec_decode/speculator_config.py register_speculative_method), which only
    that image's vLLM knows: judged there, by a preflight, never accepted silently."""
    name, method = spec.draft.method, spec.draft.speculative_method
    listed = is_listed(name)
    if (listed and name not in facts.speculative_methods) or (not listed and not facts.plugin_methods):
        plugins = "" if listed else " and lets no plugin register one"
        return [error("method-unsupported", "spec.draft.method",
                      f"vLLM {facts.version} has no method {name!r}{plugins}: the pod would exit at start-up. "
                      f"It has {_accepted_by(facts)}; another release may have it (spec.image)")]
    if not method.judged_only_in_image:
        return []
    if method.model_names_class:
        what, plan = f"method {name} runs {spec.draft.model}, a class in image {spec.image}", ""
    else:
        what = f"vLLM {facts.version}'s built-in methods do not include {name!r}; a plugin in image {spec.image} may register it"
        plan = "; the plan counts a draft at the target's TP with a KV cache of its own, an estimate"
    return [warning(METHOD_NEEDS_PREFLIGHT, "spec.draft.method",
                    f"{what}, and only a preflight of that image can judge it: the workload waits for the preflight's verdict{plan}")]


def _check_target_architecture(target: Geometry, facts: VllmFacts) -> list[Finding]:
    if facts.any_supported(target.architectures):
        return []
    return [error("target-architecture-unsupported", "spec.target.config.architectures",
                  f"vLLM {facts.version} has no model class for {list(target.architectures) or 'a config without architectures'}")]


def _check_architectures(spec: SpeculativeDeploymentSpec, target: Geometry, draft: Geometry | None,
                         facts: VllmFacts) -> list[Finding]:
    findings = _check_target_architecture(target, facts)
    method = spec.draft.speculative_method
    if method.target_mtp_layers:
        # SpeculativeConfig.hf_config_override + __post_init__ (vllm/config/speculative.py).
        module = target.mtp
        if module is None and not facts.logic.mtp_needs_an_mtp_draft:
            # The config passes, but the build registers the target's layers twice (the draft is
            # the target model): 'ValueError: Duplicate layer name' (its meta-device build in tests/parity).
            findings.append(error("mtp-target-without-mtp-layers", "spec.draft.method",
                                  f"vLLM {facts.version}'s config accepts this, drafting with the {target.model_type or 'target'} model itself "
                                  f"({list(target.architectures)}), which has no MTP layers, but its model build then fails "
                                  "('Duplicate layer name'); use a method with a draft model, or a lookup method", Stage.LOAD))
        elif module is None:
            findings.append(error("mtp-unsupported-target", "spec.draft.method",
                                  f"vLLM has no MTP module for a {target.model_type or 'config without model_type'} target ({list(target.architectures)}); use a method with a draft model, or a lookup method ({', '.join(m.name for m in METHOD_TABLE.values() if m.drafting == 'lookup')})"))
        elif module.refusal:
            findings.append(error("mtp-unsupported-target", "spec.draft.method", module.refusal))
        elif not facts.is_supported_architecture(module.architecture):
            findings.append(error("mtp-unsupported-target", "spec.draft.method",
                                  f"vLLM {facts.version} has no {module.architecture} model class for this target's MTP layers"))
        elif module.n_predict == 0:
            findings.append(error("mtp-no-layers", "spec.draft.method",
                                  "the target config declares 0 MTP layers: the checkpoint ships no MTP weights"))
        return findings
    if draft is None:
        return findings
    archs = draft_architectures(method.name, draft.model_type, draft.architectures)
    if not facts.any_supported(archs):
        findings.append(error("draft-architecture-unsupported", "spec.draft.config.architectures",
                              f"vLLM {facts.version} cannot load draft architecture {archs} for method {method.name}"))
    elif method.builds_dspark_head and not set(archs) & DSPARK_ARCHITECTURES and target.model_type not in IN_CHECKPOINT_DSPARK_TARGETS:
        # vLLM accepts this config and loads the draft as DeepSeek-V4's in-checkpoint DSpark
        # head (DSparkDraftModel), which only a DeepSeek-V4 checkpoint carries.
        findings.append(warning("dspark-not-a-dspark-draft", "spec.draft.config.architectures",
                                f"draft architectures {list(draft.architectures)} are not a DSpark draft ({', '.join(sorted(DSPARK_ARCHITECTURES))}, or DSparkDraftModel with model_type qwen3): vLLM will load it as DeepSeek-V4's in-checkpoint DSpark head, whose weights a {target.model_type} checkpoint does not have"))
    if method.draft_model_type and not method.forces_draft_model_type and draft.model_type != method.draft_model_type:
        findings.append(error("draft-not-mlp-speculator", "spec.draft.config.model_type",
                              f"method {method.name} needs a draft with model_type {method.draft_model_type}, got {draft.model_type!r}"))
    return findings


def _check_vocab(spec: SpeculativeDeploymentSpec, target: Geometry, draft: Geometry | None, facts: VllmFacts) -> list[Finding]:
    # vllm/config/speculative.py verify_equal_vocab_size_if_draft_model
    if not spec.draft.speculative_method.draft_has_own_vocab or draft is None:
        return []
    if spec.draft.speculative_config.get("use_heterogeneous_vocab") and "use_heterogeneous_vocab" in facts.speculative_fields:
        return [info("heterogeneous-vocab", "spec.draft.speculativeConfig.use_heterogeneous_vocab",
                     "different vocabularies allowed by use_heterogeneous_vocab (greedy draft sampling only)")]
    if target.vocab_size != draft.vocab_size:
        return [error("vocab-mismatch", "spec.draft.config.vocab_size",
                      f"{spec.draft.speculative_method.name} needs the target's vocabulary: target vocab_size {target.vocab_size}, draft {draft.vocab_size}")]
    return []


def _check_max_model_len(spec: SpeculativeDeploymentSpec, target: Geometry) -> list[Finding]:
    # vllm/config/model.py _get_and_verify_max_len: a longer max_model_len than the
    # config derives is an error unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set.
    wanted, limit = spec.serving.max_model_len, target.derived_max_model_len
    if wanted is not None and wanted > limit:
        return [error("max-model-len-too-long", "spec.serving.maxModelLen",
                      f"maxModelLen {wanted} exceeds the {limit} tokens vLLM derives from the target's config (position keys and RoPE scaling); use at most {limit}")]
    return []


def _check_draft_max_model_len(spec: SpeculativeDeploymentSpec, target: Geometry, draft: Geometry | None) -> list[Finding]:
    # SpeculativeConfig._maybe_override_draft_max_model_len (vllm/config/speculative.py): a
    # speculative max_model_len may not exceed the draft's or the target's length.
    wanted = spec.draft.speculative_config.get("max_model_len")
    if wanted is None or draft is None:
        return []
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1:
        return []  # a type or bound error, which check_speculative_config reports
    field = f"{PASSTHROUGH_FIELD}.max_model_len"
    target_len = spec.serving.max_model_len or target.derived_max_model_len
    limit = min(draft.derived_max_model_len, target_len)
    if wanted > limit:
        return [error("speculative-max-model-len", field,
                      f"max_model_len {wanted} exceeds what the draft ({draft.derived_max_model_len}) and the target ({target_len}) allow; use at most {limit}")]
    return []


def _check_declared_speculator(spec: SpeculativeDeploymentSpec, draft: Geometry | None, facts: VllmFacts) -> list[Finding]:
    # v1/worker/gpu/spec_decode/speculator_config.py _resolve_checkpoint_config_class (releases that have it):
    # an explicit method must be the base method of the speculator the draft declares.
    if draft is None or not facts.logic.method_checked_against_checkpoint:
        return []
    declared = facts.declared_speculator(draft.architectures)
    method = spec.draft.speculative_method.name
    if declared is None or declared["base_method"] == method:
        return []
    return [error("method-checkpoint-mismatch", "spec.draft.method",
                  f"vLLM {facts.version} checks the method against the draft checkpoint: {list(draft.architectures)} is a "
                  f"{declared['base_method']!r} checkpoint, not {method!r}; use method {declared['base_method']} or a {method} draft")]


def _check_target_config_keys(spec: SpeculativeDeploymentSpec, target: Geometry) -> list[Finding]:
    """Keys the method's speculator reads from the target's config with no default:
    extract_hidden_states builds its draft config from the target's (ExtractHiddenStatesConfig),
    and its speculator refuses one without eagle_aux_hidden_state_layer_ids at start-up
    (v1/spec_decode/extract_hidden_states.py, v1/worker/gpu/spec_decode/extract_hidden_states.py).
    An --hf-overrides in extraArgs may add them: then only the pod can tell."""
    method = spec.draft.speculative_method
    if any(arg.startswith("--hf-overrides") for arg in spec.vllm.extra_args):
        return []
    return [error("target-config-key-missing", f"spec.target.config.{key}",
                  f"method {method.name} reads {key} from the target's config.json, which has none: the pod would fail at "
                  f"start-up; add it to the config (or pass it with --hf-overrides in spec.vllm.extraArgs)", Stage.LOAD)
            for key in method.target_config_keys if key not in target.text_config_keys]


def check_pair(spec: SpeculativeDeploymentSpec, models: Models, facts: VllmFacts) -> list[Finding]:
    """Rules that hold for every parallel layout and every k."""
    target, draft = models.target, models.draft
    findings = _check_method(spec, facts)
    if has_errors(findings):
        return findings  # every other rule is the method's; vLLM stops at the method too
    if spec.draft.speculative_method.judged_only_in_image:
        # The draft's rules are the image's code: only the target's own are judged here.
        return findings + _check_target_architecture(target, facts) + _check_max_model_len(spec, target)
    findings += _check_architectures(spec, target, draft, facts)
    findings += _check_vocab(spec, target, draft, facts)
    findings += _check_max_model_len(spec, target) + _check_target_config_keys(spec, target)
    findings += _check_draft_max_model_len(spec, target, draft)
    if not models.draft_is_target:
        findings += _check_declared_speculator(spec, draft, facts)
    package = spec.draft.speculative_method.needs_package
    if package and facts.logic.method_packages_required:
        findings.append(warning("suffix-needs-arctic-inference", "spec.draft.method",
                                f"method {spec.draft.speculative_method.name} needs the {package} package in the vLLM image"))
    return findings


def _kv_rule(heads: int, kv_heads: int, tp: int, who: str, field: str) -> list[Finding]:
    # QKVParallelLinear (vllm/model_executor/layers/linear.py): KV heads are split when
    # tp < kv, replicated when tp >= kv; either way one must divide the other.
    if tp >= kv_heads and tp % kv_heads != 0:
        return [error(f"{who}-kv-heads-tp", field,
                      f"{who} has {kv_heads} KV heads; with tensor parallel size {tp} >= {kv_heads} it must be a multiple of {kv_heads}")]
    if tp < kv_heads and kv_heads % tp != 0:
        return [error(f"{who}-kv-heads-tp", field,
                      f"{who} has {kv_heads} KV heads; tensor parallel size {tp} must divide them (allowed: {divisors_note(kv_heads)})")]
    return []


def check_model_tp(model: Geometry, tp: int, who: str, field: str) -> list[Finding]:
    """ModelConfig.verify_with_parallel_config (vllm/config/model.py) + the KV split.
    MLA has one latent KV head per GPU and no hidden_size % heads rule."""
    findings = []
    if model.num_attention_heads % tp != 0:
        findings.append(error(f"{who}-heads-tp", field,
                              f"{who} has {model.num_attention_heads} attention heads, not divisible by tensor parallel size {tp} (allowed: {divisors_note(model.num_attention_heads)})"))
    if not model.uses_mla and model.num_attention_heads:  # attention-free drafts have no QKV split
        findings += _kv_rule(model.num_attention_heads, model.num_kv_heads, tp, who, field)
    return findings


def check_layout(spec: SpeculativeDeploymentSpec, models: Models, tp: int, draft_tp: int | None, pp: int,
                 facts: VllmFacts) -> list[Finding]:
    """Rules for one TP / draft-TP / PP choice."""
    method, target, draft = spec.draft.speculative_method, models.target, models.draft
    findings = check_model_tp(target, tp, "target", TP_FIELD)
    if draft is not None and draft_tp is not None:
        # SpeculativeConfig._verify_and_get_draft_tp: 1 or exactly the target's TP.
        if draft_tp not in (1, tp):
            findings.append(error("draft-tp-choice", DRAFT_TP_FIELD,
                                  f"draft tensor parallel size must be 1 or the target's ({tp}), got {draft_tp}"))
        else:
            findings += check_model_tp(draft, draft_tp, "draft", DRAFT_TP_FIELD)
    if pp > 1:
        if not method.pipeline_parallel:
            findings.append(error("pipeline-parallel-method", PP_FIELD,
                                  f"method {method.name} does not support pipeline parallelism (vLLM runs the draft at PP 1 and {method.name} shares target weights); use pipelineParallelSize 1 and more tensor parallelism"))
        if not any(facts.supports_pipeline_parallel(a) for a in target.architectures):
            findings.append(error("pipeline-parallel-architecture", PP_FIELD,
                                  f"target architecture {list(target.architectures)} does not implement pipeline parallelism in vLLM"))
        if pp > target.num_layers:
            findings.append(error("pipeline-parallel-layers", PP_FIELD,
                                  f"pipeline parallel size {pp} exceeds the target's {target.num_layers} layers"))
    return findings
