"""What used to fail only at deploy time (InvalidImageName, pods Pending for a resource no node has,
an engine that cannot start on the GPU, a typo left for a plugin preflight, a Deployment the API
server refuses) is refused before anything is deployed: at `specdeploy plan -f` and at the
admission webhook alike, by the same rule, naming the field and what it allows.

The CRs are in the bad-CR suite (tests/fixtures/bad-crs/), so the suite's checks (no raw pydantic
text, every message within 300 characters) hold for them too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy import cli
from specdeploy.api.image_reference import image_problem
from specdeploy.api.parse import parse_object, parse_spec
from specdeploy.controller.admission.webhook import admission_verdict
from specdeploy.planning.gpus import UnknownGpuError, lookup_gpu
from specdeploy.vllm import DEFAULT_VERSION, SUPPORTED_VERSIONS
from tests.conftest import not_in_our_words
from tests.unit.test_validation import judge

BAD = Path(__file__).resolve().parents[1] / "fixtures" / "bad-crs"
HEX = "0123456789abcdef" * 4

# (bad CR, code, field, what the message says is allowed)
CASES = [
    # the three issue 32 names, and its three spellings of eagle3
    ("image-upper-case", "image-invalid", "spec.image", "upper-case letters, which the kubelet refuses: use 'vllm/vllm-openai:v0.34.0'"),
    ("resource-name-plural", "gpu-resource-misspelled", "spec.resources.gpu.resourceName", "did you mean nvidia.com/gpu?"),
    ("cuda-image-on-amd", "image-accelerator-mismatch", "spec.image", "use a ROCM build (e.g. vllm/vllm-openai-rocm:"),
    ("method-typo-swapped", "method-misspelled", "spec.draft.method", "'eagel3' is not a method: did you mean eagle3?"),
    ("method-typo-case", "method-misspelled", "spec.draft.method", "'Eagle3' is not a method: did you mean eagle3?"),
    ("method-typo-dash", "method-misspelled", "spec.draft.method", "'eagle-3' is not a method: did you mean eagle3?"),
    # ten more
    ("image-tag-plus", "image-invalid", "spec.image", "a tag is letters, digits, '_', '.' and '-', at most 128"),
    ("image-digest-short", "image-invalid", "spec.image", "a digest is sha256: and 64 hex digits"),
    ("image-id", "image-invalid", "spec.image", "is an image ID, not a reference: name the image, [registry[:port]/]repository"),
    ("image-registry-upper-case", "image-invalid", "spec.image", "'VLLM' would be read as a registry host"),
    ("resource-nvidia-on-amd", "gpu-resource-vendor-mismatch", "spec.resources.gpu.resourceName", "use amd.com/gpu, or leave resourceName unset"),
    ("resource-name-case", "gpu-resource-misspelled", "spec.resources.gpu.resourceName", "did you mean nvidia.com/gpu?"),
    ("rocm-image-on-nvidia", "image-accelerator-mismatch", "spec.image", "use a CUDA build (e.g. vllm/vllm-openai:"),
    ("extra-arg-joined", "extra-arg-joined", "spec.vllm.extraArgs[0]", "write 2 items, ['--max-num-seqs', '256']"),
    ("env-name-equals", "spec-invalid", "spec.vllm.env[0].name", "letters, digits, '_', '-' and '.', not starting with a digit"),
    ("env-value-and-value-from", "spec-invalid", "spec.vllm.env[0]", "set value or valueFrom, not both"),
    ("gpu-product-typo", "gpu-unknown", "spec.resources.gpu.product", "did you mean H100-80GB?"),
    ("speculative-config-camel-case", "speculative-config-unknown-key", "spec.draft.speculativeConfig.promptLookupMax",
     "did you mean prompt_lookup_max?"),
    ("field-typo", "spec-invalid", "spec.draft.numSpeculativeToken", "did you mean numSpeculativeTokens?"),
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_the_issue_three_and_at_least_ten_more() -> None:
    assert len(CASES) >= 6 + 10 and all((BAD / f"{name}.yaml").exists() for name, *_ in CASES)


@pytest.mark.parametrize(("name", "code", "field", "words"), CASES, ids=[c[0] for c in CASES])
def test_refused_at_plan_and_at_the_webhook_naming_the_field_and_what_is_allowed(
        capsys: pytest.CaptureFixture[str], name: str, code: str, field: str, words: str) -> None:
    path = BAD / f"{name}.yaml"
    exit_code = cli.main(["plan", "-f", str(path), "-o", "json"])
    findings = json.loads(capsys.readouterr().out)["results"][0]["findings"]
    assert exit_code == 1
    assert any(f["code"] == code and f["field"] == field and words in f["message"] and f["severity"] == "error"
               for f in findings), findings
    admission = admission_verdict(yaml.safe_load(path.read_text()))
    assert not admission.allowed and f"{field}: " in admission.message and words in admission.message
    assert f"[{code}]" in admission.message


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize("typo", ["eagel3", "Eagle3", "eagle-3", "EAGLE_3"])
def test_a_typo_of_eagle3_gets_did_you_mean_in_every_release(version: str, typo: str) -> None:
    """Also under releases whose plugins may register methods, where an unknown name used to
    wait for a preflight of the image."""
    parsed = parse_object({"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "a"},
                           "spec": {"image": f"vllm/vllm-openai:v{version}", "target": {"model": "org/t"},
                                    "draft": {"method": typo, "model": "org/d", "numSpeculativeTokens": 3}}})
    (finding,) = parsed.findings
    assert parsed.spec is None and finding.code == "method-misspelled" and "did you mean eagle3?" in finding.message


@pytest.mark.parametrize(("name", "meant"), [("deepseek_mpt", "deepseek_mtp"), ("ngarm", "ngram"), ("mtp2", "mtp"),
                                             ("draft_modle", "draft_model")])
def test_a_near_miss_of_any_listed_name_or_alias_is_refused(name: str, meant: str) -> None:
    _, findings = parse_spec({"target": {"model": "org/t"}, "draft": {"method": name, "model": "org/d"}})
    assert [f.code for f in findings] == ["method-misspelled"] and f"did you mean {meant}" in findings[0].message


def test_a_plugin_method_far_from_every_listed_name_is_still_taken_under_its_own_name() -> None:
    spec, findings = parse_spec({"target": {"model": "org/t"}, "draft": {"method": "team_tree_drafter", "model": "org/d"}})
    assert spec is not None and not findings
    spec, findings = parse_spec({"target": {"model": "org/t"}, "draft": {"method": "eagle3", "model": "org/d"}})
    assert spec is not None and not findings  # a listed name is itself, never a typo of its neighbour eagle


@pytest.mark.parametrize("image", [
    "vllm/vllm-openai:v0.34.0", "docker.io/vllm/vllm-openai:v0.33.0-cu130", "localhost:5000/vllm", "[::1]:5000/team/vllm:dev",
    "Registry.Example.com:5000/vllm/vllm-openai:V0.34.0", f"vllm/vllm-openai@sha256:{HEX}", f"vllm/vllm-openai:v0.34.0@sha256:{HEX}",
    "nvcr.io/nvidia/vllm:25.09-py3", "a/b__c.d--e:_x", f"r.example/x@sha512:{HEX * 2}",
])
def test_references_the_kubelet_parses_are_taken(image: str) -> None:
    assert image_problem(image) is None


@pytest.mark.parametrize(("image", "words"), [
    ("ghcr.io/Org/img:1", "use 'ghcr.io/org/img:1'"), ("vllm//openai", "the repository must be lower-case"),
    ("vllm/x.:1", "the repository must be lower-case"), ("vllm/vllm-openai:" + "x" * 129, "the tag is 129 characters, at most 128"),
    ("vllm/vllm-openai:", "a tag is"), (f"vllm/vllm-openai@md5:{HEX}", "digest algorithm 'md5' is not one the kubelet knows"),
    (f"vllm/vllm-openai@sha256:{HEX.upper()}", "64 lower-case hex digits, got upper-case ones"),
    ("r.example/" + "a" * 300, "the name is 310 characters, at most 255"),
])
def test_references_the_kubelet_refuses_say_which_part_and_what_it_allows(image: str, words: str) -> None:
    problem = image_problem(image)
    assert problem is not None and words in problem and len(problem) <= 300


def test_gpu_findings_are_given_whatever_the_pair() -> None:
    """A deploy-time mistake is said beside the pair's own errors, not only once those are fixed."""
    evaluation = judge("meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3", "eagle3", k=3, tp=3,
                       resources={"gpu": {"product": "H100-80GB", "resourceName": "nvidia.com/gpus"}})
    codes = {f.code for f in evaluation.findings}
    assert {"target-heads-tp", "gpu-resource-misspelled"} <= codes and evaluation.plan is None


def test_a_resource_of_another_domain_is_the_users_own() -> None:
    """A MIG slice or another device plugin's resource is not second-guessed."""
    for resource in ("nvidia.com/mig-3g.40gb", "example.com/accelerator"):
        evaluation = judge("Qwen__Qwen3-8B", None, "ngram", k=3, resources={"gpu": {"product": "H100-80GB", "resourceName": resource}})
        assert evaluation.ok, evaluation.findings


@pytest.mark.parametrize(("arg", "code"), [("--max-num-seqs 256", "extra-arg-joined"), ("--not-a-flag 3", "extra-arg-unknown-flag")])
def test_a_flag_and_value_in_one_item_is_told_to_split_only_when_it_is_a_flag(arg: str, code: str) -> None:
    evaluation = judge("Qwen__Qwen3-8B", None, "ngram", k=3, vllm={"extraArgs": [arg]})
    assert [f.code for f in evaluation.findings if f.severity.value == "error"] == [code]


def test_a_gpu_typo_is_named_but_a_short_name_is_not_guessed() -> None:
    with pytest.raises(UnknownGpuError, match=r"did you mean MI300X-192GB\?"):
        lookup_gpu("MI300X-192G")
    with pytest.raises(UnknownGpuError, match="use one of A100-40GB"):  # T4 is a GPU of its own, not a typo of L4
        lookup_gpu("T4")


SPEC = {"target": {"model": "org/t"}, "draft": {"method": "ngram"}}


@pytest.mark.parametrize(("part", "field", "words"), [
    ({"parallelism": {"tensorParallelSize": "8"}}, "spec.parallelism.tensorParallelSize",
     "must be 'auto' or an integer, got string \"8\" (write 8 without quotes)"),
    ({"serving": {"kvCacheDtype": "fp9"}}, "spec.serving.kvCacheDtype", "must be one of 'auto', 'bfloat16', 'fp8'"),
    ({"resources": {"cpu": "2 cores"}}, "spec.resources.cpu", "must be a Kubernetes quantity like 500m, 4 or 16Gi"),
    ({"vllmVersion": "0.34"}, "spec.vllmVersion", f"must be a vLLM release X.Y.Z, e.g. {DEFAULT_VERSION}, got string \"0.34\""),
    ({"replicas": -1}, "spec.replicas", "must be at least 0, got integer -1"),
    ({"vllm": {"extraArgs": ["-x"] * 65}}, "spec.vllm.extraArgs", "must be at most 64 items, got array"),
    ({"serving": "x"}, "spec.serving", "must be a mapping, got string \"x\""),
    ({"rollout": {"maxSurge": [1]}}, "spec.rollout.maxSurge", "must be an integer or a string, got array"),
    ({"target": {"model": "org/t", "trustRemoteCode": "true"}}, "spec.target.trustRemoteCode",
     "must be a boolean (true or false), got string \"true\" (write true without quotes)"),
    ({"parallelism": {"tp": 2}}, "spec.parallelism.tp", "unknown field 'tp': spec.parallelism has tensorParallelSize, pipelineParallelSize"),
    ({"replica": 2}, "spec.replica", "unknown field 'replica': did you mean replicas?"),
])
def test_schema_errors_name_what_is_allowed_and_what_was_written(part: dict[str, Any], field: str, words: str) -> None:
    _, findings = parse_spec({**SPEC, **part})
    assert [f.field for f in findings] == [field] and words in findings[0].message, findings
    assert not not_in_our_words([f.message for f in findings])


def test_a_tp_the_heads_refuse_is_one_short_line_not_one_per_layout_tried() -> None:
    """TP 3 with PP auto tried 16 layouts: the no-layout summary was 2,657 characters."""
    evaluation = judge("meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3", "eagle3", k=3, tp=3, pp="auto")
    (summary,) = [f for f in evaluation.findings if f.code == "no-layout"]
    assert summary.message.startswith("none of 16 layouts (TP x PP) is valid and fits: 3x1, 3x2, 3x3 and 13 more: target has 32")
    assert not not_in_our_words([f.message for f in evaluation.findings])
