"""The load stage: what vLLM fails on while it builds the models, after its config
check has accepted them. Each rule was found by building the model on the meta device
(tests/parity/memory_judge.py) and is cited to the vLLM file that fails: DSpark heads' config
fields (load_dspark_model's classes), the draft's heads at the target's TP (every parallel layer
reads the global TP group), the sizes a model class divides by TP (vllm/tp_splits.py: vision
towers, unreplicated KV heads, the experts' width, the padded vocabulary) and FP8 weight blocks
(vllm/fp8_blocks.py), for the target and for a draft at the TP it is built at."""

from __future__ import annotations

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.geometry import Geometry, Models
from specdeploy.geometry.splits import module_split_failures, split_failures
from specdeploy.findings import Finding, Stage, error, warning
from specdeploy.validation.rules import DRAFT_TP_FIELD, TP_FIELD, check_model_tp
from specdeploy.vllm import VllmFacts
from specdeploy.vllm.drafts import (DSPARK_ARCHITECTURES, DSPARK_V4_REQUIRED_FIELDS, MARKOV_RANK_DSPARK_ARCHITECTURES,
                                    draft_architectures, dspark_rename)
from specdeploy.vllm.methods import built_draft_tp
from specdeploy.vllm.lm_head_copy import SHARE_REFUSAL
from specdeploy.vllm.tp_splits import expert_parallel

LOAD = Stage.LOAD
SPECULATIVE_CONFIG = "spec.draft.speculativeConfig"


def _dspark_class(draft: Geometry) -> str | None:
    """The DSpark class vLLM builds: its rename of a Qwen3 `DSparkDraftModel`, else the DSpark
    architecture the draft names."""
    renamed = dspark_rename(draft.model_type, draft.architectures)
    return renamed or next((a for a in draft.architectures if a in MARKOV_RANK_DSPARK_ARCHITECTURES), None)


def _dspark_v4_head_fails(spec: SpeculativeDeploymentSpec, models: Models) -> list[Finding]:
    """config/speculative.py names any other dspark draft (and the target itself when there is no
    draft model) `DSparkDraftModel`, DeepSeek-V4's in-checkpoint DSpark head; its class
    (models/deepseek_v4/nvidia/dspark.py DSparkDeepseekV4Model.__init__) reads DeepSeek-V4's
    hyper-connection and DSpark fields from that config with no default. Built on the meta
    device: a dense Qwen3/Llama checkpoint fails on `hc_mult`, DeepSeek-V4-Flash's own config on
    `dspark_target_layer_ids`."""
    target, draft = models.target, models.draft
    checkpoint = draft if draft is not None and draft is not target else target
    if checkpoint.model_type == "deepseek_v41" or target.model_type == "deepseek_v41":
        return []  # DSparkV41DraftModel: another class, not built here
    method = spec.draft.speculative_method.name
    if checkpoint is not target and set(draft_architectures(method, checkpoint.model_type, checkpoint.architectures)) & DSPARK_ARCHITECTURES:
        return []
    stated = checkpoint.config_keys if checkpoint is not target else frozenset()
    missing = next((f for f in DSPARK_V4_REQUIRED_FIELDS if f not in stated and f not in checkpoint.text_config_keys), None)
    if missing is None:
        return []
    which = "the draft's config.json" if checkpoint is not target else "the target's config.json (dspark without a draft model drafts from the target checkpoint)"
    field = "spec.draft.config" if checkpoint is not target else "spec.target.config"
    return [error("draft-load-fails", f"{field}.{missing}",
                  f"vLLM builds this dspark draft as DeepSeek-V4's in-checkpoint DSpark head (DSparkDraftModel, "
                  f"vllm/models/deepseek_v4/nvidia/dspark.py), whose __init__ reads config.{missing} from {which}: "
                  f"the pod would fail at model load with AttributeError: the {checkpoint.model_type or 'model'} "
                  f"config has no attribute '{missing}'. Use a DSpark draft ({', '.join(sorted(DSPARK_ARCHITECTURES))}) "
                  f"or another method", LOAD)]


def _own_lm_head_fails(spec: SpeculativeDeploymentSpec, models: Models, facts: VllmFacts) -> list[Finding]:
    """draft_lm_head_quantization needs a draft that shares the target's lm_head; a draft whose LM
    head covers another vocabulary keeps its own, and vLLM refuses it at load (vllm/lm_head_copy.py)."""
    quantization = spec.draft.speculative_config.get("draft_lm_head_quantization")
    target, draft = models.target, models.draft
    if (quantization is None or "draft_lm_head_quantization" not in facts.speculative_fields or draft is None
            or draft is target or not spec.draft.speculative_method.shares_target_embeddings):
        return []
    head = draft.draft_vocab_size or draft.vocab_size
    if not head or head == target.vocab_size:
        return []
    return [error("draft-load-fails", f"{SPECULATIVE_CONFIG}.draft_lm_head_quantization",
                  f"the draft's LM head covers its own vocabulary of {head} (the target's is {target.vocab_size}), so vLLM "
                  f"keeps the draft's lm_head and refuses draft_lm_head_quantization at model load ({SHARE_REFUSAL}). "
                  f"Leave draft_lm_head_quantization unset for this draft", LOAD)]


def check_load_pair(spec: SpeculativeDeploymentSpec, models: Models, facts: VllmFacts) -> list[Finding]:
    """Load failures independent of the layout."""
    return _own_lm_head_fails(spec, models, facts) + _dspark_load_fails(spec, models)


def _dspark_load_fails(spec: SpeculativeDeploymentSpec, models: Models) -> list[Finding]:
    """A DSpark draft's class reads fields its config must hold."""
    target, draft = models.target, models.draft
    if not spec.draft.speculative_method.builds_dspark_head:
        return []
    v4_head = _dspark_v4_head_fails(spec, models)
    if v4_head or draft is None or draft is target:
        return v4_head
    cls = _dspark_class(draft)
    if cls is None or "markov_rank" in draft.config_keys:
        return []
    nested = draft.dflash_markov_rank
    where = f"; this config keeps it only inside dflash_config ({nested})" if nested is not None else ""
    return [error("draft-load-fails", "spec.draft.config.markov_rank",
                  f"vLLM builds this draft as {cls} (vllm/model_executor/models/qwen3_dspark.py), whose __init__ reads "
                  f"config.markov_rank{where}: the pod would fail at model load with AttributeError: "
                  f"'Qwen3Config' object has no attribute 'markov_rank'. Put markov_rank (and the other DSpark head "
                  f"fields) at the top level of the draft's config.json", LOAD)]


# Where vLLM builds each draft (cited by the draft-TP findings): the draft's parallel layers read
# the global TP group, get_tensor_model_parallel_world_size() (model_executor/layers/linear.py
# QKVParallelLinear, ColumnParallelLinear; vocab_parallel_embedding.py), whatever parallel_config
# the loader passes.
_DRAFT_BUILD = ("vLLM builds the draft's layers with the target's tensor-parallel group (v1/worker/gpu/spec_decode/"
                "eagle/utils.py load_eagle_model builds with the target's VllmConfig; dspark/utils.py load_dspark_model "
                "and standalone_ar/speculator.py StandaloneARSpeculator.load_draft_model pass a parallel_config with "
                "the draft's TP, but every parallel layer reads get_tensor_model_parallel_world_size())")


def _split_failures(model: Geometry, architectures: list[str], tp: int, who: str, field: str,
                    ep: bool, version: str) -> list[Finding]:
    """The sizes the model's layers split over TP that this TP does not divide (geometry/splits.py)."""
    return _load_fails(who, field, tp, split_failures(model, architectures, tp, ep, version))


def _load_fails(who: str, field: str, tp: int, reasons: list[str]) -> list[Finding]:
    return [error(f"{who}-load-fails", field,
                  f"vLLM accepts TP {tp} for the {who} but cannot build it: {reason}; the pod would fail at model "
                  f"load. Choose a tensor parallel size that divides it", LOAD) for reason in reasons]


def _mtp_failures(models: Models, tp: int, version: str, target_reasons: list[Finding]) -> list[Finding]:
    """The MTP layers vLLM builds from the target (its MTP module, at the target's TP): the widths
    only they split (an MTP layer's input projection), beyond the target's own."""
    module = models.target.mtp
    if module is None or module.refusal:
        return []
    seen = {f.message for f in target_reasons}
    reasons = [f"its MTP module {module.architecture}'s {reason}"
               for reason in module_split_failures(module.architecture, models.target, tp, version)]
    return [f for f in _load_fails("draft", TP_FIELD, tp, reasons) if f.message not in seen]


def check_load_layout(spec: SpeculativeDeploymentSpec, models: Models, tp: int,
                      draft_tp: int | None, version: str) -> list[Finding]:
    """What fails while vLLM (release `version`) builds this layout: the sizes the target's and
    the draft's classes split over TP (the MTP module's for mtp), and a draft built at the
    target's TP whose heads do not split there."""
    target, draft = models.target, models.draft
    ep = expert_parallel(spec.vllm.extra_args)
    findings = _split_failures(target, list(target.architectures), tp, "target", TP_FIELD, ep, version)
    method = spec.draft.speculative_method
    if method.target_mtp_layers and draft is target:
        return findings + _mtp_failures(models, tp, version, findings)
    built = built_draft_tp(method, tp, draft_tp)
    if draft is None or draft is target or built is None or draft_tp is None:
        return findings
    archs = draft_architectures(method.name, draft.model_type, draft.architectures)
    findings += _split_failures(draft, archs, built, "draft", DRAFT_TP_FIELD, ep, version)
    if built == draft_tp:
        return findings
    refusals = check_model_tp(draft, built, "draft", DRAFT_TP_FIELD)
    if not refusals:
        if spec.draft.tensor_parallel_size == "auto":
            return findings
        return findings + [warning("draft-tp-not-honoured", DRAFT_TP_FIELD,
                                   f"{_DRAFT_BUILD}: draft tensor parallel size {draft_tp} is accepted but the draft runs at TP {built}", LOAD)]
    heads, kv = draft.num_attention_heads, draft.num_kv_heads
    return findings + [error("draft-load-fails", DRAFT_TP_FIELD,
                             f"{_DRAFT_BUILD}, not at draft tensor parallel size {draft_tp}: the draft's {heads} attention heads "
                             f"({kv} KV) do not split over TP {built}, so the pod would fail at model load in the draft's attention "
                             f"layer; choose a tensor parallel size that divides the draft's heads", LOAD)]
