"""The observed load (vLLM's running-requests gauge over the window) and what the telemetry
makes of it: the verdict at that load and auto k's pick for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.pipeline import ModelInputs, evaluate
from specdeploy.telemetry import Counters, analyse
from specdeploy.telemetry.auto_k import decide_k
from specdeploy.telemetry.cost import CostModelError
from specdeploy.api.conditions import Reason
from specdeploy.telemetry.load import ObservedLoad, analyse_load, verdict_at_load
from specdeploy.telemetry.metrics import parse_sample
from specdeploy.telemetry.window import LoadWindow
from tests.conftest import load_config

NGRAM = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "vllm-0.32.0-ngram-k3.txt"
STRONG = Counters(2000, 6000, 1800 + 1620 + 1458, (1800, 1620, 1458))  # .9, .81, .729


def llama_plan(product: str | None = "H100-80GB") -> dict:
    gpu = {"product": product} if product else {}
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "org/llama"}, "draft": {"method": "eagle3", "model": "org/eagle3", "numSpeculativeTokens": 3},
        "resources": {"gpu": gpu}})
    evaluation = evaluate(spec, ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")),
                          ModelInputs(load_config("specforge__llama3-8B-eagle3")))
    return evaluation.plan_dict()


def test_the_running_gauge_is_read_per_engine_beside_the_counters() -> None:
    sample = parse_sample(NGRAM.read_text())
    assert sample.running == (0.0,) and sample.counters.drafts == 120


def test_the_load_window_keeps_busy_readings_of_the_last_n_seconds() -> None:
    window = LoadWindow(60)
    window.observe(0, (5.0, 0.0))
    window.observe(30, (7.0,))
    window.observe(90, (9.0, 11.0))
    assert window.batch_sizes(90) == [7.0, 9.0, 11.0]  # the reading at 0 s left the window, idle zeros never count


def test_observed_load_has_the_median_and_power_of_two_buckets() -> None:
    load = ObservedLoad.of([1, 3, 3, 4, 100])
    assert load is not None and load.typical == 3 and load.largest == 100
    assert load.distribution == ((1, 0.2), (4, 0.6), (128, 0.2))
    assert ObservedLoad.of([]) is None


def test_past_the_crossover_an_effective_draft_is_judged_no_speedup_at_load() -> None:
    analysis = analyse(STRONG, method="eagle3", cost=0.04, k=3)
    assert analysis.verdict.status == "True"
    light = analyse_load(analysis, llama_plan(), [4, 4, 8])
    assert verdict_at_load(analysis, light) == analysis.verdict
    heavy = analyse_load(analysis, llama_plan(), [700, 700, 650])
    assert heavy.crossover is not None and heavy.crossover < 650
    verdict = verdict_at_load(analysis, heavy)
    assert verdict.status == "False" and verdict.reason == Reason.NO_SPEEDUP_AT_LOAD
    loss = 1 - heavy.work.speedup(700, 3)
    assert f"{loss:.0%} of the throughput" in verdict.message


def test_auto_k_optimises_for_the_typical_batch_not_batch_1() -> None:
    analysis = analyse(STRONG, method="eagle3", cost=0.04, k=3)
    assert analysis.recommended is not None and analysis.recommended.k == 5  # the batch-1 model
    mid = analyse_load(analysis, llama_plan(), [200] * 5)
    change = decide_k(analysis, current_k=3, last_change_s=None, now_s=0, load=mid)
    assert change is not None and change.k == mid.k_at(200) < 3
    idle = analyse_load(analysis, llama_plan(), [1])
    change = decide_k(analysis, current_k=3, last_change_s=None, now_s=0, load=idle)
    assert change is not None and change.k == idle.k_at(1) > 3


def test_a_plan_without_a_gpu_product_cannot_be_timed_and_says_what_to_set() -> None:
    analysis = analyse(STRONG, method="eagle3", cost=0.04, k=3)
    with pytest.raises(CostModelError, match="spec.resources.gpu.product"):
        analyse_load(analysis, llama_plan(None), [4])


def test_the_context_is_the_finished_requests_mean_prompt_plus_half_their_generation() -> None:
    counters = parse_sample(NGRAM.read_text()).counters
    assert counters.requests == 12 and counters.mean_context == pytest.approx((696 + 576 / 2) / 12)
    load = analyse_load(analyse(counters, method="ngram", cost=0.0), llama_plan(), [])
    assert load.work.context == pytest.approx(counters.mean_context)
    assert "mean of the finished requests" in load.source
    assert "assumed" in analyse_load(analyse(STRONG, method="eagle3", cost=0.04), llama_plan(), []).source


def test_a_plan_written_before_the_compute_block_says_the_next_reconcile_writes_it() -> None:
    plan = {k: v for k, v in llama_plan().items() if k != "compute"}
    with pytest.raises(CostModelError, match="no compute block yet"):
        analyse_load(analyse(STRONG, method="eagle3", cost=0.04, k=3), plan, [4])


def test_absurd_gauges_and_max_num_seqs_still_fit_the_status_schema() -> None:
    from specdeploy.api.status import SpeculationStatus
    from specdeploy.telemetry.cost import batch_grid
    from specdeploy.telemetry.report import load_summary

    assert len(batch_grid(10**12)) == 21
    analysis = analyse(STRONG, method="eagle3", cost=0.04, k=3)
    load = analyse_load(analysis, llama_plan(), [1e300, 3])
    SpeculationStatus.model_validate({"drafts": 1, "draftTokens": 1, "acceptedTokens": 1, "window": "60s",
                                      "observedAt": "2026-01-01T00:00:00Z", **load_summary(load, 3)})
