"""The telemetry loop in the running operator, over real HTTP on both sides: kmock serves the
API (the SpeculativeDeployment, its Deployment, a serving Pod whose IP and port point at a
local server), and that server exposes vLLM's spec-decode counters the way vLLM does (through
prometheus_client, same names and labels). Only the counter values are ours, so that the test
can move them or hold them still."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any, Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from specdeploy.render.labels import labels
from tests.conftest import load_config
from tests.integration.fake_hub import FakeHub
from tests.metrics_server import serve_metrics

from .conftest import DEPLOYMENT, NS, SD_PATH, Cluster, Operator, created, eventually

INTERVAL_S = 0.2
POD_RESOURCE = "v1/pods"


class FakeVllmMetrics:
    """vLLM's SpecDecodingProm counters (vllm/v1/spec_decode/metrics.py) for one engine."""

    def __init__(self, k: int):
        self.requests = 0
        self.started = 1_796_000_000.0
        self.restart(k)

    def restart(self, k: int, *, same_process: bool = False) -> None:
        """A new server process (a rollout): counters from zero, one series per position of k, and
        a later process_start_time_seconds (prometheus_client's process collector, which vLLM's
        API server exports). `same_process`: the counters go back to zero in the same process,
        which no real counter does."""
        self.registry = CollectorRegistry()
        if not same_process:
            self.started += 60.0
        Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
              registry=self.registry).set(self.started)
        names = ["model_name", "engine"]
        self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", names, registry=self.registry)
        self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", names, registry=self.registry)
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", names, registry=self.registry)
        per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", names + ["position"], registry=self.registry)
        self.per_pos = [per_pos.labels("m", "0", str(i)) for i in range(k)]
        self.k = k
        for c in (self.drafts, self.draft_tokens, self.accepted):
            c.labels("m", "0")
        # vLLM's running-requests gauge (v1/metrics/loggers.py), registered only when a test sets a load.
        self.running: Gauge | None = None

    def set_running(self, requests: int) -> None:
        if self.running is None:
            self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                                 ["model_name", "engine"], registry=self.registry)
        self.running.labels("m", "0").set(requests)

    def step(self, drafts: int, accepted_lengths: list[int]) -> None:
        """`drafts` drafts of k tokens; accepted_lengths[j] of them had their first j+1 accepted (exclusive counts)."""
        self.drafts.labels("m", "0").inc(drafts)
        self.draft_tokens.labels("m", "0").inc(drafts * self.k)
        for length, count in enumerate(accepted_lengths, start=1):
            self.accepted.labels("m", "0").inc(length * count)
            for pos in range(length):
                self.per_pos[pos].inc(count)

    def body(self) -> bytes:
        """The /metrics text as vLLM's prometheus_client exposes it; counts the scrapes."""
        self.requests += 1
        return generate_latest(self.registry)


@pytest.fixture
def fast_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEPLOY_TELEMETRY_INTERVAL_S", str(INTERVAL_S))


@pytest.fixture
def vllm_metrics() -> Iterator[tuple[FakeVllmMetrics, int]]:
    metrics = FakeVllmMetrics(k=3)
    with serve_metrics(metrics.body) as port:
        yield metrics, port


def _pod(sd_name: str, pod: str, port: int, ready: bool = True, ip: str | None = "127.0.0.1",
         owner_uid: str | None = None) -> dict[str, Any]:
    """A pod with the CR's labels; owned (as the ReplicaSet controller makes it) when owner_uid
    names a ReplicaSet: the scraper reads only owned pods."""
    status: dict[str, Any] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    meta: dict[str, Any] = {"name": pod, "namespace": NS, "labels": labels(sd_name)}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{sd_name}-5d8f", "uid": owner_uid,
                                    "controller": True}]
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": [{"name": "vllm", "image": "vllm", "ports": [{"name": "http", "containerPort": port}]}]},
        "status": status,
    }


async def replica_set(cluster: Cluster, name: str) -> str:
    """The ReplicaSet the Deployment controller would make for the CR's Deployment (kmock runs
    no controllers): its uid is what the pods' ownerReference must name."""
    deployment = cluster.get(DEPLOYMENT, name)
    meta = deployment["metadata"]
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
          "metadata": {"name": f"{meta['name']}-5d8f", "namespace": NS, "labels": labels(name),
                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                            "uid": meta["uid"], "controller": True}]},
          "spec": {"selector": deployment["spec"]["selector"], "template": deployment["spec"]["template"]}}
    response = await cluster.k.post(f"/apis/apps/v1/namespaces/{NS}/replicasets", json=rs)
    assert response.status in (200, 201), await response.text()
    return str((await response.json())["metadata"]["uid"])


async def add_pod(cluster: Cluster, pod: dict[str, Any]) -> None:
    response = await cluster.k.post(f"/api/v1/namespaces/{NS}/pods", json=pod)
    assert response.status in (200, 201), await response.text()


async def _serving(cluster: Cluster, doc: dict[str, Any], uid: str, port: int, bystander: bool = True) -> str:
    name = await created(cluster, doc, uid)
    await cluster.patch_status(DEPLOYMENT, name, {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1})
    owner = await replica_set(cluster, name)
    pods = [_pod(name, f"{name}-0", port, owner_uid=owner), _pod(name, f"{name}-1", port, ready=False, owner_uid=owner)]
    for pod in pods + ([_pod("someone-else", "other-0", 1)] if bystander else []):
        await add_pod(cluster, pod)
    return name


def _speculation(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.sd(name).get("status", {}).get("speculation") or {}


def _status_writes(cluster: Cluster, name: str, since: int) -> int:
    return sum(1 for r in cluster.writes(since) if r.url.path == f"{SD_PATH}/{name}/status")


async def test_status_speculation_equals_the_counters_and_only_moves_with_them(
    fast_telemetry: None, vllm_metrics: tuple[FakeVllmMetrics, int], operator: Operator, cluster: Cluster
) -> None:
    from .test_operator import LLAMA

    metrics, port = vllm_metrics
    metrics.step(drafts=5000, accepted_lengths=[1000, 1000, 1000])  # before the operator looked: not in the window
    name = await _serving(cluster, LLAMA, "uid-tel", port)
    await eventually(lambda: metrics.requests >= 2, what="two scrapes")
    assert "speculation" not in cluster.sd(name).get("status", {})  # counters still: nothing written

    # 400 drafts of k=3: 100 accept none, 100 accept 1, 100 accept 2, 100 accept 3.
    metrics.step(drafts=400, accepted_lengths=[100, 100, 100])
    spec = await eventually(lambda: _speculation(cluster, name).get("drafts") == 400 and _speculation(cluster, name), what="status.speculation")
    # By hand: draft tokens 1200, accepted 100*1 + 100*2 + 100*3 = 600; rate 0.5; length
    # 1 + 600/400 = 2.5; per position 300/400, 200/400, 100/400.
    assert (spec["draftTokens"], spec["acceptedTokens"]) == (1200, 600)
    assert spec["acceptanceRate"] == 0.5
    assert spec["meanAcceptanceLength"] == 2.5
    assert spec["perPositionAcceptance"] == [0.75, 0.5, 0.25]
    assert spec["numSpeculativeTokens"] == 3 and spec["pods"] == 1
    assert spec["skippedPods"] == [{"pod": f"{name}-1", "reason": "not ready"}]
    # The example plans an H100: c = draft/target weights per GPU from status.plan.memory.
    memory = cluster.sd(name)["status"]["plan"]["memory"]
    cost = memory["draftWeightsGiB"] / memory["targetWeightsGiB"]
    assert spec["draftCost"] == round(cost, 4)
    assert spec["predictedSpeedup"] == round(2.5 / (1 + cost * 3), 3)
    effective = cluster.condition(name, "SpeculationEffective")
    assert (effective["status"], effective["reason"]) == ("True", "Effective")
    await eventually(lambda: any(e.get("reason") == "Effective" and e.get("type") == "Normal" for e in cluster.events()), what="a Normal Event")

    # Counters held still: no status write, however many scrapes.
    mark, scrapes = cluster.mark(), metrics.requests
    await eventually(lambda: metrics.requests >= scrapes + 8, what="eight more scrapes")
    assert _status_writes(cluster, name, mark) == 0

    # Counters moving on every scrape: at most one write per interval.
    mark, scrapes = cluster.mark(), metrics.requests
    started = asyncio.get_running_loop().time()
    while metrics.requests < scrapes + 6:
        metrics.step(drafts=10, accepted_lengths=[0, 0, 10])
        await asyncio.sleep(INTERVAL_S / 4)
    elapsed = asyncio.get_running_loop().time() - started
    writes = _status_writes(cluster, name, mark)
    assert 1 <= writes <= metrics.requests - scrapes, (writes, metrics.requests - scrapes)
    assert writes <= elapsed / INTERVAL_S + 1
    # One Event for the transition to Effective, none for the scrapes after it.
    assert len([e for e in cluster.events() if e.get("reason") == "Effective"]) == 1


async def test_counters_that_go_down_in_the_same_process_are_not_counted(
    fast_telemetry: None, vllm_metrics: tuple[FakeVllmMetrics, int], operator: Operator, cluster: Cluster,
    caplog: pytest.LogCaptureFixture
) -> None:
    """A counter only goes down when its process starts again: the pod's process start time says
    whether it did. Before, every fall was a restart and what the pod showed next was counted."""
    from .test_operator import LLAMA

    caplog.set_level(logging.INFO, logger="specdeploy.telemetry")
    metrics, port = vllm_metrics
    name = await _serving(cluster, LLAMA, "uid-fall", port)
    await eventually(lambda: metrics.requests >= 1, what="a first scrape")
    metrics.step(drafts=400, accepted_lengths=[100, 100, 100])
    await eventually(lambda: _speculation(cluster, name).get("drafts") == 400, what="400 drafts counted")
    metrics.restart(k=3, same_process=True)
    metrics.step(drafts=300, accepted_lengths=[100, 100, 100])

    def skips() -> list[str]:
        return [r.getMessage() for r in caplog.records if f"skipped pod {NS}/{name}-0" in r.getMessage()]

    mark = metrics.requests
    await eventually(lambda: metrics.requests >= mark + 3, what="three scrapes of the fallen counters")
    (skip,) = skips()  # logged once, however many scrapes
    assert "went down while process_start_time_seconds did not change: not a restart" in skip
    assert _speculation(cluster, name)["drafts"] == 400
    # A new process (its start time moved on) counts again: what it shows is all new.
    metrics.restart(k=3)
    metrics.step(drafts=100, accepted_lengths=[0, 0, 100])
    speculation = await eventually(lambda: _speculation(cluster, name).get("drafts") == 500 and _speculation(cluster, name),
                                   what="the new process counted")
    assert f"{name}-0" not in {s["pod"] for s in speculation.get("skippedPods") or []}


async def test_collapsed_acceptance_sets_speculation_effective_false_with_a_warning(
    fast_telemetry: None, vllm_metrics: tuple[FakeVllmMetrics, int], operator: Operator, cluster: Cluster
) -> None:
    from .test_operator import LLAMA

    metrics, port = vllm_metrics
    name = await _serving(cluster, LLAMA, "uid-collapse", port)
    await eventually(lambda: metrics.requests >= 1, what="a first scrape")
    # The PR #50170 picture: 1000 drafts of 3 tokens, 12 of them accept one: 12 / 3000 = 0.4 %.
    metrics.step(drafts=1000, accepted_lengths=[12, 0, 0])
    cond = await eventually(lambda: cluster.condition(name, "SpeculationEffective").get("status") == "False"
                            and cluster.condition(name, "SpeculationEffective"), what="SpeculationEffective=False")
    assert cond["reason"] == "AcceptanceCollapsed"
    assert "acceptance 0.4%" in cond["message"] and "eagle_aux_hidden_state_layer_ids" in cond["message"]
    def warnings() -> list[dict[str, Any]]:
        return [e for e in cluster.events() if e.get("type") == "Warning" and e.get("reason") == "AcceptanceCollapsed"]

    (warning,) = await eventually(warnings, what="the Warning Event")
    assert warning["involvedObject"]["name"] == name and "eagle_aux_hidden_state_layer_ids" in warning["message"]
    assert _speculation(cluster, name)["recommendedNumSpeculativeTokens"] == 1
    # The rest of the status is the reconcile's and stays as it was.
    assert cluster.condition(name, "Validated")["status"] == "True"


async def test_a_pod_without_metrics_is_skipped_with_the_reason(
    fast_telemetry: None, vllm_metrics: tuple[FakeVllmMetrics, int], operator: Operator, cluster: Cluster
) -> None:
    from .test_operator import LLAMA

    metrics, port = vllm_metrics
    name = await _serving(cluster, LLAMA, "uid-skip", port)
    # A second ready pod at a port where nothing listens.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    owner = cluster.get(POD_RESOURCE, f"{name}-0")["metadata"]["ownerReferences"][0]["uid"]
    await add_pod(cluster, _pod(name, f"{name}-2", closed_port, owner_uid=owner))
    await eventually(lambda: metrics.requests >= 1, what="a first scrape")
    metrics.step(drafts=200, accepted_lengths=[50, 50, 50])
    spec = await eventually(lambda: _speculation(cluster, name).get("drafts") == 200 and _speculation(cluster, name), what="status.speculation")
    reasons = {s["pod"]: s["reason"] for s in spec["skippedPods"]}
    assert reasons[f"{name}-1"] == "not ready"
    assert "Connection refused" in reasons[f"{name}-2"] or "refused" in reasons[f"{name}-2"].lower()
    assert spec["pods"] == 1


async def test_auto_k_moves_to_the_recommendation_through_a_rollout_and_never_writes_the_spec(
    fast_telemetry: None, vllm_metrics: tuple[FakeVllmMetrics, int], operator: Operator, cluster: Cluster
) -> None:
    import json

    from .test_operator import LLAMA, args_of

    metrics, port = vllm_metrics
    doc = copy.deepcopy(LLAMA)
    doc["spec"]["draft"]["numSpeculativeTokens"] = "auto"
    name = await _serving(cluster, doc, "uid-auto", port)

    def k_rendered() -> int:
        args = args_of(cluster.get(DEPLOYMENT, name))
        return json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"]

    assert k_rendered() == 3  # an EAGLE3 head has no n_predict: auto starts at 3
    spec_before = cluster.sd(name)["spec"]
    await eventually(lambda: metrics.requests >= 1, what="a first scrape")
    # 1000 drafts, conditional acceptance .9 per position: k=5 is predicted >= 5 % faster.
    metrics.step(drafts=1000, accepted_lengths=[90, 81, 729])  # per position 900, 810, 729
    speculation = await eventually(lambda: _speculation(cluster, name).get("numSpeculativeTokens") == 5 and _speculation(cluster, name),
                                   what="k 5 in force")
    assert speculation["numSpeculativeTokensReason"].startswith("auto: k 3 -> 5: predicted speedup")
    assert speculation["numSpeculativeTokensChangedAt"]
    await eventually(lambda: k_rendered() == 5, what="the Deployment rendering k 5")
    assert cluster.sd(name)["spec"] == spec_before  # GitOps stays clean
    await eventually(lambda: cluster.sd(name)["status"]["plan"]["numSpeculativeTokens"] == 5, what="status.plan with k 5")
    await eventually(lambda: any(e.get("reason") == "SpeculativeTokensChanged" for e in cluster.events()), what="a k-change Event")
    # The old pod (k=3) still serves during the rollout: what it counts is not counted for k=5.
    mark = metrics.requests
    metrics.step(drafts=500, accepted_lengths=[0, 0, 500])
    await eventually(lambda: metrics.requests >= mark + 2, what="scrapes of the old pod")
    # The new pod runs k=5; within the hour k does not move again, whatever the counters say
    # (here: every draft accepts exactly one token, so k=1 would be best).
    metrics.restart(k=5)
    mark = metrics.requests
    await eventually(lambda: metrics.requests >= mark + 2, what="a baseline of the new pod")
    metrics.step(drafts=2000, accepted_lengths=[2000, 0, 0, 0, 0])
    speculation = await eventually(lambda: _speculation(cluster, name).get("drafts", 0) >= 2000 and _speculation(cluster, name), what="k=5 counted")
    assert speculation["drafts"] == 2000  # the old pod's 500 are not in the window
    assert speculation["recommendedNumSpeculativeTokens"] == 1
    assert speculation["numSpeculativeTokens"] == 5 and k_rendered() == 5
    assert len([e for e in cluster.events() if e.get("reason") == "SpeculativeTokensChanged"]) == 1  # one change, one Event


async def test_auto_k_that_does_not_plan_goes_back_and_the_workload_stays(
    fast_telemetry: None, vllm_metrics: tuple[FakeVllmMetrics, int], operator: Operator, cluster: Cluster
) -> None:
    """vLLM 0.33's FLy sampler needs k >= 2 and fly_window_size < k: with a window of 2 only
    k >= 3 is valid. Acceptance .3/.01/.001 makes k=1 the best (1.3/1.05 = 1.238 vs k=3
    1.311/1.15 = 1.140, +8.6 %), which vLLM would refuse: k 3 stays, and so does the pod."""
    import json

    from .test_operator import LLAMA, args_of

    metrics, port = vllm_metrics
    doc = copy.deepcopy(LLAMA)
    doc["spec"]["vllmVersion"] = "0.33.0"
    doc["spec"]["draft"].update(numSpeculativeTokens="auto", speculativeConfig={"rejection_sample_method": "fly", "fly_window_size": 2})
    name = await _serving(cluster, doc, "uid-auto-refused", port)
    deployment = cluster.get(DEPLOYMENT, name)
    args = args_of(deployment)
    assert json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"] == 3
    await eventually(lambda: metrics.requests >= 1, what="a first scrape")
    metrics.step(drafts=1000, accepted_lengths=[290, 9, 1])  # per position 300, 10, 1
    speculation = await eventually(lambda: "did not plan" in (_speculation(cluster, name).get("numSpeculativeTokensReason") or "")
                                   and _speculation(cluster, name), what="auto k going back")
    assert speculation["numSpeculativeTokens"] == 3 and speculation["recommendedNumSpeculativeTokens"] == 1
    assert speculation["numSpeculativeTokensReason"] == "auto: k 1 did not plan (see conditions and findings); k 3 stays"
    await eventually(lambda: cluster.condition(name, "Planned").get("status") == "True", what="Planned=True again")
    assert args_of(cluster.get(DEPLOYMENT, name)) == args  # the workload never changed


@pytest.fixture
def stallable_hub(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub() as fake:
        fake.add_json("hub/llama", "config.json", load_config("meta-llama__Llama-3.1-8B-Instruct"))
        fake.serve_as_hub(monkeypatch, tmp_path / "hub-cache")  # a stalled read stays stalled for the test
        monkeypatch.setenv("SPECDEPLOY_RECONCILE_BUDGET_S", str(BUDGET_S))
        yield fake
        fake.release.set()


# Only the stalled read may run past it: an honest reconcile on a busy 2-core machine takes
# seconds, and one cut off at every try would never finish.
BUDGET_S = 15.0


def _timeouts_counted() -> float:
    """Reconciles this process cut off at the budget (the operator runs in it)."""
    from specdeploy.controller.process.metrics import METRICS

    return sum(sample.value for metric in METRICS.reconciles.collect() for sample in metric.samples
               if sample.name.endswith("_total") and sample.labels.get("result") == "timeout")


async def test_an_auto_k_rollout_that_stalls_is_cut_off_at_the_budget_and_starves_no_one(
    fast_telemetry: None, stallable_hub: FakeHub, vllm_metrics: tuple[FakeVllmMetrics, int], operator: Operator, cluster: Cluster
) -> None:
    """The reconcile the telemetry runs for a new k is run as kopf's are (a slot, the time
    budget): while the Hub stalls the auto CR's config read, that reconcile is cut off at the
    budget and says so (Progressing=False ReconcileTimeout, one Event, still Ready), the
    telemetry of another CR goes on, and the rollout finishes once the Hub answers."""

    from .test_operator import LLAMA, args_of

    metrics, port = vllm_metrics
    auto = copy.deepcopy(LLAMA)
    auto["metadata"]["name"] = "auto-hub"
    del auto["spec"]["target"]["config"]
    auto["spec"]["target"]["model"] = "hub/llama"
    auto["spec"]["draft"]["numSpeculativeTokens"] = "auto"
    name = await _serving(cluster, auto, "uid-auto-hub", port)
    await eventually(lambda: cluster.condition(name, "Ready").get("status") == "True", what="auto-hub Ready")
    other_metrics = FakeVllmMetrics(k=3)
    with serve_metrics(other_metrics.body) as other_port:
        other = copy.deepcopy(LLAMA)
        other["metadata"]["name"] = "bystander"
        await _serving(cluster, other, "uid-bystander", other_port, bystander=False)
        await eventually(lambda: metrics.requests >= 1 and other_metrics.requests >= 1, what="first scrapes")

        stallable_hub.stalled.add("hub/llama")
        metrics.step(drafts=1000, accepted_lengths=[90, 81, 729])  # k 5 is predicted faster (see above)
        await eventually(lambda: _speculation(cluster, name).get("numSpeculativeTokens") == 5, what="k 5 in force")
        progressing = await eventually(lambda: cluster.condition(name, "Progressing").get("reason") == "ReconcileTimeout"
                                       and cluster.condition(name, "Progressing"), what="the cut-off")
        assert progressing["status"] == "False" and f"{BUDGET_S:g} s budget" in progressing["message"]
        assert cluster.condition(name, "Ready")["status"] == "True"  # nothing changed in the cluster
        assert '"num_speculative_tokens":3' in " ".join(args_of(cluster.get(DEPLOYMENT, name)))

        # The other CR's telemetry goes on while the rollout's config read still stalls.
        other_metrics.step(drafts=400, accepted_lengths=[100, 100, 100])
        await eventually(lambda: _speculation(cluster, "bystander").get("drafts") == 400,
                         what="the bystander's speculation")
        assert not stallable_hub.release.is_set()
        # Cut off again at every scrape while it stalls, said once.
        cut_off = _timeouts_counted()
        await eventually(lambda: _timeouts_counted() > cut_off, what="the rollout cut off again")
        assert cluster.condition(name, "Progressing")["reason"] == "ReconcileTimeout"

        stallable_hub.release.set()
        await eventually(lambda: '"num_speculative_tokens":5' in " ".join(args_of(cluster.get(DEPLOYMENT, name))), what="the rollout to k 5")
        # The reconcile's status write follows its Deployment patch (and the mirror's write of it).
        await eventually(lambda: cluster.sd(name)["status"]["plan"]["numSpeculativeTokens"] == 5, what="status.plan with k 5")
        await eventually(lambda: cluster.condition(name, "Progressing").get("reason") != "ReconcileTimeout", what="the note gone")

    def timeouts() -> list[dict[str, Any]]:
        return [e for e in cluster.events() if e.get("reason") == "ReconcileTimeout" and e["involvedObject"]["name"] == name]

    await eventually(timeouts, what="the ReconcileTimeout Event")
    assert len(timeouts()) == 1 and timeouts()[0]["type"] == "Warning"
    assert not [e for e in cluster.events() if e.get("reason") == "ReconcileTimeout" and e["involvedObject"]["name"] == "bystander"]


async def test_load_past_the_crossover_turns_speculation_effective_false_and_auto_k_follows_the_load(
    fast_telemetry: None, vllm_metrics: tuple[FakeVllmMetrics, int], operator: Operator, cluster: Cluster
) -> None:
    import json

    from specdeploy.telemetry import Counters, analyse
    from specdeploy.telemetry.load import analyse_load

    from .test_operator import LLAMA, args_of, flag

    metrics, port = vllm_metrics
    doc = copy.deepcopy(LLAMA)  # Llama-3.1-8B + EAGLE-3 on one H100
    doc["spec"]["draft"]["numSpeculativeTokens"] = "auto"
    name = await _serving(cluster, doc, "uid-load", port)
    metrics.set_running(700)  # vLLM reports 700 running requests at every scrape
    await eventually(lambda: metrics.requests >= 1, what="a first scrape")
    metrics.step(drafts=1000, accepted_lengths=[90, 81, 729])  # strong acceptance: per position .9, .81, .729
    speculation = await eventually(lambda: _speculation(cluster, name).get("numSpeculativeTokensChangedAt") and _speculation(cluster, name),
                                   what="auto k moved for the load")
    # What the cost model picks for this plan, these counters and that load, computed here from the same functions.
    plan = cluster.sd(name)["status"]["plan"]
    counters = Counters(1000, 3000, 900 + 810 + 729, (900, 810, 729))
    load = analyse_load(analyse(counters, method="eagle3", cost=0.0, k=3), plan, [700])
    assert load.crossover is not None and load.crossover < 700
    assert load.k_at(700) == 0  # past the crossover no k pays: auto runs the least it can
    assert speculation["numSpeculativeTokens"] == 1
    assert "for the typical batch of 700 running requests" in speculation["numSpeculativeTokensReason"]
    assert speculation["crossoverBatchSize"] == load.crossover
    assert speculation["observedLoad"]["typicalBatchSize"] == 700
    assert speculation["observedLoad"]["recommendedNumSpeculativeTokens"] == 0
    condition = next(c for c in cluster.sd(name)["status"]["conditions"] if c["type"] == "SpeculationEffective")
    assert condition["status"] == "False" and condition["reason"] == "NoSpeedupAtLoad"
    assert "past the crossover" in condition["message"] and "of the throughput" in condition["message"]
    await eventually(lambda: any(e.get("reason") == "NoSpeedupAtLoad" for e in cluster.events()), what="a NoSpeedupAtLoad Warning")
    await eventually(lambda: json.loads(flag(args_of(cluster.get(DEPLOYMENT, name)), "--speculative-config"))["num_speculative_tokens"] == 1,
                     what="the Deployment rendering k 1")
