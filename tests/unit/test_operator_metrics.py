"""The operator's per-CR gauges (controller/process/metrics.py): what a Prometheus scrape of /metrics
shows for a CR's status.speculation, plan and preflight, one series per CR and gauge, gone with
the CR, and no more series for a busier CR (bounded cardinality)."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specdeploy.controller.process.metrics import Metrics

STATUS: dict[str, Any] = {
    "conditions": [{"type": "Ready", "status": "True"}],
    "plan": {"numSpeculativeTokens": 3},
    "preflight": {"outcome": "Passed"},
    "speculation": {
        "drafts": 1200, "draftTokens": 3600, "acceptedTokens": 1800, "acceptanceRate": 0.5, "meanAcceptanceLength": 2.5,
        "perPositionAcceptance": [0.75, 0.5, 0.25], "window": "600s", "observedAt": "2026-12-06T10:00:00Z", "pods": 2,
        "predictedSpeedup": 2.1, "numSpeculativeTokens": 3, "crossoverBatchSize": 64,
        "observedLoad": {"samples": 40, "typicalBatchSize": 12.0, "p90BatchSize": 20.0, "maxBatchSize": 31.0, "predictedSpeedup": 1.4},
    },
}


def scrape(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, keyed by name and sorted labels, as Prometheus reads them."""
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def of(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (metric, labels), value in samples.items() if metric == name}


CR = (("name", "llama"), ("namespace", "team-a"))


def test_a_crs_speculation_plan_and_preflight_are_gauges_labelled_with_its_namespace_and_name() -> None:
    metrics = Metrics()
    metrics.state.observe("team-a", "llama", STATUS)
    samples = scrape(metrics)
    expected = {
        "specdeploy_speculation_acceptance_rate": 0.5,
        "specdeploy_speculation_mean_acceptance_length": 2.5,
        "specdeploy_speculation_drafts_per_second": 2.0,  # 1200 drafts over 600 s
        "specdeploy_speculation_num_speculative_tokens": 3,
        "specdeploy_speculation_predicted_speedup": 2.1,
        "specdeploy_speculation_speedup_at_load": 1.4,
        "specdeploy_speculation_crossover_batch_size": 64,
        "specdeploy_speculation_observed_batch_size": 12.0,
        "specdeploy_speculation_observed_timestamp_seconds":
            datetime.datetime(2026, 12, 6, 10, tzinfo=datetime.timezone.utc).timestamp(),
    }
    for name, value in expected.items():
        assert of(samples, name) == {CR: value}, name
    assert of(samples, "specdeploy_preflight_outcome") == {(*CR[:1], CR[1], ("outcome", "Passed")): 1.0}
    assert of(samples, "specdeploy_resources")[(("ready", "True"),)] == 1


def test_before_any_telemetry_k_comes_from_the_plan_and_nothing_else_is_made_up() -> None:
    metrics = Metrics()
    metrics.state.observe("team-a", "llama", {"plan": {"numSpeculativeTokens": 4}})
    samples = scrape(metrics)
    assert of(samples, "specdeploy_speculation_num_speculative_tokens") == {CR: 4}
    assert of(samples, "specdeploy_speculation_acceptance_rate") == {}
    assert of(samples, "specdeploy_preflight_outcome") == {}


def test_values_that_are_not_numbers_give_no_series() -> None:
    metrics = Metrics()
    broken = copy.deepcopy(STATUS)
    broken["speculation"].update(acceptanceRate=True, window="ten minutes", observedAt="yesterday", crossoverBatchSize=None)
    metrics.state.observe("team-a", "llama", broken)
    samples = scrape(metrics)
    for name in ("acceptance_rate", "drafts_per_second", "observed_timestamp_seconds", "crossover_batch_size"):
        assert of(samples, f"specdeploy_speculation_{name}") == {}, name
    assert of(samples, "specdeploy_speculation_mean_acceptance_length") == {CR: 2.5}


def test_one_preflight_series_per_cr_follows_the_outcome() -> None:
    metrics = Metrics()
    metrics.state.observe("team-a", "llama", STATUS)
    metrics.state.observe("team-a", "llama", {**STATUS, "preflight": {"outcome": "Refused"}})
    assert of(scrape(metrics), "specdeploy_preflight_outcome") == {(CR[0], CR[1], ("outcome", "Refused")): 1.0}


def test_series_are_one_per_cr_and_gauge_and_go_with_the_cr() -> None:
    """Cardinality: a busier CR (more pods, more positions, more skipped pods) adds no series;
    the count is CRs x gauges, and a deleted CR's series are gone at the next scrape."""
    metrics = Metrics()
    busy = copy.deepcopy(STATUS)
    busy["speculation"].update(pods=64, perPositionAcceptance=[0.9] * 16, skippedPods=[{"pod": f"p{i}", "reason": "x"} for i in range(64)])
    for index in range(50):
        metrics.state.observe(f"ns-{index % 5}", f"cr-{index}", busy if index % 2 else STATUS)
    per_cr = [k for k in scrape(metrics) if ("name", "cr-7") in k[1]]
    assert len(per_cr) == 10  # nine gauges and the preflight outcome
    assert len([k for k in scrape(metrics) if any(label == "name" for label, _ in k[1])]) == 50 * 10
    metrics.state.forget("ns-2", "cr-7")
    assert not [k for k in scrape(metrics) if ("name", "cr-7") in k[1]]


def test_a_canarys_figures_carry_the_arm_label_and_its_phase_one_series() -> None:
    metrics = Metrics()
    rollout = {"phase": "Canary", "draft": "abc",
               "stable": {"drafts": 900, "acceptanceRate": 0.8, "meanAcceptedLength": 3.4, "speedup": 2.6, "serverErrors": 0},
               "canary": {"drafts": 120, "acceptanceRate": 0.01, "meanAcceptedLength": 1.03, "speedup": 0.8, "serverErrors": 2,
                          "outputTokensPerSecondPerRequest": 41.5}}
    metrics.state.observe("team-a", "llama", {**STATUS, "rollout": rollout})
    samples = scrape(metrics)
    canary, stable = (("arm", "canary"), *CR), (("arm", "stable"), *CR)  # labels sorted by name
    rate = of(samples, "specdeploy_rollout_acceptance_rate")
    assert rate == {canary: 0.01, stable: 0.8}
    assert of(samples, "specdeploy_rollout_server_errors")[canary] == 2
    assert of(samples, "specdeploy_rollout_output_tokens_per_second_per_request") == {canary: 41.5}
    assert of(samples, "specdeploy_rollout_phase") == {(*CR, ("phase", "Canary")): 1.0}
    metrics.state.observe("team-a", "llama", {**STATUS, "rollout": {"phase": "Sideways", "stable": "junk"}})
    samples = scrape(metrics)
    assert of(samples, "specdeploy_rollout_phase") == {} and of(samples, "specdeploy_rollout_drafts") == {}
