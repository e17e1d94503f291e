"""Choose the parallel layout: the smallest valid one that fits memory, TP kept inside a
node where possible, every rejected candidate recorded with its reason."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specdeploy.api.spec import TARGET_AS_DRAFT_METHODS, SpeculativeDeploymentSpec
from specdeploy.geometry import Geometry, read_geometry
from specdeploy.geometry.drafts import vllm_draft_config
from specdeploy.pipeline import Evaluation, ModelInputs
from specdeploy.planning.cache_volume import check_model_cache
from specdeploy.planning.gpus import UnknownGpuError, lookup_gpu
from specdeploy.planning.memory import (
    DRAFT_KV_FREE_METHODS,
    GIB,
    activation_reserve_gib,
    attention_bytes_per_token,
    estimate_draft_weight_bytes,
    estimate_weight_bytes,
    kv_cache_need,
    layer_caches,
    state_bytes_per_sequence,
)
from specdeploy.planning.plan import Candidate, MemoryEstimate, ModelLayout, Plan
from specdeploy.validation.findings import Finding, Severity, error, has_errors, info
from specdeploy.validation.rules import (
    DRAFT_TP_FIELD,
    check_layout,
    check_model_tp,
    check_pair,
    resolve_num_speculative_tokens,
)
from specdeploy.validation.load import DRAFT_AT_TARGET_TP_METHODS, built_draft_tp, check_load_layout, check_load_pair
from specdeploy.validation.methods import NO_PIPELINE_PARALLEL

MAX_NODES_PER_REPLICA = 16
MAX_PIPELINE_PARALLEL = 16


@dataclass(frozen=True)
class _Models:
    target: Geometry
    draft: Geometry | None  # for mtp: the target itself (its MTP layers draft)
    target_weight_bytes: int
    draft_weight_bytes: int
    weights_source: str


def _gpu_memory_gib(spec: SpeculativeDeploymentSpec) -> tuple[float | None, list[Finding]]:
    gpu = spec.resources.gpu
    if gpu.memory_gi_b is not None:
        return gpu.memory_gi_b, []
    if gpu.product is None:
        return None, [info("memory-not-checked", "spec.resources.gpu",
                           "no GPU product or memoryGiB given: the memory fit is not checked")]
    try:
        return lookup_gpu(gpu.product).memory_gib, []
    except UnknownGpuError as exc:
        return None, [error("gpu-unknown", "spec.resources.gpu.product", str(exc))]


def _weights(spec: SpeculativeDeploymentSpec, target: Geometry, target_in: ModelInputs,
             draft: Geometry | None, draft_in: ModelInputs | None) -> tuple[int, int, str]:
    if spec.target.weights_gi_b is not None:
        target_bytes, source = int(spec.target.weights_gi_b * GIB), "spec.target.weightsGiB"
    elif target_in.weight_bytes:
        target_bytes, source = target_in.weight_bytes, "safetensors index"
    else:
        target_bytes, source = estimate_weight_bytes(target), "estimated from config.json"
    method = spec.draft.method
    if method == "mtp" or not spec.draft.model or draft is None:  # model-free methods have no draft.model
        draft_bytes = 0  # MTP layers / an in-checkpoint DSpark head ship inside the target checkpoint
    elif spec.draft.weights_gi_b is not None:
        draft_bytes = int(spec.draft.weights_gi_b * GIB)
    elif draft_in is not None and draft_in.weight_bytes:
        draft_bytes = draft_in.weight_bytes
    else:
        draft_bytes = estimate_draft_weight_bytes(method, draft, target.vocab_size)
    return target_bytes, draft_bytes, source


def _layout(model: Geometry, tp: int) -> ModelLayout:
    return ModelLayout(
        attention_heads_per_gpu=model.num_attention_heads // tp,
        kv_heads_per_gpu=1 if model.uses_mla else (max(1, model.num_kv_heads // tp) if model.num_kv_heads else 0),
        head_size=model.head_size,
        uses_mla=model.uses_mla,
        num_experts=model.num_experts,
    )


def _memory(spec: SpeculativeDeploymentSpec, models: _Models, gpu_gib: float,
            tp: int, draft_tp: int | None, pp: int, max_model_len: int, k: int) -> MemoryEstimate:
    caches = layer_caches(spec.draft.method, models.target, models.draft, tp, draft_tp, pp,
                          spec.serving.kv_cache_dtype, k)
    need = kv_cache_need(caches, max_model_len, spec.serving.min_concurrent_sequences, k)
    return MemoryEstimate(
        gpu_memory_gib=gpu_gib,
        budget_gib=spec.serving.gpu_memory_utilization * gpu_gib,
        target_weights_gib=models.target_weight_bytes / (tp * pp) / GIB,
        draft_weights_gib=models.draft_weight_bytes / (built_draft_tp(spec.draft.method, tp, draft_tp) or 1) / GIB,
        kv_cache_bytes=need.bytes,
        activation_reserve_gib=activation_reserve_gib(gpu_gib),
        kv_bytes_per_token=attention_bytes_per_token(caches),
        state_bytes_per_sequence=state_bytes_per_sequence(caches),
        block_size=need.block_size,
        layers=tuple(caches),
        weights_source=models.weights_source,
    )


def _nodes(tp: int, pp: int, per_node: int) -> tuple[int, int] | None:
    """(nodes, GPUs per pod) for tp x pp GPUs, or None if they cannot split evenly. vLLM
    numbers ranks TP-first, so a TP group must fill whole pods or fit inside one."""
    world = tp * pp
    nodes = math.ceil(world / per_node)
    if world % nodes:
        return None
    per_pod = world // nodes
    if nodes > 1 and per_pod % tp and tp % per_pod:
        return None
    return nodes, per_pod


def _candidate_layouts(spec: SpeculativeDeploymentSpec, target: Geometry) -> list[tuple[int, int]]:
    """(tp, pp) pairs in preference order: fewest nodes; inside one node, TP before PP
    (pipeline stages add latency); across nodes, PP between nodes before TP over the
    network; then fewest GPUs."""
    per_node = spec.resources.gpu.per_node
    max_world = per_node * MAX_NODES_PER_REPLICA
    want_tp, want_pp = spec.parallelism.tensor_parallel_size, spec.parallelism.pipeline_parallel_size
    tps = [want_tp] if want_tp != "auto" else [t for t in range(1, min(target.num_attention_heads, max_world) + 1) if target.num_attention_heads % t == 0]
    if want_pp != "auto":
        pps = [want_pp]
    elif spec.draft.method in NO_PIPELINE_PARALLEL:
        pps = [1]
    else:
        pps = list(range(1, MAX_PIPELINE_PARALLEL + 1))
    layouts = [(tp, pp) for tp in tps for pp in pps if tp * pp <= max_world or (want_tp != "auto" and want_pp != "auto")]
    def preference(layout: tuple[int, int]) -> tuple[int, bool, int, int]:
        tp, pp = layout
        nodes = math.ceil(tp * pp / per_node)
        return nodes, (pp > 1) if nodes == 1 else (tp > per_node), tp * pp, pp

    return sorted(layouts, key=preference)


def _draft_tp(spec: SpeculativeDeploymentSpec, draft: Geometry | None, tp: int) -> tuple[int | None, list[Finding]]:
    if draft is None:
        return None, []
    wanted = spec.draft.tensor_parallel_size
    if wanted != "auto":
        return wanted, []
    if spec.draft.method == "mlp_speculator":
        return 1, []  # vLLM runs MLPSpeculator only at TP 1
    if tp == 1 or spec.draft.method in DRAFT_AT_TARGET_TP_METHODS or not check_model_tp(draft, tp, "draft", DRAFT_TP_FIELD):
        return tp, []  # eagle/eagle3/mtp/dflash drafts run at the target's TP in any case (validation/load.py)
    return 1, [info("draft-tp-fallback", DRAFT_TP_FIELD,
                    f"draft has {draft.num_attention_heads} attention heads ({draft.num_kv_heads} KV), which tensor parallel size {tp} does not divide: the draft runs at TP 1")]


def _speculative_config(spec: SpeculativeDeploymentSpec, k: int, draft_tp: int | None) -> dict[str, Any]:
    draft = spec.draft
    config: dict[str, Any] = {"method": draft.method, "num_speculative_tokens": k}
    if draft.has_own_checkpoint:
        config["model"] = draft.model
    if draft.revision:
        config["revision"] = draft.revision
    if draft_tp is not None:
        config["draft_tensor_parallel_size"] = draft_tp
    return {**draft.speculative_config, **config}


def _read_models(spec: SpeculativeDeploymentSpec, target_in: ModelInputs, draft_in: ModelInputs | None) -> tuple[_Models | None, list[Finding]]:
    target, findings = read_geometry(target_in.config, "spec.target.config")
    method = spec.draft.method
    draft: Geometry | None = None
    if method in TARGET_AS_DRAFT_METHODS and not spec.draft.model:
        draft = target
    elif spec.draft.has_own_checkpoint:
        if draft_in is None:
            findings.append(error("draft-config-missing", "spec.draft.config",
                                  f"method {method} needs the draft's config.json (draft.config, draft.configMapRef, or a reachable draft.model)"))
        else:
            draft_config = vllm_draft_config(method, draft_in.config, target.vocab_size) if target else draft_in.config
            draft, draft_findings = read_geometry(draft_config, "spec.draft.config")
            findings += draft_findings
    if target is None or has_errors(findings):
        return None, findings
    target_bytes, draft_bytes, source = _weights(spec, target, target_in, draft, draft_in)
    return _Models(target, draft, target_bytes, draft_bytes, source), findings


@dataclass(frozen=True)
class _Layout:
    """One valid candidate: what the plan is built from."""

    tp: int
    draft_tp: int | None
    pp: int
    nodes: int
    gpus_per_pod: int
    memory: MemoryEstimate | None
    findings: tuple[Finding, ...]


def _try_layout(spec: SpeculativeDeploymentSpec, models: _Models, tp: int, pp: int, gpu_gib: float | None,
                max_model_len: int, k: int = 0) -> tuple[Candidate, _Layout | None, list[Finding]]:
    """Judge one (tp, pp): the candidate record, the layout if it is usable, and the
    findings that rule it out (reported when no candidate is left)."""
    per_node = spec.resources.gpu.per_node
    draft_tp, draft_tp_findings = _draft_tp(spec, models.draft, tp)
    findings = check_layout(spec, models.target, models.draft, tp, draft_tp, pp) + check_load_layout(spec, models.draft, tp, draft_tp)
    split = _nodes(tp, pp, per_node)
    if split is None:
        findings.append(error("layout-node-split", "spec.resources.gpu.perNode",
                              f"TP {tp} x PP {pp} = {tp * pp} GPUs cannot be split over nodes of {per_node} GPUs with every tensor-parallel group inside a node or spanning whole nodes"))
    if has_errors(findings):
        reason = "; ".join(f.message for f in findings if f.severity is Severity.ERROR)
        return Candidate(tp, pp, False, reason), None, findings
    memory = _memory(spec, models, gpu_gib, tp, draft_tp, pp, max_model_len, k) if gpu_gib else None
    if memory is not None and not memory.fits:
        blocking = error("memory-does-not-fit", "spec.resources.gpu",
                         f"TP {tp} x PP {pp} needs {memory.required_gib:.1f} GiB per GPU (weights {memory.target_weights_gib + memory.draft_weights_gib:.1f}, KV cache {memory.kv_cache_gib:.1f}, reserve {memory.activation_reserve_gib:.1f}) but gpuMemoryUtilization x GPU memory is {memory.budget_gib:.1f} GiB; use more GPUs, a larger GPU, a shorter maxModelLen or fewer minConcurrentSequences")
        return Candidate(tp, pp, False, f"needs {memory.required_gib:.1f} GiB per GPU, budget {memory.budget_gib:.1f} GiB"), None, [blocking]
    reason = "smallest valid layout that fits" if memory else "smallest valid layout (memory not checked)"
    nodes, gpus_per_pod = split  # type: ignore[misc]
    return Candidate(tp, pp, True, reason), _Layout(tp, draft_tp, pp, nodes, gpus_per_pod, memory, tuple(findings + draft_tp_findings)), []


def _decisions(models: _Models, layout: _Layout, per_node: int) -> tuple[str, ...]:
    target, draft = models.target, models.draft
    decisions = [f"tensor parallel {layout.tp}: {target.num_attention_heads} target heads -> {target.num_attention_heads // layout.tp} per GPU"]
    if draft is not None and layout.draft_tp is not None:
        decisions.append(f"draft tensor parallel {layout.draft_tp}: {draft.num_attention_heads} draft heads -> {draft.num_attention_heads // layout.draft_tp} per GPU")
    if layout.nodes > 1:
        decisions.append(f"{layout.tp * layout.pp} GPUs exceed {per_node} per node: {layout.nodes} nodes of {layout.gpus_per_pod} GPUs per replica (LeaderWorkerSet)")
    return tuple(decisions)


def plan_deployment(spec: SpeculativeDeploymentSpec, target_in: ModelInputs, draft_in: ModelInputs | None) -> Evaluation:
    """Validate the pair, then try layouts in preference order and keep the first that
    is valid and fits; the plan lists every candidate and why it lost."""
    models, findings = _read_models(spec, target_in, draft_in)
    if models is None:
        return Evaluation(tuple(findings), None)
    target = models.target
    findings += check_pair(spec, target, models.draft)
    findings += check_load_pair(spec, target, models.draft, draft_in.config if draft_in else None)
    k, k_findings = resolve_num_speculative_tokens(spec, models.draft)
    findings += k_findings
    gpu_gib, gpu_findings = _gpu_memory_gib(spec)
    findings += gpu_findings
    pair_failed = k is None or has_errors(findings)

    max_model_len = spec.serving.max_model_len or target.derived_max_model_len
    candidates: list[Candidate] = []
    chosen: _Layout | None = None
    blocking: list[Finding] = []
    for tp, pp in _candidate_layouts(spec, target):
        # An invalid pair still gets its layout findings (all reasons at once), never a plan.
        candidate, layout, blocking = _try_layout(spec, models, tp, pp, None if pair_failed else gpu_gib, max_model_len, k or 0)
        if layout is not None and pair_failed:
            blocking = list(layout.findings)
            break
        candidates.append(candidate)
        if layout is not None:
            chosen = layout
            break

    if chosen is None or k is None:
        if not pair_failed and len(candidates) > 1:
            findings.append(error("no-layout", "spec.parallelism",
                                  f"none of {len(candidates)} layouts is valid and fits: " + "; ".join(f"TP {c.tensor_parallel_size} x PP {c.pipeline_parallel_size}: {c.reason}" for c in candidates[:6])))
        return Evaluation(tuple(findings + blocking), None)

    findings += chosen.findings
    plan = Plan(
        method=spec.draft.method,
        num_speculative_tokens=k,
        tensor_parallel_size=chosen.tp,
        draft_tensor_parallel_size=chosen.draft_tp,
        pipeline_parallel_size=chosen.pp,
        nodes_per_replica=chosen.nodes,
        gpus_per_pod=chosen.gpus_per_pod,
        max_model_len=max_model_len or None,
        target=_layout(target, chosen.tp),
        draft=_layout(models.draft, built_draft_tp(spec.draft.method, chosen.tp, chosen.draft_tp) or chosen.tp) if models.draft is not None else None,
        memory=chosen.memory,
        speculative_config=_speculative_config(spec, k, chosen.draft_tp),
        candidates=tuple(candidates),
        decisions=_decisions(models, chosen, spec.resources.gpu.per_node),
    )
    findings += check_model_cache(spec, models.target_weight_bytes + models.draft_weight_bytes,
                                  "estimated" in models.weights_source)
    return Evaluation(tuple(findings), plan)
