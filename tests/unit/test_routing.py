"""spec.routing: the InferencePool (Gateway API Inference Extension) is rendered only when asked
for, selects the CR's serving pods and nothing else, and an edit of the spec is carried to the
live pool (a dropped endpoint picker, a switch between one and several nodes per replica)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from specdeploy.controller.reconcile.apply import merge_patch
from specdeploy.preflight.job import preflight_config_map, preflight_job
from specdeploy.preflight.request import judge_request
from specdeploy.render import render_manifests
from specdeploy.render.labels import LWS_WORKER_INDEX_LABEL

from tests.unit.test_render import MULTI, by_kind, make_plan, spec

PICKER = {"name": "llama-epp", "port": 9002, "failureMode": "FailOpen"}


def _selects(pool: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in pool["spec"]["selector"]["matchLabels"].items())


def _pod_labels(template: dict[str, Any], **extra: str) -> dict[str, str]:
    return {**template["metadata"]["labels"], **extra}


def test_no_routing_renders_no_pool() -> None:
    assert "InferencePool" not in by_kind(render_manifests(spec(), make_plan(), name="llama", namespace="ml"))


def test_the_pool_selects_the_serving_pods_on_vllms_port_with_the_endpoint_picker() -> None:
    objs = by_kind(render_manifests(spec(routing={"endpointPicker": PICKER}), make_plan(), name="llama", namespace="ml"))
    pool = objs["InferencePool"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["metadata"]["name"] == objs["Deployment"]["metadata"]["name"] == "llama"
    assert pool["metadata"]["labels"] == objs["Service"]["metadata"]["labels"]  # what prune lists children by
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    port = objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["ports"][0]
    assert port["containerPort"] == 8000
    assert pool["spec"]["endpointPickerRef"] == {"kind": "Service", "name": "llama-epp", "port": {"number": 9002}, "failureMode": "FailOpen"}
    assert _selects(pool, _pod_labels(objs["Deployment"]["spec"]["template"], **{"pod-template-hash": "abc"}))


def test_a_pool_without_picker_has_no_reference_and_the_picker_defaults() -> None:
    bare = by_kind(render_manifests(spec(routing={}), make_plan(), name="llama", namespace="ml"))["InferencePool"]
    assert "endpointPickerRef" not in bare["spec"]
    named = by_kind(render_manifests(spec(routing={"endpointPicker": {"name": "epp"}}), make_plan(), name="llama", namespace="ml"))
    assert named["InferencePool"]["spec"]["endpointPickerRef"] == {"kind": "Service", "name": "epp", "port": {"number": 9002},
                                                                    "failureMode": "FailClose"}


def test_the_pool_leaves_out_the_preflight_pod_and_another_crs_pods() -> None:
    s = spec(routing={})
    pool = by_kind(render_manifests(s, make_plan(), name="llama", namespace="ml"))["InferencePool"]
    request = judge_request(s, make_plan(), {"model_type": "llama"}, None)
    config_map = preflight_config_map(request, "print()", cr_name="llama", namespace="ml")
    job = preflight_job(s, request, config_map, cr_name="llama", namespace="ml")
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] == "llama"  # same instance...
    assert not _selects(pool, job["spec"]["template"]["metadata"]["labels"])  # ...not selected
    other = by_kind(render_manifests(s, make_plan(), name="llama-2", namespace="ml"))["Deployment"]
    assert not _selects(pool, _pod_labels(other["spec"]["template"]))


def test_a_canary_workload_of_the_same_cr_joins_the_pool() -> None:
    """A second workload of the CR (another revision, a canary track) keeps the selector labels
    and adds its own: its pods are in the pool too."""
    objs = by_kind(render_manifests(spec(routing={}), make_plan(), name="llama", namespace="ml"))
    canary = _pod_labels(objs["Deployment"]["spec"]["template"], **{"specdeploy.io/track": "canary", "pod-template-hash": "x"})
    assert _selects(objs["InferencePool"], canary)


def test_a_multi_node_pool_selects_only_each_groups_leader() -> None:
    objs = by_kind(render_manifests(spec(routing={}), MULTI, name="k3", namespace="ml"))
    template = objs["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    leader = _pod_labels(template["leaderTemplate"], **{LWS_WORKER_INDEX_LABEL: "0"})
    worker = _pod_labels(template["workerTemplate"], **{LWS_WORKER_INDEX_LABEL: "1"})
    assert _selects(objs["InferencePool"], leader) and not _selects(objs["InferencePool"], worker)
    assert objs["InferencePool"]["spec"]["selector"]["matchLabels"] == objs["Service"]["spec"]["selector"]


def test_a_dropped_picker_and_a_switch_to_one_node_are_removed_from_the_live_pool() -> None:
    live = by_kind(render_manifests(spec(routing={"endpointPicker": PICKER}), MULTI, name="k3", namespace="ml"))["InferencePool"]
    live["spec"]["appProtocol"] = "http"  # the CRD's default, which the API server adds
    desired = by_kind(render_manifests(spec(routing={}), make_plan(), name="k3", namespace="ml"))["InferencePool"]
    patch = merge_patch(live, desired)
    assert patch["spec"]["endpointPickerRef"] is None
    assert patch["spec"]["selector"]["matchLabels"] == {LWS_WORKER_INDEX_LABEL: None}
    assert "appProtocol" not in patch["spec"]
    assert merge_patch(desired, desired) == {}


def test_a_deployments_selector_is_never_patched_for_extra_live_keys() -> None:
    """Only the pool's selector keys are ours to remove: a Deployment's selector is immutable."""
    desired = by_kind(render_manifests(spec(), make_plan(), name="llama", namespace="ml"))["Deployment"]
    live = {**desired, "spec": {**desired["spec"], "selector": {"matchLabels": {**desired["spec"]["selector"]["matchLabels"], "x": "y"}}}}
    assert "selector" not in merge_patch(live, desired).get("spec", {})


@pytest.mark.parametrize("picker", [{"name": "Bad_Name"}, {"name": "epp", "port": 0}, {"name": "epp", "failureMode": "Open"}, {}])
def test_a_bad_endpoint_picker_is_refused(picker: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        spec(routing={"endpointPicker": picker})
