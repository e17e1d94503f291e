"""Pods go to the GPU the plan was made for: the node affinity the plan implies, merged with the
user's; the image's accelerator against the GPU's vendor; the scheduler's verdict in Ready."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from specdeploy.api.conditions import PLANNED, PROGRESSING, VALIDATED, Reason, Verdict
from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.controller.reconcile.conditions import WorkloadState, ready_verdict, scheduling_problem, workload_verdicts
from specdeploy.controller.reconcile.state import Unschedulable
from specdeploy.planning.placement import min_memory_mib
from specdeploy.render import render_manifests
from specdeploy.render.pod import placed_affinity
from specdeploy.vllm.versions import image_accelerator
from tests.unit.test_validation import judge

LLAMA = "meta-llama__Llama-3.1-8B-Instruct"


def required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def plan_for(**extra: Any):
    evaluation = judge(LLAMA, None, "ngram", k=3, **extra)
    assert evaluation.plan is not None, [f.message for f in evaluation.findings]
    return evaluation


def test_an_h100_plan_requires_the_h100s_gfd_product() -> None:
    plan = plan_for(resources={"gpu": {"product": "H100-80GB"}}).plan
    assert plan.placement.requirements() == [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"]}]


def test_memory_only_plans_ask_for_the_memory_and_any_product_of_the_vendor() -> None:
    plan = plan_for(resources={"gpu": {"memoryGiB": 48}}).plan
    (memory,) = plan.placement.requirements()
    need = min_memory_mib(plan.memory)
    assert memory == {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": [str(need - 1)]}
    # The least whole GiB on which the layout's need stays within gpuMemoryUtilization: not the card's 48.
    assert need % 1024 == 0 and plan.memory.required_gib * 1024 < need < 48 * 1024


def test_an_amd_plan_requires_the_labellers_product_name_and_no_memory_number() -> None:
    plan = plan_for(resources={"gpu": {"product": "MI300X"}}, image="rocm/vllm:v0.34.0").plan
    assert plan.placement.requirements() == [{"key": "amd.com/gpu.product-name", "operator": "In", "values": ["AMD_Instinct_MI300X_OAM"]}]


def test_an_unknown_resource_without_a_product_places_nothing() -> None:
    plan = plan_for(resources={"gpu": {"memoryGiB": 48, "resourceName": "example.com/gpu"}}).plan
    assert plan.placement is None


def test_the_planned_requirements_join_every_term_of_the_users_affinity() -> None:
    plan = plan_for(resources={"gpu": {"product": "H200"}}).plan
    user = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    kept = copy.deepcopy(user)
    merged = placed_affinity(user, plan.placement)
    assert user == kept  # the spec's own value is not changed
    terms = merged["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["a"], ["b"]]
    assert all(t["matchExpressions"][1:] == plan.placement.requirements() for t in terms)
    assert merged["podAntiAffinity"] == user["podAntiAffinity"]


@pytest.mark.parametrize(("setting", "planned"), [("Required", True), ("Off", False)])
def test_gpu_node_affinity_off_leaves_only_the_users_placement(setting: str, planned: bool) -> None:
    extra = {"resources": {"gpu": {"product": "H100-80GB"}}, "scheduling": {"gpuNodeAffinity": setting, "nodeSelector": {"pool": "inference"}}}
    evaluation = plan_for(**extra)
    spec = SpeculativeDeploymentSpec.model_validate({"target": {"model": f"org/{LLAMA}"}, "draft": {"method": "ngram", "numSpeculativeTokens": 3}, **extra})
    (deployment,) = [m for m in render_manifests(spec, evaluation.plan, name="sd", namespace="ns") if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "inference"}
    assert ("affinity" in pod) is planned
    if planned:
        assert required_terms(pod)[0]["matchExpressions"] == evaluation.plan.placement.requirements()


@pytest.mark.parametrize(("image", "accelerator"), [
    ("vllm/vllm-openai:v0.34.0", "cuda"), ("docker.io/vllm/vllm-openai:v0.33.0", "cuda"),
    ("registry.example/vllm:0.34.0-cu130", "cuda"), ("vllm/vllm-openai-rocm:v0.34.0", "rocm"),
    ("rocm/vllm:rocm6.4.1_vllm_0.10.1", "rocm"), ("registry.example/vllm:v0.34.0-rocm", "rocm"),
    ("registry.example/vllm:v0.34.0", None), ("registry.example/microcmd:1", None),
])
def test_the_image_name_tells_its_accelerator_or_nothing(image: str, accelerator: str | None) -> None:
    assert image_accelerator(image) == accelerator


@pytest.mark.parametrize(("gpu", "image", "refused"), [
    ({"product": "MI300X"}, "vllm/vllm-openai:v0.34.0", True),
    ({"product": "MI300X"}, "vllm/vllm-openai-rocm:v0.34.0", False),
    ({"product": "H100-80GB"}, "rocm/vllm:v0.34.0", True),
    ({"memoryGiB": 80, "resourceName": "amd.com/gpu"}, "vllm/vllm-openai:v0.34.0", True),
    ({"product": "H100-80GB"}, "registry.example/vllm:v0.34.0", False),
])
def test_a_cuda_image_on_amd_or_a_rocm_image_on_nvidia_is_refused(gpu: dict, image: str, refused: bool) -> None:
    evaluation = judge(LLAMA, None, "ngram", k=3, resources={"gpu": gpu}, image=image)
    found = [f for f in evaluation.findings if f.code == "image-accelerator-mismatch"]
    assert bool(found) is refused and evaluation.ok is not refused
    if refused:
        assert found[0].field == "spec.image" and "build" in found[0].message and len(found[0].message) <= 300
        assert evaluation.plan is not None  # the layout is still shown: only the image is wrong


UNSCHEDULABLE_POD = {"metadata": {"name": "sd-abc"}, "spec": {}, "status": {"phase": "Pending", "conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
     "message": "0/7 nodes are available: 7 node(s) didn't match Pod's node affinity/selector."}]}}


def test_the_schedulers_message_is_read_only_while_the_pod_is_unplaced() -> None:
    assert scheduling_problem(UNSCHEDULABLE_POD).startswith("0/7 nodes are available")
    placed = copy.deepcopy(UNSCHEDULABLE_POD)
    placed["spec"]["nodeName"] = "h100-0"
    assert scheduling_problem(placed) is None
    assert scheduling_problem({"metadata": {}, "status": {"conditions": ["junk", {"type": "PodScheduled", "status": "True"}]}}) is None
    huge = copy.deepcopy(UNSCHEDULABLE_POD)
    huge["status"]["conditions"][0]["message"] = "x" * 100_000
    assert len(scheduling_problem(huge)) == 1024


def test_an_unschedulable_rollout_says_why_in_progressing_and_ready() -> None:
    memory = Unschedulable()
    assert memory.note(("ns", "sd"), "sd-abc", scheduling_problem(UNSCHEDULABLE_POD)) is True
    assert memory.note(("ns", "sd"), "sd-abc", scheduling_problem(UNSCHEDULABLE_POD)) is False  # unchanged
    workload = WorkloadState("Deployment", "sd", desired=1, replicas=1, ready=0, updated=1, current=True,
                             unschedulable=memory.message(("ns", "sd")))
    verdicts = workload_verdicts(workload, applied=True)
    assert verdicts[PROGRESSING].reason == Reason.UNSCHEDULABLE and "pod sd-abc: 0/7 nodes" in verdicts[PROGRESSING].message
    verdicts.update({VALIDATED: Verdict("True", Reason.VALID), PLANNED: Verdict("True", Reason.PLANNED)})
    ready = ready_verdict(verdicts, workload)
    assert (ready.status, ready.reason) == ("False", Reason.UNSCHEDULABLE)
    assert memory.note(("ns", "sd"), "sd-abc", None) is True and memory.message(("ns", "sd")) == ""
    rolled_out = WorkloadState("Deployment", "sd", 1, 1, 1, 1, True, unschedulable="stale")
    assert workload_verdicts(rolled_out, applied=True)[PROGRESSING].reason == Reason.ROLLOUT_COMPLETE
