"""The speculation cost model (telemetry/cost.py): step times against hand-computed cases, and
the goodput-by-batch-size rules on real layouts the planner makes: k never rises as the batch
grows, every case has a crossover, and no crossover contradicts the roofline."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.pipeline import ModelInputs, evaluate
from specdeploy.planning.compute import LayoutCompute, ModelCompute
from specdeploy.planning.gpus import lookup_gpu
from specdeploy.telemetry.cost import (COMPUTE_EFFICIENCY, HBM_EFFICIENCY, CostModelError, Hardware, Workload,
                                       advise_by_batch, all_reduce_s, batch_grid, bytes_read, crossover_batch_size,
                                       experts_touched, prior_acceptance, step_time)
from specdeploy.telemetry.model import geometric_acceptance
from tests.conftest import load_config

HW = Hardware(hbm_bytes_s=1e12, bf16_flops=1e14, fp8_flops=2e14, interconnect_bytes_s=1e11, step_overhead_s=1e-4,
              draft_pass_overhead_s=1e-5, routing_overlap=0.0, token_overhead_s=0.0)
DENSE = ModelCompute(weight_bytes=10**9, expert_bytes=0, num_experts=0, experts_per_token=0, active_params=5 * 10**8,
                     attention_flops_per_context_token=100, kv_bytes_per_context_token=1000, hidden_size=1000,
                     num_layers=10, fp8=False)
MOE = replace(DENSE, expert_bytes=8 * 10**8, num_experts=8, experts_per_token=2)


def test_a_small_pass_is_bound_by_reading_the_weights_and_the_kv() -> None:
    # bytes = 1e9 weights + 1 seq x 100 ctx x 1000 B; FLOPs = 1 x (2 x 5e8 + 100 x 100) = 1.00001e9 -> 1e-5 s
    assert step_time(DENSE, HW, tokens=1, sequences=1, context=100, tp=1) == pytest.approx((1e9 + 1e5) / 1e12 + 1e-4)


def test_a_large_pass_is_bound_by_flops_and_fp8_weights_use_the_fp8_peak() -> None:
    flops = 1000 * (2 * 5e8 + 100 * 100)  # 1.00001e12: 1e-2 s at 1e14, above 1e-3 s of bytes
    assert step_time(DENSE, HW, tokens=1000, sequences=1, context=100, tp=1) == pytest.approx(flops / 1e14 + 1e-4)
    assert step_time(replace(DENSE, fp8=True), HW, tokens=1000, sequences=1, context=100, tp=1) == pytest.approx(flops / 2e14 + 1e-4)


def test_moe_reads_only_the_experts_its_tokens_touch() -> None:
    assert experts_touched(8, 2, 1) == pytest.approx(2.0)
    assert experts_touched(8, 2, 2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert experts_touched(8, 2, 1000) == pytest.approx(8.0)
    # one token: 2e8 shared bytes + 2/8 of 8e8 expert bytes
    assert bytes_read(MOE, 1, 0, 0) == pytest.approx(2e8 + 2e8)
    assert bytes_read(MOE, 1000, 0, 0) == pytest.approx(1e9)


def test_tensor_parallel_adds_two_ring_all_reduces_per_layer() -> None:
    # 2 layers-worth x 10 layers x 2(tp-1)/tp = 1 x (4 tokens x 1000 hidden x 2 B) / 1e11 B/s
    assert all_reduce_s(DENSE, 4, 2, HW) == pytest.approx(2 * 10 * 1.0 * 8000 / 1e11)
    assert all_reduce_s(DENSE, 4, 1, HW) == 0.0


def test_datasheet_figures_are_scaled_to_what_kernels_reach() -> None:
    hw = Hardware.from_product(lookup_gpu("H100-80GB"))
    assert hw.hbm_bytes_s == pytest.approx(3350e9 * HBM_EFFICIENCY)
    assert hw.bf16_flops == pytest.approx(989e12 * COMPUTE_EFFICIENCY)
    with pytest.raises(CostModelError, match="A10G-24GB"):
        Hardware.from_product(lookup_gpu("A10G-24GB"))


def test_goodput_by_hand_for_a_lookup_drafter() -> None:
    layout = LayoutCompute("x", 1, 8, DENSE, None)
    work = Workload(layout, HW, "ngram", (0.5, 0.25), context=0)
    t1, t2 = (1e9 / 1e12 + 1e-4), (1e9 / 1e12 + 1e-4)  # 1 and 2 tokens: both weight-bound
    assert work.tokens_per_s(1, 0) == pytest.approx(1 / t1)
    assert work.tokens_per_s(1, 1) == pytest.approx(1.5 / t2)
    assert work.speedup(1, 1) == pytest.approx(1.5)


def test_the_batch_grid_doubles_up_to_max_num_seqs() -> None:
    assert batch_grid(100) == [1, 2, 4, 8, 16, 32, 64]


# ---- real layouts ----------------------------------------------------------------------------

PAIRS = {  # target, eagle3 draft, draft_model draft
    "dense-8b": ("meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3", "meta-llama__Llama-3.2-1B-Instruct"),
    "dense-32b": ("Qwen__Qwen3-32B", "specforge__qwen3-32b-eagle3", "Qwen__Qwen3-0.6B"),
    "moe-235b": ("Qwen__Qwen3-235B-A22B", None, "Qwen__Qwen3-0.6B"),
    "moe-gpt-oss": ("openai__gpt-oss-120b", "specforge__gpt-oss-120B-eagle3", None),
}
GPUS = ("H100-80GB", "H200-141GB", "B200-180GB")


def planned_layout(target: str, draft: str | None, method: str, gpu: str) -> LayoutCompute:
    block: dict[str, Any] = {"method": method, "numSpeculativeTokens": 3}
    if draft:
        block["model"] = f"org/{draft}"
    spec = SpeculativeDeploymentSpec.model_validate({"target": {"model": f"org/{target}"}, "draft": block,
                                                      "resources": {"gpu": {"product": gpu}}})
    evaluation = evaluate(spec, ModelInputs(load_config(target)), ModelInputs(load_config(draft)) if draft else None)
    assert evaluation.plan is not None, [f.message for f in evaluation.findings]
    assert evaluation.plan.compute is not None
    return evaluation.plan.compute


def cases() -> list[tuple[str, str, str]]:
    out = []
    for name, (_, eagle3, small) in PAIRS.items():
        for method, draft in (("eagle3", eagle3), ("draft_model", small), ("ngram", None)):
            if method == "ngram" or draft:
                out += [(name, method, gpu) for gpu in GPUS]
    return out


_LAYOUTS: dict[tuple[str, str, str], LayoutCompute] = {}


def layout_for(name: str, method: str, gpu: str) -> LayoutCompute:
    key = (name, method, gpu)
    if key not in _LAYOUTS:
        target, eagle3, small = PAIRS[name]
        draft = {"eagle3": eagle3, "draft_model": small, "ngram": None}[method]
        _LAYOUTS[key] = planned_layout(target, draft, method, gpu)
    return _LAYOUTS[key]


def assert_consistent(work: Workload, *, crossover_required: bool = True) -> None:
    """k never rises with the batch; below the crossover some k pays, from it none; and the
    roofline agrees: speculation with a free drafter stops paying only where verifying two
    tokens per sequence costs more than one, and never stops only where the step stays bound
    by reading the KV cache (the same bytes for 1 or k+1 query tokens)."""
    grid = batch_grid(1 << 14)
    advice = advise_by_batch(work, grid)
    ks = [a.k for a in advice]
    assert ks == sorted(ks, reverse=True), ks
    crossover = crossover_batch_size(work)
    if crossover is None:
        assert not crossover_required
        big = 1 << 20
        kv = big * work.context * work.layout.target.kv_bytes_per_context_token
        assert kv > work.layout.target.weight_bytes
        assert work.target_time(big, 2 * big) < 1.5 * work.target_time(big, big)
        return
    assert all((a.k == 0) == (a.batch_size >= crossover) for a in advice), (crossover, ks)
    assert advise_by_batch(work, [b for b in grid if b < crossover] + [crossover])[-1].k == 0
    if crossover > 1:
        assert advise_by_batch(work, [b for b in grid if b < crossover - 1] + [crossover - 1])[-1].k > 0
    if work.draft_time(crossover, 1) == 0:
        assert work.target_time(crossover, 2 * crossover) > work.target_time(crossover, crossover)


@pytest.mark.parametrize("name,method,gpu", cases())
@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.9])
def test_held_out_layouts_k_falls_with_batch_and_every_case_has_a_crossover(name: str, method: str, gpu: str, alpha: float) -> None:
    layout = layout_for(name, method, gpu)
    work = Workload(layout, Hardware.from_product(lookup_gpu(gpu)), method, tuple(geometric_acceptance(alpha, 8)))
    assert_consistent(work)
    if not layout.target.num_experts:  # a dense single sequence is weight-bound: speculation pays
        assert advise_by_batch(work, [1])[0].k > 0


def test_a_dense_8b_on_one_h100_with_strong_acceptance_speculates_at_batch_1_and_not_at_256() -> None:
    layout = layout_for("dense-8b", "eagle3", "H100-80GB")
    assert layout.tensor_parallel_size == 1
    work = Workload(layout, Hardware.from_product(lookup_gpu("H100-80GB")), "eagle3", tuple(geometric_acceptance(0.8, 8)))
    by_batch = {a.batch_size: a for a in advise_by_batch(work, batch_grid(1024))}
    assert by_batch[1].k >= 3 and by_batch[1].speedup > 1.8  # calibrated terms: 1.98 (bench/data/load_model_fit.json)
    assert by_batch[256].k == 0
    assert work.speedup(256, 3) < 1  # k=3 there costs throughput


def test_a_moe_target_reads_more_experts_as_the_batch_grows_so_its_crossover_comes_later_than_flops_alone_say() -> None:
    layout = layout_for("moe-235b", "ngram", "H200-141GB")
    assert layout.target.num_experts == 128 and layout.target.expert_bytes > 0.9 * layout.target.weight_bytes
    hw = Hardware.from_product(lookup_gpu("H200-141GB"))
    one, batch = bytes_read(layout.target, 1, 1, 0), bytes_read(layout.target, 64, 64, 0)
    assert batch > 5 * one  # 8 of 128 experts per token: 64 tokens touch nearly all
    assert_consistent(Workload(layout, hw, "ngram", tuple(geometric_acceptance(0.6, 8))))


@pytest.mark.parametrize("seed", range(40))
def test_property_random_layouts_and_acceptance_keep_every_rule(seed: int) -> None:
    rng = random.Random(seed)
    experts = rng.choice([0, 8, 64, 256])
    target = ModelCompute(
        weight_bytes=int(rng.uniform(1e9, 2e11)), expert_bytes=0, num_experts=experts,
        experts_per_token=rng.choice([1, 2, 8]) if experts else 0, active_params=0,
        attention_flops_per_context_token=rng.randrange(10**4, 10**6), kv_bytes_per_context_token=rng.randrange(10**3, 4 * 10**5),
        hidden_size=rng.choice([2048, 4096, 8192]), num_layers=rng.randrange(16, 96), fp8=rng.random() < 0.3)
    share = rng.uniform(0.5, 0.97) if experts else 0.0
    active = target.weight_bytes / (1 if target.fp8 else 2) * (1 - share + share * target.experts_per_token / max(1, experts))
    target = replace(target, expert_bytes=int(target.weight_bytes * share), active_params=int(active))
    method = rng.choice(["eagle3", "draft_model", "ngram", "dflash"])
    draft = None if method == "ngram" else replace(target, weight_bytes=target.weight_bytes // 50, expert_bytes=0, num_experts=0,
                                                   experts_per_token=0, active_params=target.active_params // 50, num_layers=1)
    gpu = rng.choice(GPUS + ("MI300X-192GB", "H20-96GB"))
    layout = LayoutCompute(gpu, rng.choice([1, 2, 4, 8]), 1024, target, draft)
    first = rng.uniform(0.3, 0.95)
    acceptance = tuple(first * rng.uniform(0.6, 1.0) ** i for i in range(rng.randrange(1, 9)))
    acceptance = tuple(min(acceptance[: i + 1]) for i in range(len(acceptance)))  # a_i never rises with i
    assert_consistent(Workload(layout, Hardware.from_product(lookup_gpu(gpu)), method, acceptance, context=rng.choice([64, 512, 4096])),
                      crossover_required=False)


def test_the_prior_is_geometric_and_follows_how_the_method_drafts() -> None:
    assert prior_acceptance("eagle3", 2) == pytest.approx((0.7, 0.49))  # a head on the target's hidden states
    assert prior_acceptance("mtp", 1) == pytest.approx((0.8,))  # the target's own MTP layers
    assert prior_acceptance("ngram", 1) == pytest.approx((0.4,))  # a lookup
    assert prior_acceptance("draft_model", 1) == prior_acceptance("unknown-method", 1) == pytest.approx((0.6,))


def test_the_schedule_is_vllms_inclusive_ranges_from_batch_1_to_max_num_seqs() -> None:
    from specdeploy.telemetry.cost import BatchAdvice, batch_schedule

    by_batch = [BatchAdvice(1, 5, 3.0), BatchAdvice(2, 5, 3.0), BatchAdvice(4, 3, 2.0), BatchAdvice(8, 0, 1.0)]
    assert batch_schedule(by_batch, 10) == [(1, 2, 5), (3, 4, 3), (5, 10, 0)]
