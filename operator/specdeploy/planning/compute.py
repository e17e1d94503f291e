"""What one forward pass reads and computes on a planned layout, per tensor-parallel rank: the
inputs of the speculation cost model (telemetry/cost.py), carried in status.plan.compute so
the telemetry loop and `specdeploy advise` read the layout without the model configs.

Per TP rank, not per GPU: pipeline stages run one after another for a decode step, so a
step's time is the sum over stages, i.e. the whole model split TP ways."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from specdeploy.geometry import Geometry
from specdeploy.planning.gpus import GpuProduct
from specdeploy.planning.kv_cache import attention_bytes_per_token, model_layer_caches
from specdeploy.planning.memory import estimate_parameters, estimate_weight_bytes
from specdeploy.vllm.methods import Method


@dataclass(frozen=True)
class ModelCompute:
    """One model's step on one TP rank."""

    weight_bytes: int  # every weight the rank holds (all pipeline stages)
    expert_bytes: int  # of which routed experts: a step reads only those its tokens touch
    num_experts: int
    experts_per_token: int
    active_params: int  # parameters one token multiplies with (FLOPs = 2 x this per token)
    attention_flops_per_context_token: int  # per generated token, per token of context
    kv_bytes_per_context_token: int  # KV cache a step reads per token of context, per sequence
    hidden_size: int
    num_layers: int
    fp8: bool  # 8-bit weights run on the fp8 tensor cores

    def to_dict(self) -> dict[str, Any]:
        return {
            "weightBytes": self.weight_bytes, "expertBytes": self.expert_bytes, "numExperts": self.num_experts,
            "expertsPerToken": self.experts_per_token, "activeParams": self.active_params,
            "attentionFlopsPerContextToken": self.attention_flops_per_context_token,
            "kvBytesPerContextToken": self.kv_bytes_per_context_token, "hiddenSize": self.hidden_size,
            "numLayers": self.num_layers, "fp8": self.fp8,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelCompute":
        """Back from status.plan.compute; a KeyError/TypeError names a plan from before this block."""
        return cls(int(data["weightBytes"]), int(data["expertBytes"]), int(data["numExperts"]), int(data["expertsPerToken"]),
                   int(data["activeParams"]), int(data["attentionFlopsPerContextToken"]), int(data["kvBytesPerContextToken"]),
                   int(data["hiddenSize"]), int(data["numLayers"]), bool(data["fp8"]))


@dataclass(frozen=True)
class LayoutCompute:
    gpu_product: str | None
    tensor_parallel_size: int
    max_num_seqs: int
    target: ModelCompute
    draft: ModelCompute | None  # None: the method drafts by lookup, or from the target's own layers

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpuProduct": self.gpu_product, "tensorParallelSize": self.tensor_parallel_size,
            "maxNumSeqs": self.max_num_seqs, "target": self.target.to_dict(),
            "draft": self.draft.to_dict() if self.draft else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LayoutCompute":
        draft = data.get("draft")
        return cls(data.get("gpuProduct"), int(data["tensorParallelSize"]), int(data["maxNumSeqs"]),
                   ModelCompute.from_dict(data["target"]), ModelCompute.from_dict(draft) if draft else None)


def model_compute(model: Geometry, weight_bytes: int, tp: int, kv_cache_dtype: str) -> ModelCompute:
    """`weight_bytes`: the model's whole checkpoint as the plan sized it (index or estimate)."""
    plain, routed = estimate_parameters(model)
    expert_share = routed / max(1, plain + routed)
    lookup = 0 if model.tie_word_embeddings else model.vocab_size * model.hidden_size  # the input embedding: no matmul
    active = plain - lookup + (routed * model.num_experts_per_token // model.num_experts if model.num_experts else 0)
    # A draft that shares the target's embeddings holds fewer weights than its config says.
    active = int(active * min(1.0, weight_bytes / max(1, estimate_weight_bytes(model))))
    if model.uses_mla:
        score_width = (model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)
    else:
        score_width = model.head_size
    heads = max(1, model.num_attention_heads // tp)
    caches = model_layer_caches(model, tp, 1, kv_cache_dtype)
    return ModelCompute(
        weight_bytes=weight_bytes // tp,
        expert_bytes=int(weight_bytes * expert_share) // tp,
        num_experts=model.num_experts,
        experts_per_token=model.num_experts_per_token,
        active_params=active // tp,
        attention_flops_per_context_token=4 * heads * score_width * model.num_kv_cache_layers,
        kv_bytes_per_context_token=attention_bytes_per_token(caches),
        hidden_size=model.hidden_size,
        num_layers=model.num_layers,
        fp8=bool(model.weight_bits and model.weight_bits <= 8) or model.served_dtype_bytes == 1,
    )


def layout_compute(method: Method, target: Geometry, draft: Geometry | None, weights: tuple[int, int], tp: int,
                   draft_tp: int | None, kv_cache_dtype: str, product: GpuProduct | None, max_seqs: int) -> LayoutCompute:
    """The layout's compute block. `weights`: (target, draft) checkpoint bytes as the plan sized them."""
    target_bytes, draft_bytes = weights
    target_compute = model_compute(target, target_bytes, tp, kv_cache_dtype)
    if draft is None or method.drafting == "lookup":
        draft_compute = None
    elif method.target_mtp_layers:  # about one decoder layer a pass
        draft_compute = _one_layer(target_compute)
    else:
        draft_compute = model_compute(draft, draft_bytes, draft_tp or tp, kv_cache_dtype)
    return LayoutCompute(product.key if product else None, tp, max_seqs, target_compute, draft_compute)


def _one_layer(model: ModelCompute) -> ModelCompute:
    layers = max(1, model.num_layers)
    return ModelCompute(model.weight_bytes // layers, model.expert_bytes // layers, model.num_experts, model.experts_per_token,
                        model.active_params // layers, model.attention_flops_per_context_token // layers,
                        model.kv_bytes_per_context_token // layers, model.hidden_size, 1, model.fp8)
