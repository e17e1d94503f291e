"""Choose the parallel layout: the smallest valid one that fits memory, TP kept inside a
node where possible, every rejected candidate recorded with its reason."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from specdeploy.api.spec import PP_FIELD, SpeculativeDeploymentSpec
from specdeploy.findings import Finding, Severity, Stage, clipped, cut, error, has_errors, some_of
from specdeploy.geometry import Geometry, ModelInputs, Models
from specdeploy.planning.gpus import SpecGpu
from specdeploy.planning.cache_volume import check_model_cache
from specdeploy.planning.kv_cache import (attention_bytes_per_token, in_flight_tokens, kv_cache_need, layer_caches,
                                          state_bytes_per_sequence)
from specdeploy.planning.memory import GIB, activation_reserve_gib, estimate_draft_weight_bytes, estimate_weight_bytes
from specdeploy.planning.batch import BatchLimits, batch_limits
from specdeploy.planning.compute import layout_compute
from specdeploy.planning.placement import plan_placement, resource_name
from specdeploy.planning.plan import Candidate, MemoryEstimate, ModelLayout, Plan
from specdeploy.vllm import VllmFacts
from specdeploy.vllm.methods import built_draft_tp

# vLLM's rules for one (tp, draft_tp, pp) layout, findings out. The pipeline hands in
# validation's (check_layout + check_load_layout): planning sits below validation in the flow
# and searches layouts without knowing the rules it asks.
LayoutRules = Callable[[int, "int | None", int], list[Finding]]
MAX_NODES_PER_REPLICA = 16
MAX_PIPELINE_PARALLEL = 16


@dataclass(frozen=True)
class _Sized:
    """The pair with the weight bytes each GPU group must hold."""

    models: Models
    target_weight_bytes: int
    draft_weight_bytes: int
    weights_source: str

    @property
    def target(self) -> Geometry:
        return self.models.target

    @property
    def draft(self) -> Geometry | None:  # for mtp: the target itself (its MTP layers draft)
        return self.models.draft


def _memory(spec: SpeculativeDeploymentSpec, models: _Sized, gpu_gib: float, tp: int, draft_tp: int | None,
            pp: int, max_model_len: int, k: int, facts: VllmFacts, batch: BatchLimits) -> MemoryEstimate:
    """One layout's memory per GPU: the weights' share, every layer's cache as vLLM's start-up
    check counts it (planning/kv_cache.py), and the activation reserve."""
    method, reserve = spec.draft.method, activation_reserve_gib(gpu_gib)
    caches = layer_caches(method, models.target, models.draft, tp, draft_tp, pp, spec.serving.kv_cache_dtype, k)
    need = kv_cache_need(caches, max_model_len, spec.serving.min_concurrent_sequences, k,
                         max_num_batched_tokens=batch.max_num_batched_tokens, pp=pp,
                         release_block_size=facts.default_block_size)
    per_token, per_sequence = attention_bytes_per_token(caches), state_bytes_per_sequence(caches)
    in_flight = in_flight_tokens(batch.max_num_batched_tokens, pp)
    return MemoryEstimate(
        gpu_memory_gib=gpu_gib,
        budget_gib=spec.serving.gpu_memory_utilization * gpu_gib,
        target_weights_gib=models.target_weight_bytes / (tp * pp) / GIB,
        draft_weights_gib=models.draft_weight_bytes / (built_draft_tp(spec.draft.speculative_method, tp, draft_tp) or 1) / GIB,
        kv_cache_bytes=need.bytes,
        activation_reserve_gib=reserve,
        kv_bytes_per_token=per_token,
        state_bytes_per_sequence=per_sequence,
        block_size=need.block_size,
        layers=tuple(caches),
        weights_source=models.weights_source,
        release_defaults=facts.memory_assumptions(),
        batch=batch,
        in_flight_tokens=in_flight,
    )


def _weights(spec: SpeculativeDeploymentSpec, target: Geometry, target_in: ModelInputs,
             draft: Geometry | None, draft_in: ModelInputs | None) -> tuple[int, int, str]:
    if spec.target.weights_gi_b is not None:
        target_bytes, source = int(spec.target.weights_gi_b * GIB), "spec.target.weightsGiB"
    elif target_in.weight_bytes:
        target_bytes, source = target_in.weight_bytes, "safetensors index"
    else:
        target_bytes, source = estimate_weight_bytes(target), "estimated from config.json"
    method = spec.draft.speculative_method
    if method.target_mtp_layers or not spec.draft.model or draft is None:  # model-free methods have no draft.model
        draft_bytes = 0  # MTP layers / an in-checkpoint DSpark head ship inside the target checkpoint
    elif spec.draft.weights_gi_b is not None:
        draft_bytes = int(spec.draft.weights_gi_b * GIB)
    elif draft_in is not None and draft_in.weight_bytes:
        draft_bytes = draft_in.weight_bytes
    else:
        draft_bytes = estimate_draft_weight_bytes(method.name, draft, target.vocab_size)
    return target_bytes, draft_bytes, source


def _layout(model: Geometry, tp: int) -> ModelLayout:
    return ModelLayout(
        attention_heads_per_gpu=model.num_attention_heads // tp,
        kv_heads_per_gpu=1 if model.uses_mla else (max(1, model.num_kv_heads // tp) if model.num_kv_heads else 0),
        head_size=model.head_size,
        uses_mla=model.uses_mla,
        num_experts=model.num_experts,
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
    elif not spec.draft.speculative_method.pipeline_parallel:
        pps = [1]
    else:
        pps = list(range(1, MAX_PIPELINE_PARALLEL + 1))
    layouts = [(tp, pp) for tp in tps for pp in pps if tp * pp <= max_world or (want_tp != "auto" and want_pp != "auto")]
    def preference(layout: tuple[int, int]) -> tuple[int, bool, int, int]:
        tp, pp = layout
        nodes = math.ceil(tp * pp / per_node)
        return nodes, (pp > 1) if nodes == 1 else (tp > per_node), tp * pp, pp

    return sorted(layouts, key=preference)


def _draft_tp(spec: SpeculativeDeploymentSpec, draft: Geometry | None, tp: int) -> int | None:
    """The draft TP to pass: the user's, else what vLLM defaults to when it is unset
    (SpeculativeConfig._verify_and_get_draft_tp: 1 for an MLPSpeculator, else the target's). No
    fallback to TP 1 for a draft whose heads the target's TP does not split: vLLM builds the draft's
    layers at the target's TP whatever the draft TP (validation/load.py), so such a layout cannot
    load and the search moves on to a TP both models split at."""
    if draft is None:
        return None
    wanted = spec.draft.tensor_parallel_size
    if wanted != "auto":
        return wanted
    return 1 if spec.draft.speculative_method.draft_tp_defaults_to_one else tp


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


def _try_layout(spec: SpeculativeDeploymentSpec, models: _Sized, tp: int, pp: int, gpu_gib: float | None,
                max_model_len: int, rules: LayoutRules, k: int = 0, facts: VllmFacts | None = None,
                batch: BatchLimits | None = None) -> tuple[Candidate, _Layout | None, list[Finding]]:
    """Judge one (tp, pp): the candidate record, the layout if it is usable, and the
    findings that rule it out (reported when no candidate is left)."""
    per_node = spec.resources.gpu.per_node
    draft_tp = _draft_tp(spec, models.draft, tp)
    findings = rules(tp, draft_tp, pp)
    split = _nodes(tp, pp, per_node)
    if split is None:
        findings.append(error("layout-node-split", "spec.resources.gpu.perNode",
                              f"TP {tp} x PP {pp} = {tp * pp} GPUs cannot be split over nodes of {per_node} GPUs with every tensor-parallel group inside a node or spanning whole nodes", Stage.PLAN))
    if has_errors(findings):
        reason = "; ".join(f.message for f in findings if f.severity is Severity.ERROR)
        return Candidate(tp, pp, False, reason), None, findings
    memory = _memory(spec, models, gpu_gib, tp, draft_tp, pp, max_model_len, k, facts, batch) if gpu_gib and facts and batch else None
    if memory is not None and not memory.fits:
        blocking = error("memory-does-not-fit", "spec.resources.gpu",
                         f"TP {tp} x PP {pp} needs {memory.required_gib:.1f} GiB per GPU (weights {memory.target_weights_gib + memory.draft_weights_gib:.1f}, KV cache {memory.kv_cache_gib:.1f}, reserve {memory.activation_reserve_gib:.1f}) but gpuMemoryUtilization x GPU memory is {memory.budget_gib:.1f} GiB; use more GPUs, a larger GPU, a shorter maxModelLen or fewer minConcurrentSequences",
                         Stage.PLAN)
        return Candidate(tp, pp, False, f"needs {memory.required_gib:.1f} GiB per GPU, budget {memory.budget_gib:.1f} GiB"), None, [blocking]
    reason = "smallest valid layout that fits" if memory else "smallest valid layout (memory not checked)"
    nodes, gpus_per_pod = split  # type: ignore[misc]
    return Candidate(tp, pp, True, reason), _Layout(tp, draft_tp, pp, nodes, gpus_per_pod, memory, tuple(findings)), []


def _decisions(spec: SpeculativeDeploymentSpec, models: _Sized, layout: _Layout) -> tuple[str, ...]:
    target, draft, per_node = models.target, models.draft, spec.resources.gpu.per_node
    decisions = [f"tensor parallel {layout.tp}: {target.num_attention_heads} target heads -> {target.num_attention_heads // layout.tp} per GPU"]
    built = built_draft_tp(spec.draft.speculative_method, layout.tp, layout.draft_tp)
    if draft is not None and layout.draft_tp is not None and built is not None:
        where = "" if built == layout.draft_tp else f" (its layers split at the target's TP {built})"
        decisions.append(f"draft tensor parallel {layout.draft_tp}{where}: {draft.num_attention_heads} draft heads -> {draft.num_attention_heads // built} per GPU")
    if layout.nodes > 1:
        decisions.append(f"{layout.tp * layout.pp} GPUs exceed {per_node} per node: {layout.nodes} nodes of {layout.gpus_per_pod} GPUs per replica (LeaderWorkerSet)")
    return tuple(decisions)


def layout_findings(spec: SpeculativeDeploymentSpec, models: Models, rules: LayoutRules) -> list[Finding]:
    """vLLM's layout rules alone (no memory, no plan), for a pair that already failed: so that a
    user sees every reason at once, e.g. a draft vocab mismatch and a TP the heads refuse."""
    sized = _Sized(models, 0, 0, "")
    blocking: list[Finding] | None = None
    for tp, pp in _candidate_layouts(spec, models.target):
        _, layout, refused = _try_layout(spec, sized, tp, pp, None, 0, rules)
        if layout is not None:
            return list(layout.findings)
        blocking = refused if blocking is None else blocking
    return [f for f in blocking or [] if f.stage in (Stage.PAIR, Stage.LOAD)]


def _no_layout(spec: SpeculativeDeploymentSpec, target: Geometry, candidates: list[Candidate]) -> list[Finding]:
    """Why no layout was planned: none to try, or (after several tries) the reason each lost."""
    if not candidates:  # e.g. an explicit PP that no TP the heads allow keeps within the GPUs a replica may span
        per_node = spec.resources.gpu.per_node
        return [error("no-layout", PP_FIELD if spec.parallelism.pipeline_parallel_size != "auto" else "spec.parallelism",
                      f"no layout to try: tensorParallelSize {spec.parallelism.tensor_parallel_size} x pipelineParallelSize "
                      f"{spec.parallelism.pipeline_parallel_size} leaves no TP that divides the {target.num_attention_heads} "
                      f"attention heads within {per_node * MAX_NODES_PER_REPLICA} GPUs ({per_node} per node x "
                      f"{MAX_NODES_PER_REPLICA} nodes); give both sizes to go beyond that", Stage.PLAN)]
    if len(candidates) > 1:
        return [error("no-layout", "spec.parallelism",
                      clipped(f"none of {len(candidates)} layouts (TP x PP) is valid and fits: ", _reasons_lost(candidates)), Stage.PLAN)]
    return []


def _reasons_lost(candidates: list[Candidate]) -> list[str]:
    """Layouts that lost for the same first reason (numbers aside) together, in the first one's words
    (the first layout's findings follow in full): 16 PPs of one refused TP are one line, not 16."""
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(re.sub(r"\d+(\.\d+)?", "#", c.reason.split("; ")[0]), []).append(c)
    out = []
    for group in groups.values():
        layouts = some_of([f"{c.tensor_parallel_size}x{c.pipeline_parallel_size}" for c in group], 3)
        clauses = group[0].reason.split("; ")
        out.append(f"{layouts}: {cut(clauses[0], 100)}" + (f" (+{len(clauses) - 1} more)" if len(clauses) > 1 else ""))
    return out

def plan_layout(spec: SpeculativeDeploymentSpec, models: Models, k: int, target_in: ModelInputs,
                draft_in: ModelInputs | None, facts: VllmFacts, rules: LayoutRules, gpu: SpecGpu) -> tuple[Plan | None, list[Finding]]:
    """Try layouts in preference order and keep the first that is valid and fits; the plan lists
    every candidate and why it lost. Findings of vLLM's layout rules keep stage `pair` (an
    explicit TP vLLM refuses is a validation error); the search's own are stage `plan`."""
    target, draft = models.target, models.draft
    target_bytes, draft_bytes, source = _weights(spec, target, target_in, draft, draft_in)
    sized = _Sized(models, target_bytes, draft_bytes, source)
    product, gpu_gib, findings = gpu.product, gpu.memory_gib, list(gpu.findings)
    if has_errors(findings):
        return None, findings
    max_model_len = spec.serving.max_model_len or target.derived_max_model_len
    batch = batch_limits(spec.vllm.extra_args, facts, gpu_gib, product, max_model_len)
    candidates: list[Candidate] = []
    chosen: _Layout | None = None
    # When every layout fails, the preferred one's reasons stand for the rest (the user's TP at PP 1
    # before the PP the search adds to it).
    blocking: list[Finding] | None = None
    for tp, pp in _candidate_layouts(spec, target):
        candidate, layout, refused = _try_layout(spec, sized, tp, pp, gpu_gib, max_model_len, rules, k, facts, batch)
        candidates.append(candidate)
        blocking = refused if blocking is None else blocking
        if layout is not None:
            chosen = layout
            break
    if chosen is None:
        findings += _no_layout(spec, target, candidates)
        return None, findings + (blocking or [])
    gpu_resource = resource_name(spec.resources.gpu.resource_name, product)
    plan = Plan(
        method=spec.draft.speculative_method.name,
        num_speculative_tokens=k,
        tensor_parallel_size=chosen.tp,
        draft_tensor_parallel_size=chosen.draft_tp,
        pipeline_parallel_size=chosen.pp,
        nodes_per_replica=chosen.nodes,
        gpus_per_pod=chosen.gpus_per_pod,
        gpu_resource_name=gpu_resource,
        max_model_len=max_model_len or None,
        target=_layout(target, chosen.tp),
        draft=_layout(draft, built_draft_tp(spec.draft.speculative_method, chosen.tp, chosen.draft_tp) or chosen.tp) if draft is not None else None,
        memory=chosen.memory,
        vllm_version=facts.version,
        candidates=tuple(candidates),
        decisions=_decisions(spec, sized, chosen),
        compute=layout_compute(spec.draft.speculative_method, target, draft, (target_bytes, draft_bytes), chosen.tp,
                               built_draft_tp(spec.draft.speculative_method, chosen.tp, chosen.draft_tp),
                               spec.serving.kv_cache_dtype, product, batch.max_num_seqs),
        placement=plan_placement(product, gpu_resource, chosen.memory),
    )
    cache = check_model_cache(spec, target_bytes + draft_bytes, "estimated" in source)
    return plan, findings + list(chosen.findings) + cache
