"""Production operations with the shipped operator on the emulator: prune on a workload
switch, drift undone, deleted children re-created, the last good verdict kept through a Hub
outage, the writes budget, long names. Final-state assertions (the emulator may deliver an
event twice)."""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from specdeploy.render import child_names, invalid_names
from tests.conftest import load_config
from tests.integration.fake_hub import FakeHub

from .conftest import (
    DEPLOYMENT, LWS, NS, PDB, SD_PATH, SERVICE, Cluster, Operator, created, eventually, example, reconciles_finished, with_identity,
)

LLAMA = example("llama-3.1-8b-eagle3.yaml")
K3_B300 = example("kimi-k3-dspark-b300.yaml")  # one node per replica: a Deployment
NGRAM = example("qwen3-8b-ngram.yaml")
K3 = example("kimi-k3-dspark-h200.yaml")  # two nodes per replica: a LeaderWorkerSet


def _args(dep: dict[str, Any]) -> list[str]:
    return dep["spec"]["template"]["spec"]["containers"][0]["args"]


def _workloads(cluster: Cluster, name: str) -> list[str]:
    return [r for r in (DEPLOYMENT, LWS) if cluster.exists(r, name)]


async def _ready(cluster: Cluster, resource: str, name: str, parent: str | None = None) -> None:
    await cluster.patch_status(resource, name, {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1})
    await eventually(lambda: cluster.condition(parent or name, "Ready").get("status") == "True", what="Ready=True")


async def _patch(cluster: Cluster, resource: str, name: str, body: dict[str, Any]) -> None:
    group_version, plural = resource.rsplit("/", 1)
    root = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    response = await cluster.k.patch(f"{root}/namespaces/{NS}/{plural}/{name}", json=body)
    assert response.status == 200, await response.text()


async def _delete(cluster: Cluster, resource: str, name: str) -> None:
    group_version, plural = resource.rsplit("/", 1)
    root = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    response = await cluster.k.delete(f"{root}/namespaces/{NS}/{plural}/{name}")
    assert response.status in (200, 202), await response.text()


async def test_switch_to_a_leader_worker_set_leaves_exactly_one_workload(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, K3_B300, "uid-switch")
    await eventually(lambda: _workloads(cluster, name) == [DEPLOYMENT], what="the Deployment")
    # The same model moved to H200: a replica now spans two nodes.
    spec = {"resources": {"gpu": {"product": "H200-141GB"}}, "scheduling": {"nodeSelector": None}}
    await cluster.patch_spec(name, spec, generation=2)
    await eventually(lambda: _workloads(cluster, name) == [LWS], what="only the LeaderWorkerSet")
    await eventually(lambda: cluster.sd(name)["status"]["workload"] == f"LeaderWorkerSet/{name}", what="status.workload")
    # ...and back: the LeaderWorkerSet is pruned in turn.
    await cluster.patch_spec(name, {"resources": {"gpu": {"product": "B300-288GB"}}}, generation=3)
    await eventually(lambda: _workloads(cluster, name) == [DEPLOYMENT], what="only the Deployment again")
    await eventually(lambda: cluster.sd(name)["status"]["workload"] == f"Deployment/{name}", what="status.workload")


async def test_prune_spares_objects_we_do_not_own(operator: Operator, cluster: Cluster) -> None:
    """A same-named LeaderWorkerSet without our ownerReference is somebody else's: kept."""
    foreign = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
               "metadata": {"name": LLAMA["metadata"]["name"], "namespace": NS, "labels": {"app.kubernetes.io/managed-by": "specdeploy"}},
               "spec": {"replicas": 1}}
    response = await cluster.k.post(f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets", json=foreign)
    assert response.status in (200, 201)
    done = reconciles_finished()
    name = await created(cluster, LLAMA, "uid-foreign")
    await eventually(lambda: cluster.exists(PDB, name), what="children")
    await eventually(lambda: reconciles_finished() > done, what="the reconcile that prunes")
    assert cluster.exists(LWS, name) and cluster.exists(DEPLOYMENT, name)


async def test_a_hand_edit_is_undone_and_a_deleted_child_comes_back(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, LLAMA, "uid-drift")
    await eventually(lambda: cluster.exists(PDB, name), what="children")
    rendered = _args(cluster.get(DEPLOYMENT, name))
    # kubectl edit: new args, and a label we do not render (which must stay).
    dep = cluster.get(DEPLOYMENT, name)
    containers = copy.deepcopy(dep["spec"]["template"]["spec"]["containers"])
    containers[0]["args"] = ["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "8"]
    await _patch(cluster, DEPLOYMENT, name, {"metadata": {"labels": {"team": "x"}}, "spec": {"template": {"spec": {"containers": containers}}}})
    await eventually(lambda: _args(cluster.get(DEPLOYMENT, name)) == rendered, what="args put back")
    assert cluster.get(DEPLOYMENT, name)["metadata"]["labels"]["team"] == "x"
    # A Service selector edited, a PDB deleted: both put back.
    await _patch(cluster, SERVICE, f"{name}-api", {"spec": {"selector": {"app.kubernetes.io/name": "other"}}})
    await eventually(lambda: cluster.get(SERVICE, f"{name}-api")["spec"]["selector"]["app.kubernetes.io/name"] == "vllm", what="selector put back")
    await _delete(cluster, PDB, name)
    await eventually(lambda: cluster.exists(PDB, name), what="the PDB re-created")
    # Settled: no write loop.
    mark = cluster.mark()
    await asyncio.sleep(1.0)
    assert not [w for w in cluster.writes(mark) if w.resource is not None and w.resource.plural != "events"]


async def test_delete_and_recreate_with_the_same_name_rebinds_the_children(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, LLAMA, "uid-old")
    await eventually(lambda: cluster.exists(PDB, name), what="children")
    response = await cluster.k.delete(f"{SD_PATH}/{name}")
    assert response.status in (200, 202)
    await eventually(lambda: not cluster.exists("specdeploy.io/v1alpha1/speculativedeployments", name), what="CR gone")
    await cluster.create(with_identity(LLAMA, "uid-new"))
    for resource, child in ((DEPLOYMENT, name), (SERVICE, f"{name}-api"), (PDB, name)):
        await eventually(lambda: cluster.get(resource, child)["metadata"]["ownerReferences"][0]["uid"] == "uid-new", what=f"{resource} owned by the new CR")
    # Garbage collection of the old owner's children (the emulator has none; play it): back again.
    await _delete(cluster, DEPLOYMENT, name)
    await eventually(lambda: cluster.exists(DEPLOYMENT, name), what="the Deployment re-created")


async def _create_counting_writes(cluster: Cluster, doc: dict[str, Any], uid: str) -> tuple[str, list[Any]]:
    """Create `doc` and return the writes it cost, as the API server's request log has them:
    kopf's own patches of the CR included (finalizer, progress and diffbase annotations), the
    test's create excluded."""
    mark = cluster.mark()
    name = await created(cluster, doc, uid)
    await eventually(lambda: cluster.exists(PDB, name), what="children")
    # kopf's last write on a create is the diffbase annotation: it is stored once the handler is done.
    await eventually(lambda: "specdeploy.io/last-handled-configuration" in cluster.sd(name)["metadata"].get("annotations", {}),
                     what="kopf's diffbase annotation")
    return name, [w for w in cluster.writes(mark) if not (str(w.method).endswith("POST") and w.url.path == SD_PATH)]


@pytest.mark.parametrize("doc", [NGRAM, LLAMA, K3], ids=["ngram", "eagle3", "leader-worker-set"])
async def test_create_costs_at_most_children_plus_two_writes(operator: Operator, cluster: Cluster, doc: dict[str, Any]) -> None:
    name, writes = await _create_counting_writes(cluster, doc, f"uid-writes-{doc['metadata']['name']}")
    children = [w for w in writes if w.resource is not None and w.resource.plural in ("deployments", "leaderworkersets", "services", "poddisruptionbudgets")]
    assert len(children) == 3
    assert len(writes) <= len(children) + 2, [(str(w.method), w.url.path, str(w.data)[:150]) for w in writes]
    assert "finalizers" not in cluster.sd(name)["metadata"]  # deletion never waits for the operator


async def test_a_restart_writes_nothing(operator: Operator, cluster: Cluster) -> None:
    """A restart over an ngram CR (its plan holds nulls the API server drops): nothing written."""
    await _create_counting_writes(cluster, NGRAM, "uid-restart-ngram")
    await operator.stop()
    mark, done = cluster.mark(), reconciles_finished()
    await operator.start()
    await eventually(lambda: reconciles_finished() > done, what="the resume reconcile")
    # A wrong write could only come later than this: the wait can miss one, never invent one.
    await asyncio.sleep(1.0)
    assert cluster.writes(mark) == [], [(str(w.method), w.url.path, w.data) for w in cluster.writes(mark)]


async def test_long_names_give_valid_child_names_and_labels(operator: Operator, cluster: Cluster) -> None:
    doc = copy.deepcopy(LLAMA)
    long = ("a" * 61 + ".") * 4  # 248 characters, dots: a valid CR name, not a valid Service name
    doc["metadata"]["name"] = long.rstrip(".")
    name = doc["metadata"]["name"]
    await created(cluster, doc, "uid-long")
    names = child_names(name)
    await eventually(lambda: cluster.exists(PDB, names["PodDisruptionBudget"]), what="children")
    children = [cluster.get(DEPLOYMENT, names["Deployment"]), cluster.get(SERVICE, names["Service"]), cluster.get(PDB, names["PodDisruptionBudget"])]
    assert invalid_names(children) == []
    assert all(len(c["metadata"]["name"]) <= 63 for c in children)
    status = cluster.sd(name)["status"]
    assert status["endpoint"].startswith(f"http://{names['Service']}.")
    # The readiness mirror finds the parent through the ownerReference, not the shortened label.
    await _ready(cluster, DEPLOYMENT, names["Deployment"], parent=name)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with FakeHub() as fake:
        fake.add_json("meta-llama/Llama-3.1-8B-Instruct", "config.json", load_config("meta-llama__Llama-3.1-8B-Instruct"))
        fake.serve_as_hub(monkeypatch, tmp_path / "hub-cache")
        monkeypatch.setenv("SPECDEPLOY_BACKOFF_SCALE", "0.05")
        yield fake


async def test_a_hub_outage_keeps_a_serving_model_ready(hub: FakeHub, operator: Operator, cluster: Cluster, tmp_path: Path) -> None:
    doc = copy.deepcopy(LLAMA)
    doc["metadata"]["name"] = "from-hub"
    del doc["spec"]["target"]["config"]  # read from the (fake) Hub
    name = await created(cluster, doc, "uid-hub")
    await _ready(cluster, DEPLOYMENT, name)
    hub.status_override = 503
    shutil.rmtree(tmp_path / "hub-cache", ignore_errors=True)  # no file cache to fall back on
    # An edit while the Hub is down: planned with the last config read, still serving.
    await cluster.patch_spec(name, {"draft": {"numSpeculativeTokens": 4}}, generation=2)
    await eventually(lambda: cluster.condition(name, "Validated").get("reason") == "ConfigRefreshRetrying", what="the retrying note")
    await eventually(lambda: '"num_speculative_tokens":4' in " ".join(_args(cluster.get(DEPLOYMENT, name))), what="the edit applied")
    assert cluster.condition(name, "Validated")["status"] == "True"
    assert cluster.condition(name, "Ready")["status"] == "True"
    # kopf posts Events from a queue after the handler returns: the Event lags the condition.
    warnings = await eventually(lambda: [e for e in cluster.events() if e.get("reason") == "ConfigRefreshRetrying"], what="the retrying Event")
    # A restart while the Hub is still down (nothing cached in memory): the verdict stands.
    await operator.stop()
    done = reconciles_finished()
    await operator.start()
    await eventually(lambda: reconciles_finished() > done, what="the resume reconcile")
    assert cluster.condition(name, "Ready")["status"] == "True"
    assert cluster.condition(name, "Validated")["status"] == "True"
    assert len([e for e in cluster.events() if e.get("reason") == "ConfigRefreshRetrying"]) == len(warnings) == 1
    # The Hub back: the note goes, with no new Event.
    hub.status_override = None
    await eventually(lambda: cluster.condition(name, "Validated").get("reason") == "Valid", what="Valid again")
    assert cluster.condition(name, "Ready")["status"] == "True"


async def test_the_operator_reads_no_local_file_a_cr_names(operator: Operator, cluster: Cluster) -> None:
    doc = copy.deepcopy(LLAMA)
    doc["metadata"]["name"] = "local-path"
    del doc["spec"]["target"]["config"]
    doc["spec"]["target"]["model"] = "/etc/passwd"
    await cluster.create(with_identity(doc, "uid-path"))
    await eventually(lambda: cluster.condition("local-path", "Validated").get("reason") == "ConfigInvalid", what="ConfigInvalid")
    validated = cluster.condition("local-path", "Validated")
    message = validated["message"]
    assert validated["status"] == "False" and message.startswith("spec.target.model: ") and "reads no local files" in message
    assert cluster.condition("local-path", "Planned")["reason"] == "NotValidated"
    assert [f["code"] for f in cluster.sd("local-path")["status"]["findings"]] == ["config-invalid"]
    assert not cluster.exists(DEPLOYMENT, "local-path")


async def test_info_logs_say_what_was_done(operator: Operator, cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """INFO is on by default; logging a child write once broke the handler (a reserved
    LogRecord field passed as `extra`)."""
    import logging

    caplog.set_level(logging.INFO)
    name = await created(cluster, LLAMA, "uid-logs")
    await eventually(lambda: cluster.exists(PDB, name), what="children")
    await eventually(lambda: any(f"Created Deployment {NS}/{name}" in r.getMessage() for r in caplog.records), what="the INFO line")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_rapid_edits_end_with_the_last_one(operator: Operator, cluster: Cluster) -> None:
    name = await created(cluster, LLAMA, "uid-rapid")
    last = 0
    for generation, k in enumerate([4, 5, 2, 6, 3, 5, 4, 7, 2, 3] * 2, start=2):
        await cluster.patch_spec(name, {"draft": {"numSpeculativeTokens": k}}, generation=generation)
        last = k
        await asyncio.sleep(0.02)
    def state() -> str:
        body = cluster.sd(name)
        annotations = {k: v[:200] for k, v in body["metadata"].get("annotations", {}).items()}
        return f"generation {body['metadata'].get('generation')}, status {json.dumps(body.get('status', {}))[:600]}, annotations {annotations}"

    try:
        await eventually(lambda: cluster.sd(name)["status"].get("observedGeneration") == 21, what="the last generation")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {state()}") from None
    await eventually(lambda: cluster.sd(name)["status"]["plan"]["numSpeculativeTokens"] == last, what="the last plan")
    assert f'"num_speculative_tokens":{last}' in " ".join(_args(cluster.get(DEPLOYMENT, name)))


async def test_an_unexpected_error_is_reported_in_status(operator: Operator, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in a rule (played by a failing evaluate) leaves a status that says so."""
    from specdeploy.controller.reconcile import steps as reconcile

    def broken(*_: Any, **__: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(reconcile, "evaluate", broken)
    monkeypatch.setenv("SPECDEPLOY_BACKOFF_SCALE", "0.05")
    doc = copy.deepcopy(LLAMA)
    doc["metadata"]["name"] = "broken"
    await cluster.create(with_identity(doc, "uid-broken"))
    await eventually(lambda: cluster.condition("broken", "Ready").get("reason") == "ReconcileError", what="ReconcileError")
    assert "ZeroDivisionError" in cluster.condition("broken", "Ready")["message"]
    assert cluster.condition("broken", "Stalled")["status"] == "True"
    monkeypatch.undo()
    await eventually(lambda: cluster.condition("broken", "Planned").get("status") == "True", what="recovered")


@pytest.fixture
def reads_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEPLOY_READ_HF_TOKEN_SECRETS", "true")


async def test_the_hub_token_is_used_but_never_written_anywhere(hub: FakeHub, reads_secrets: None, operator: Operator,
                                                                cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    import base64
    import json
    import logging

    caplog.set_level(logging.DEBUG)
    token = "hf_do_not_leak_0123456789"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": NS},
              "data": {"token": base64.b64encode(token.encode()).decode()}}
    response = await cluster.k.post(f"/api/v1/namespaces/{NS}/secrets", json=secret)
    assert response.status in (200, 201)
    doc = copy.deepcopy(LLAMA)
    doc["metadata"]["name"] = "gated"
    del doc["spec"]["target"]["config"]
    doc["spec"]["hfTokenSecretRef"] = {"name": "hf-token", "key": "token"}
    name = await created(cluster, doc, "uid-gated")
    await eventually(lambda: cluster.exists(PDB, name), what="children")
    assert any(auth == f"Bearer {token}" for _, _, auth in hub.requests)  # the operator did use it
    written = json.dumps([cluster.sd(name), cluster.get(DEPLOYMENT, name), cluster.get(SERVICE, f"{name}-api"),
                          cluster.get(PDB, name), cluster.events()])
    assert token not in written
    env = cluster.get(DEPLOYMENT, name)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} in env
    assert not [r for r in caplog.records if token in r.getMessage()]


async def test_a_spec_over_256_kib_gets_its_status_and_small_annotations(operator: Operator, cluster: Cluster) -> None:
    """kopf's record of the handled spec is a digest: Kubernetes caps annotations at 256 KiB."""
    import json

    doc = copy.deepcopy(LLAMA)
    doc["metadata"]["name"] = "big-spec"
    doc["spec"]["target"]["config"]["padding"] = ["x" * 1000] * 300  # ~300 KiB, inside the object limit
    name = await created(cluster, doc, "uid-big")
    annotations = cluster.sd(name)["metadata"].get("annotations") or {}
    assert len(json.dumps(annotations)) < 4096, {k: len(v) for k, v in annotations.items()}
    await cluster.patch_spec(name, {"draft": {"numSpeculativeTokens": 5}}, generation=2)  # a change is still seen
    await eventually(lambda: cluster.sd(name)["status"].get("observedGeneration") == 2, what="the edit handled")


async def test_nothing_is_created_while_any_child_name_is_invalid(operator: Operator, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard behind the name shortening: a renderer bug (played here) that yields one
    invalid name creates no child at all, so no GPUs are held by a set that cannot serve."""
    from specdeploy.controller.reconcile import steps as reconcile

    real = reconcile.render_manifests

    def one_bad_name(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        children = real(*args, **kwargs)
        children[-1]["metadata"]["name"] = "Not_A.Valid-Name"
        return children

    monkeypatch.setattr(reconcile, "render_manifests", one_bad_name)
    doc = copy.deepcopy(LLAMA)
    doc["metadata"]["name"] = "bad-names"
    await cluster.create(with_identity(doc, "uid-bad-names"))
    await eventually(lambda: cluster.condition("bad-names", "Progressing").get("reason") == "InvalidChildNames", what="InvalidChildNames")
    assert "Not_A.Valid-Name" in cluster.condition("bad-names", "Progressing")["message"]
    assert cluster.condition("bad-names", "Stalled")["status"] == "True"
    assert not cluster.exists(DEPLOYMENT, "bad-names") and not cluster.exists(SERVICE, "bad-names-api")


async def test_children_an_older_operator_named_differently_are_pruned(operator: Operator, cluster: Cluster) -> None:
    """An older operator named the children differently (before hash-shortened names): after an
    upgrade (a restart), what carries our ownerReference and managed-by label but is no longer
    rendered is deleted, found by label, whatever its name. Objects missing either mark stay."""
    name = await created(cluster, LLAMA, "uid-prehash")
    await eventually(lambda: cluster.exists(PDB, name), what="children")
    await operator.stop()
    current = cluster.get(DEPLOYMENT, name)
    owner = current["metadata"]["ownerReferences"]
    ours = dict(current["metadata"]["labels"])

    async def plant(resource: str, kind: str, child: str, labels: dict[str, str], refs: list[dict[str, Any]]) -> None:
        group_version, plural = resource.rsplit("/", 1)
        root = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        body = {"apiVersion": group_version, "kind": kind, "spec": {},
                "metadata": {"name": child, "namespace": NS, "labels": labels, "ownerReferences": refs}}
        response = await cluster.k.post(f"{root}/namespaces/{NS}/{plural}", json=body)
        assert response.status in (200, 201), await response.text()

    await plant(DEPLOYMENT, "Deployment", f"{name}-vllm", ours, owner)  # the old workload name
    await plant(SERVICE, "Service", f"{name}-svc", ours, owner)  # the old Service name
    other_uid = [{**owner[0], "uid": "uid-someone-else"}]
    await plant(DEPLOYMENT, "Deployment", f"{name}-foreign", ours, other_uid)
    unlabelled = {k: v for k, v in ours.items() if k != "app.kubernetes.io/managed-by"}
    await plant(DEPLOYMENT, "Deployment", f"{name}-unlabelled", unlabelled, owner)

    await operator.start()
    await eventually(lambda: not cluster.exists(DEPLOYMENT, f"{name}-vllm") and not cluster.exists(SERVICE, f"{name}-svc"), what="the old-named children pruned")
    assert cluster.exists(DEPLOYMENT, f"{name}-foreign") and cluster.exists(DEPLOYMENT, f"{name}-unlabelled")
    assert all(cluster.exists(r, n) for r, n in ((DEPLOYMENT, name), (SERVICE, f"{name}-api"), (PDB, name)))
