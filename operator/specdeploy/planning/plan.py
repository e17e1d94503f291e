"""The Plan: every parallelism and memory decision as a value, with the reason for each."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specdeploy.planning.batch import BatchLimits
from specdeploy.planning.compute import LayoutCompute
from specdeploy.planning.kv_cache import LayerCache


@dataclass(frozen=True)
class ModelLayout:
    """How one model's attention is split across the GPUs of a TP group."""

    attention_heads_per_gpu: int
    kv_heads_per_gpu: int
    head_size: int
    uses_mla: bool
    num_experts: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "attentionHeadsPerGpu": self.attention_heads_per_gpu,
            "kvHeadsPerGpu": self.kv_heads_per_gpu,
            "headSize": self.head_size,
            "usesMLA": self.uses_mla,
            "numExperts": self.num_experts,
        }


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU memory of one layout; `fits` compares with the usable budget.

    `kv_cache_bytes` is exact: what vLLM's start-up check (`_check_enough_kv_cache_memory`)
    needs for minConcurrentSequences requests of maxModelLen, null block included; the
    per-layer-type breakdown is in `layers`."""

    gpu_memory_gib: float
    budget_gib: float  # gpuMemoryUtilization x GPU memory
    target_weights_gib: float
    draft_weights_gib: float
    kv_cache_bytes: int
    activation_reserve_gib: float
    kv_bytes_per_token: int  # per GPU, target + draft attention layers
    state_bytes_per_sequence: int  # per GPU, Mamba-style layers (KDA, GatedDeltaNet)
    block_size: int  # tokens per KV block after hybrid alignment
    layers: tuple[LayerCache, ...]
    weights_source: str
    # The judging release's memory defaults the estimate assumed (VllmFacts.memory_assumptions):
    # its default block size and gpu_memory_utilization, and how it sizes the KV cache.
    release_defaults: dict[str, Any] = field(default_factory=dict)
    # The scheduler batch the need assumed (planning/batch.py): the release's default for this
    # GPU or the user's --max-num-batched-tokens, and the tokens in flight it gives.
    batch: BatchLimits | None = None
    in_flight_tokens: int = 0

    @property
    def kv_cache_gib(self) -> float:
        return self.kv_cache_bytes / 1024**3

    @property
    def required_gib(self) -> float:
        return self.target_weights_gib + self.draft_weights_gib + self.kv_cache_gib + self.activation_reserve_gib

    @property
    def fits(self) -> bool:
        return self.required_gib <= self.budget_gib

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpuMemoryGiB": round(self.gpu_memory_gib, 2),
            "budgetGiB": round(self.budget_gib, 2),
            "targetWeightsGiB": round(self.target_weights_gib, 2),
            "draftWeightsGiB": round(self.draft_weights_gib, 2),
            "kvCacheGiB": round(self.kv_cache_gib, 2),
            "kvCacheBytes": self.kv_cache_bytes,
            "activationReserveGiB": round(self.activation_reserve_gib, 2),
            "requiredGiB": round(self.required_gib, 2),
            "kvBytesPerTokenPerGpu": self.kv_bytes_per_token,
            "stateBytesPerSequencePerGpu": self.state_bytes_per_sequence,
            "kvBlockSize": self.block_size,
            "layers": [layer.to_dict() for layer in self.layers],
            "weightsSource": self.weights_source,
            "releaseDefaults": self.release_defaults,
            **({"batch": {**self.batch.to_dict(), "inFlightTokens": self.in_flight_tokens}} if self.batch else {}),
            "fits": self.fits,
        }


@dataclass(frozen=True)
class Placement:
    """The nodes the serving pods may run on (planning/placement.py decides), as
    node-selector requirements."""

    vendor: str
    product_label: str
    products: tuple[str, ...]  # empty: any product of the vendor (memoryGiB without a product)
    memory_label: str | None
    min_memory_mib: int | None

    def requirements(self) -> list[dict[str, Any]]:
        """NodeSelectorRequirements: every one must hold (one nodeSelectorTerm's matchExpressions)."""
        found: list[dict[str, Any]] = []
        if self.products:
            found.append({"key": self.product_label, "operator": "In", "values": list(self.products)})
        if self.memory_label and self.min_memory_mib:
            # Gt is strict and takes an integer: more than (need - 1) MiB is at least the need.
            found.append({"key": self.memory_label, "operator": "Gt", "values": [str(self.min_memory_mib - 1)]})
        return found

    def describe(self) -> str:
        what = f"{self.product_label} in {', '.join(self.products)}" if self.products else f"any {self.vendor} GPU"
        if self.memory_label and self.min_memory_mib:
            what += f", {self.memory_label} >= {self.min_memory_mib} MiB"
        return what

    def to_dict(self) -> dict[str, Any]:
        return {"vendor": self.vendor, "nodeSelectorRequirements": self.requirements()}


@dataclass(frozen=True)
class Candidate:
    """One layout auto mode considered, and why it was taken or rejected."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    accepted: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensorParallelSize": self.tensor_parallel_size,
            "pipelineParallelSize": self.pipeline_parallel_size,
            "accepted": self.accepted,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Plan:
    """What the renderer turns into pods: one replica = nodes_per_replica pods of gpus_per_pod GPUs."""

    method: str
    num_speculative_tokens: int
    tensor_parallel_size: int
    draft_tensor_parallel_size: int | None
    pipeline_parallel_size: int
    nodes_per_replica: int
    gpus_per_pod: int
    gpu_resource_name: str  # the extended resource each pod requests gpus_per_pod of
    max_model_len: int | None
    target: ModelLayout
    draft: ModelLayout | None
    memory: MemoryEstimate | None
    vllm_version: str  # the release whose rules judged the pair (and whose CLI the args are for)
    candidates: tuple[Candidate, ...] = ()
    decisions: tuple[str, ...] = field(default=())
    compute: LayoutCompute | None = None  # what a step reads and computes: the speculation cost model's input
    placement: Placement | None = None  # the nodes the serving pods may run on

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def multi_node(self) -> bool:
        return self.nodes_per_replica > 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "vllmVersion": self.vllm_version,
            "method": self.method,
            "numSpeculativeTokens": self.num_speculative_tokens,
            "tensorParallelSize": self.tensor_parallel_size,
            "draftTensorParallelSize": self.draft_tensor_parallel_size,
            "pipelineParallelSize": self.pipeline_parallel_size,
            "nodesPerReplica": self.nodes_per_replica,
            "gpusPerPod": self.gpus_per_pod,
            "gpusPerReplica": self.gpus_per_replica,
            "gpuResourceName": self.gpu_resource_name,
            "maxModelLen": self.max_model_len,
            "target": self.target.to_dict(),
            "draft": self.draft.to_dict() if self.draft else None,
            "memory": self.memory.to_dict() if self.memory else None,
            "candidates": [c.to_dict() for c in self.candidates],
            "decisions": list(self.decisions),
            "compute": self.compute.to_dict() if self.compute else None,
            "placement": self.placement.to_dict() if self.placement else None,
        }
