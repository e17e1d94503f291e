"""The batch vLLM schedules on a GPU: `max_num_batched_tokens`, which sets the tokens in flight
that sliding-window, chunked-local and state layers keep memory for (memory.in_flight_tokens),
and `max_num_seqs`, which the cost model's batch grid runs to.

Restates engine/arg_utils.py `EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`
(unchanged from 0.32 to 0.34): a user's --max-num-batched-tokens / --max-num-seqs win; else the
release's default for the GPU (`get_batch_defaults`, as data: VllmFacts.batch_defaults), doubled
under --performance-mode throughput, raised to max_model_len when chunked prefill is off, and
capped at max_num_seqs x max_model_len; an unset max_num_seqs is capped at the batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from specdeploy.planning.gpus import GpuProduct
from specdeploy.vllm import VllmFacts
from specdeploy.vllm.server_args import flag_value, positive_int

TOKENS_FLAG = "--max-num-batched-tokens"
SEQS_FLAG = "--max-num-seqs"


@dataclass(frozen=True)
class BatchLimits:
    """The scheduler's limits the plan assumed, and where they came from (in words)."""

    max_num_batched_tokens: int
    max_num_seqs: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"maxNumBatchedTokens": self.max_num_batched_tokens, "maxNumSeqs": self.max_num_seqs,
                "source": self.source}


def gpu_names(product: GpuProduct | None) -> tuple[str, ...]:
    """The names vLLM may read as the device name (`get_device_name`): the catalog key and the
    driver's names as the node labeller spells them; none without a product."""
    return (product.key, *product.node_products) if product is not None else ()


def batch_limits(extra_args: Sequence[str], facts: VllmFacts, gpu_memory_gib: float | None,
                 product: GpuProduct | None, max_model_len: int) -> BatchLimits:
    """What `vllm serve` of this release sets on this GPU for these extra args."""
    default = facts.batch_defaults(gpu_memory_gib or 0, gpu_names(product))
    user_tokens = positive_int(flag_value(extra_args, TOKENS_FLAG, facts))
    user_seqs = positive_int(flag_value(extra_args, SEQS_FLAG, facts))
    tokens = user_tokens or default.max_num_batched_tokens
    seqs = user_seqs or default.max_num_seqs
    adjusted: list[str] = []
    if flag_value(extra_args, "--performance-mode", facts) == "throughput":
        tokens, seqs = tokens * (1 if user_tokens else 2), seqs * (1 if user_seqs else 2)
        adjusted += [] if user_tokens else ["doubled by --performance-mode throughput"]
    if user_tokens is None and max_model_len:
        if flag_value(extra_args, "--enable-chunked-prefill", facts) is False and max_model_len > tokens:
            tokens, adjusted = max_model_len, adjusted + ["raised to maxModelLen: chunked prefill is off"]
        if seqs * max_model_len < tokens:
            tokens, adjusted = seqs * max_model_len, adjusted + ["capped at max_num_seqs x maxModelLen"]
    if user_seqs is None:
        seqs = min(seqs, tokens)
    return BatchLimits(tokens, seqs, _source(facts, default.tier, gpu_memory_gib, product, user_tokens, adjusted))


def _source(facts: VllmFacts, tier: str, gpu_memory_gib: float | None, product: GpuProduct | None,
            user_tokens: int | None, adjusted: list[str]) -> str:
    """Where max_num_batched_tokens came from, for the plan."""
    if user_tokens is not None:
        return f"{TOKENS_FLAG} {user_tokens} in spec.vllm.extraArgs"
    if product is not None:
        gpu = product.key
    elif gpu_memory_gib:
        gpu = f"a GPU of {gpu_memory_gib:g} GiB (no product named: memory alone decides)"
    else:
        gpu = "an unknown GPU (no product or memoryGiB)"
    return "; ".join([f"vLLM {facts.version}'s default for {gpu}: {tier} (engine/arg_utils.py get_batch_defaults)",
                      *adjusted])
