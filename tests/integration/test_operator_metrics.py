"""The per-CR gauges in the running operator: whatever writes a CR's status (here the test, as
the telemetry writes status.speculation), the operator's /metrics shows it under the CR's
namespace and name, and the series go when the CR is deleted."""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specdeploy.controller.process.metrics import METRICS

from .conftest import NS, SD_PATH, Cluster, Operator, created, eventually, example

LLAMA = example("llama-3.1-8b-eagle3.yaml")


def gauge(metric: str, name: str) -> float | None:
    text = generate_latest(METRICS.registry).decode()
    return next((s.value for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == metric and s.labels.get("namespace") == NS and s.labels.get("name") == name), None)


async def test_status_written_by_anyone_shows_in_the_gauges_and_goes_with_the_cr(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, LLAMA, "uid-gauges")
    k = await eventually(lambda: gauge("specdeploy_speculation_num_speculative_tokens", name), what="k from the plan")
    assert k == cluster.sd(name)["status"]["plan"]["numSpeculativeTokens"]
    speculation: dict[str, Any] = {"drafts": 300, "draftTokens": 900, "acceptedTokens": 90, "acceptanceRate": 0.1,
                                   "meanAcceptanceLength": 1.3, "window": "600s", "observedAt": "2026-12-06T10:00:00Z",
                                   "predictedSpeedup": 0.9, "crossoverBatchSize": 8,
                                   "observedLoad": {"samples": 10, "typicalBatchSize": 32.0, "p90BatchSize": 40.0, "maxBatchSize": 48.0,
                                                    "predictedSpeedup": 0.7}}
    response = await cluster.k.patch(f"{SD_PATH}/{name}/status", json={"status": {"speculation": speculation}})
    assert response.status == 200, await response.text()
    await eventually(lambda: gauge("specdeploy_speculation_acceptance_rate", name) == 0.1, what="the acceptance gauge")
    assert gauge("specdeploy_speculation_speedup_at_load", name) == 0.7
    assert gauge("specdeploy_speculation_observed_batch_size", name) == 32.0
    assert gauge("specdeploy_speculation_drafts_per_second", name) == 0.5
    response = await cluster.k.delete(f"{SD_PATH}/{name}")
    assert response.status in (200, 202), await response.text()
    await eventually(lambda: gauge("specdeploy_speculation_num_speculative_tokens", name) is None, what="the series gone")
