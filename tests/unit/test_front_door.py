"""What a newcomer meets first: `specdeploy plan -f` refuses what the API server would, judges
a whole GitOps stream in one report, and answers hostile input with a message, not a traceback.

tests/fixtures/bad-crs/ is a corpus of CRs the API server (or the operator) refuses, one shape
each: wrong apiVersion/kind, names, lax types, CEL rules, hostile YAML, missing configs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy import cli
from specdeploy.cli import common as cli_common
from tests.conftest import not_in_our_words

ROOT = Path(__file__).resolve().parents[2]
BAD = sorted((ROOT / "tests" / "fixtures" / "bad-crs").glob("*.yaml"))
EXAMPLES = ROOT / "examples"


def plan(capsys: pytest.CaptureFixture[str], path: Path | str, *extra: str) -> tuple[int, str, str]:
    code = cli.main(["plan", "-f", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a Hub repo id never waits on the network here
    monkeypatch.setattr(cli_common, "_HUB_LOCAL_ONLY", None)


def test_the_corpus_is_large() -> None:
    assert len(BAD) >= 50


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_each_bad_cr_is_refused_with_a_message(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    for output in ("json", "text"):
        code, out, err = plan(capsys, path, "-o", output)
        assert code in (1, 2), (code, out, err)
        assert "Traceback" not in out + err and "internal error" not in err, err
        if output == "json":
            data = json.loads(out)  # always valid JSON (never NaN), on every failure
            assert data["ok"] is False
            messages = [f["message"] for r in data.get("results", []) for f in r["findings"] if f["severity"] == "error"]
            assert messages or data["error"]["message"], data
            # Every finding in our words (never pydantic's) and short enough for an Event.
            assert not not_in_our_words([f["message"] for r in data.get("results", []) for f in r["findings"]])
        else:
            assert (err if code == 2 else out).strip()


@pytest.mark.parametrize(("name", "field", "words"), [
    ("api-version-v9", "apiVersion", "specdeploy.io/v1alpha1"),
    ("name-bad-chars", "metadata.name", "DNS-1123"),
    ("name-300-chars", "metadata.name", "at most 253"),
    ("name-upper", "metadata.name", "DNS-1123"),
    ("metadata-labels-list", "metadata.labels", "a mapping of strings to strings, got array"),
    ("metadata-unknown-field", "metadata.status", "unknown field 'status': metadata has name,"),
    ("replicas-string", "spec.replicas", "integer"),
    ("trust-remote-code-off-string", "spec.target.trustRemoteCode", "boolean"),
    ("max-model-len-padded", "spec.serving.maxModelLen", "integer"),
    ("image-empty", "spec.image", "empty"),
    ("size-limit-words", "spec.modelCache.sizeLimit", "quantity"),
    ("resource-name-bare", "spec.resources.gpu.resourceName", "nvidia.com/gpu"),
    ("model-whitespace", "spec.target.model", "whitespace"),
    ("draft-model-missing", "spec.draft", "needs draft.model"),
    ("method-name-hostile", "spec.draft.method", "must be a method name"),
    ("method-unknown", "spec.draft.method", "lets no plugin register one: the pod would exit at start-up. It has eagle, eagle3"),
])
def test_refusals_name_the_field(capsys: pytest.CaptureFixture[str], name: str, field: str, words: str) -> None:
    code, out, _ = plan(capsys, BAD[[p.stem for p in BAD].index(name)], "-o", "json")
    findings = json.loads(out)["results"][0]["findings"]
    assert code == 1
    assert any(f["field"] == field and words in f["message"] for f in findings), findings


@pytest.mark.parametrize(("name", "words"), [
    ("deep-nesting-5000", "nest"), ("deep-block-nesting", "deeper than"), ("alias-bomb", "alias"),
    ("duplicate-key", "duplicate key 'replicas'"), ("namespace-nan", "nan"), ("python-tag", "python/object"),
    ("invalid-utf8", "cannot read"), ("empty", "no SpeculativeDeployment"),
    ("alias-recursive", "alias *spec refers to a node that contains it"), ("integer-5000-digits", "a number of 5000 characters"),
])
def test_hostile_yaml_is_a_usage_error_saying_why(capsys: pytest.CaptureFixture[str], name: str, words: str) -> None:
    code, out, err = plan(capsys, BAD[[p.stem for p in BAD].index(name)], "-o", "json")
    assert code == 2 and words in err and words in json.loads(out)["error"]["message"]


def _stream(*documents: str) -> str:
    return "\n---\n".join(documents)


def test_a_kustomize_stream_with_one_invalid_cr_is_one_report_exit_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """What `kustomize build` prints: a Namespace, ConfigMaps and several CRs, one of them invalid."""
    draft = (ROOT / "tests" / "fixtures" / "model-configs" / "specforge__llama3-8B-eagle3.json").read_text()
    bad = yaml.safe_load((EXAMPLES / "qwen3-8b-ngram.yaml").read_text())
    bad["metadata"]["name"], bad["spec"]["parallelism"] = "qwen3-tp5", {"tensorParallelSize": 5}
    stream = tmp_path / "build.yaml"
    stream.write_text(_stream(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}",
        (EXAMPLES / "llama-3.1-70b-eagle3.yaml").read_text(),
        json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "llama-70b-eagle3-draft"}, "data": {"config.json": draft}}),
        (EXAMPLES / "qwen3-8b-ngram.yaml").read_text(),
        yaml.safe_dump(bad),
        (EXAMPLES / "deepseek-v3-mtp.yaml").read_text(),
    ))
    code, out, _ = plan(capsys, stream, "-o", "json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    verdicts = {r["name"]: r["verdict"] for r in report["results"]}
    assert verdicts == {"llama-70b-eagle3": "valid", "qwen3-8b-ngram": "valid", "qwen3-tp5": "invalid", "deepseek-v3-mtp": "valid"}
    assert report["skipped"] == ["Namespace/default"]
    invalid = next(r for r in report["results"] if r["name"] == "qwen3-tp5")
    assert invalid["manifests"] == [] and any(f["field"] == "spec.parallelism.tensorParallelSize" for f in invalid["findings"])
    code, text, _ = plan(capsys, stream, "-o", "text")
    assert code == 1 and "default/qwen3-tp5: INVALID" in text and "4 SpeculativeDeployment(s), 3 valid, 1 invalid" in text
    code, manifests, _ = plan(capsys, stream)  # yaml: the report as comments, then the valid objects' manifests
    kinds = [d["kind"] for d in yaml.safe_load_all(manifests) if d]
    assert code == 1 and kinds.count("Deployment") == 3 and "# summary: 4 SpeculativeDeployment(s), 3 valid, 1 invalid" in manifests


def test_every_example_in_one_stream_is_valid_or_names_its_missing_configmap(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    stream = tmp_path / "all.yaml"
    stream.write_text(_stream(*(p.read_text() for p in sorted(EXAMPLES.glob("*.yaml")))))
    code, out, err = plan(capsys, stream, "-o", "json")
    verdicts = {r["name"]: r["verdict"] for r in json.loads(out)["results"]}
    assert code == 2 and verdicts.pop("llama-70b-eagle3") == "unjudged" and set(verdicts.values()) == {"valid"}
    assert "llama-70b-eagle3-draft" in err


def test_namespace_flag_places_every_object(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plan(capsys, EXAMPLES / "qwen3-8b-ngram.yaml", "-o", "json", "-n", "team-a")
    result = json.loads(out)["results"][0]
    assert code == 0 and result["namespace"] == "team-a"
    assert {m["metadata"]["namespace"] for m in result["manifests"]} == {"team-a"}


def test_hub_repo_offline_fails_fast_with_the_flag_and_the_way_out(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["validate", "--target", "meta-llama/Llama-3.1-8B", "--method", "ngram", "-o", "json"])
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert code == 2 and error["field"] == "--target"
    assert "HF_HUB_OFFLINE" in error["message"] and "local config.json" in error["message"] and "ConfigMap" in error["message"]


def test_unknown_gpu_is_a_usage_error_listing_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["validate", "--target", "x.json", "--method", "ngram", "--gpu", "H900"])
    assert exit_.value.code == 2 and "H100-80GB" in capsys.readouterr().err


@pytest.mark.parametrize("output", ["json", "yaml", "text"])
def test_every_command_takes_every_output(capsys: pytest.CaptureFixture[str], output: str) -> None:
    k3 = str(ROOT / "tests" / "fixtures" / "model-configs" / "moonshotai__Kimi-K3.json")
    assert cli.main(["validate", "--target", k3, "--method", "mtp", "--tp", "8", "-o", output]) in (0, 1)
    validate_out = capsys.readouterr().out
    assert cli.main(["plan", "-f", str(EXAMPLES / "qwen3-8b-ngram.yaml"), "-o", output]) == 0
    plan_out = capsys.readouterr().out
    assert cli.main(["crd", "-o", output]) == 0
    crd_out = capsys.readouterr().out
    if output == "json":
        assert "ok" in json.loads(validate_out) and json.loads(plan_out)["ok"] and json.loads(crd_out)["kind"] == "CustomResourceDefinition"
    elif output == "yaml":
        assert "ok" in yaml.safe_load(validate_out) and yaml.safe_load(crd_out)["kind"] == "CustomResourceDefinition"
    else:
        assert validate_out.split()[0] in ("VALID", "INVALID") and "qwen3-8b-ngram: VALID" in plan_out


def test_version_and_every_help_say_what_they_do() -> None:
    """One real process: the console script as a user runs it."""
    exe = [sys.executable, "-m", "specdeploy.cli"]
    version = subprocess.run([*exe, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("specdeploy ")
    helps = {c: subprocess.run([*exe, c, "--help"], capture_output=True, text=True, timeout=60) for c in ("validate", "plan", "advise", "crd", "run")}
    for command, result in helps.items():
        assert result.returncode == 0 and "-o" in result.stdout, command
        description = result.stdout.split("\n\n")[1]
        assert len(description.split()) >= 10, (command, description)


@pytest.mark.parametrize(("name", "code", "verdict"), [
    ("api-version-v9", "object-invalid", "invalid"),
    ("metadata-unknown-field", "object-invalid", "invalid"),
    ("replicas-string", "spec-invalid", "invalid"),
    ("configmap-not-json", "config-invalid", "invalid"),
    ("configmap-missing", "config-unavailable", "unjudged"),
    ("hub-repo-offline", "config-unavailable", "unjudged"),
])
def test_each_stream_finding_code_is_reached(capsys: pytest.CaptureFixture[str], name: str, code: str, verdict: str) -> None:
    exit_code, out, _ = plan(capsys, BAD[[p.stem for p in BAD].index(name)], "-o", "json")
    (result,) = json.loads(out)["results"]
    assert result["verdict"] == verdict and exit_code == (1 if verdict == "invalid" else 2)
    assert code in {f["code"] for f in result["findings"]}


@pytest.mark.parametrize(("model", "words"), [
    ("/proc/self/mem", "cannot read /proc/self/mem"),  # a file that exists but cannot be read
    ("a" * 300, "neither a path nor a Hub repo id"),  # too long for a file name, and for a repo id
    ("a\x00b", "neither a path nor a Hub repo id"),  # a NUL byte
    ("a/b/c", "neither a path nor a Hub repo id"),
    ("/dev/null", "has no config.json"),
])
def test_a_model_that_is_no_readable_path_nor_a_repo_id_is_refused_by_name(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                          model: str, words: str) -> None:
    path = tmp_path / "sd.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "x"},
                                    "spec": {"target": {"model": model}, "draft": {"method": "ngram", "numSpeculativeTokens": 3}}}))
    code, out, err = plan(capsys, path, "-o", "json")
    findings = json.loads(out)["results"][0]["findings"]
    assert code == 1, err
    assert [f["field"] for f in findings] == ["spec.target.model"] and words in findings[0]["message"], findings


def test_a_document_with_thousands_of_wrong_values_reports_the_first_and_a_count(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "sd.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "x"},
                                    "spec": {"target": {"model": "a/b"}, "draft": {"method": "ngram"},
                                             "scheduling": {"nodeSelector": {f"k{i}": i for i in range(5000)}}}}))
    code, out, _ = plan(capsys, path, "-o", "json")
    findings = json.loads(out)["results"][0]["findings"]
    assert code == 1 and len(findings) == 50
    assert findings[0]["field"] == "spec.scheduling.nodeSelector.k0" and findings[-1]["message"].startswith("4951 more error(s) like these, not shown: at spec.scheduling.nodeSelector.k")


@pytest.mark.parametrize(("part", "key", "field", "words"), [
    ("target", "weightsGiB", "spec.target.weightsGiB", "must be at most 1048576, got"),
    ("resources", "gpu", "spec.resources.gpu.memoryGiB", "must be at most 16384, got"),
])
def test_sizes_that_would_overflow_the_memory_arithmetic_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                     part: str, key: str, field: str, words: str) -> None:
    doc = yaml.safe_load((EXAMPLES / "qwen3-8b-ngram.yaml").read_text())
    doc["spec"][part][key] = {"product": "H100-80GB", "memoryGiB": 1e308} if key == "gpu" else 1e308
    path = tmp_path / "sd.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, _ = plan(capsys, path, "-o", "json")
    findings = json.loads(out)["results"][0]["findings"]
    assert code == 1 and any(f["field"] == field and words in f["message"] for f in findings), findings


def test_the_items_of_a_list_are_judged_as_kubectl_apply_applies_them(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`kubectl get -o yaml` prints a v1 List; its SpeculativeDeployments and ConfigMaps count."""
    cr = yaml.safe_load((EXAMPLES / "qwen3-8b-ngram.yaml").read_text())
    config = cr["spec"]["target"].pop("config")
    cr["spec"]["target"]["configMapRef"] = {"name": "qwen3-config"}
    bad = {**cr, "metadata": {"name": "bad"}, "spec": {**cr["spec"], "replicas": "2"}}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "qwen3-config"}, "data": {"config.json": json.dumps(config)}}
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [cr, bad, configmap]}))
    code, out, _ = plan(capsys, path, "-o", "json")
    results = {r["name"]: r for r in json.loads(out)["results"]}
    assert code == 1 and results[cr["metadata"]["name"]]["verdict"] == "valid"
    assert [f["field"] for f in results["bad"]["findings"]] == ["spec.replicas"]


@pytest.mark.parametrize("part, key, value, field", [
    ("draft", "rope_scaling", 5, "spec.draft.config.rope_scaling"),
    ("draft", "rope_parameters", [1], "spec.draft.config.rope_parameters"),
    ("target", "text_config", {"dtype": "x"}, "spec.target.config.text_config.dtype"),
    ("target", "torch_dtype", "bf16", "spec.target.config.torch_dtype"),
    ("draft", "to_dict", 5, "spec.draft.config.to_dict"),
])
def test_a_config_value_transformers_cannot_build_is_a_refusal_naming_the_key(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, part: str, key: str, value: object, field: str) -> None:
    """Not exit 2 "internal error" (transformers' to_dict() IndexError) nor a finding naming only the config."""
    doc = yaml.safe_load((EXAMPLES / "llama-3.1-8b-eagle3.yaml").read_text())
    doc["spec"][part]["config"][key] = value
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = plan(capsys, path, "-o", "json")
    assert code == 1, (code, err)
    errors = [f for f in json.loads(out)["results"][0]["findings"] if f["severity"] == "error"]
    assert [f["field"] for f in errors] == [field], errors
    assert errors[0]["code"] == "config-value-invalid"


def plan_example(capsys: pytest.CaptureFixture[str], tmp_path: Path, change: Any) -> tuple[int, dict[str, Any]]:
    """`plan -o json` of the qwen3 ngram example after `change(doc)`: (exit code, its one result)."""
    doc = yaml.safe_load((EXAMPLES / "qwen3-8b-ngram.yaml").read_text())
    change(doc)
    path = tmp_path / "sd.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, _ = plan(capsys, path, "-o", "json")
    (result,) = json.loads(out)["results"]
    return code, result


@pytest.mark.parametrize("name", ["a" * 60, "b" * 63, "c" * 64, "d." * 126 + "d", "9-starts-with-a-digit", "x.y"])
def test_every_name_the_api_server_takes_is_planned_with_valid_child_names(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                          name: str) -> None:
    """DNS-1123 subdomains up to 253 characters: the children's names and labels are cut
    short with a hash where they must be DNS-1035 labels of 63 (Services, workloads)."""
    from specdeploy.render import invalid_names

    code, result = plan_example(capsys, tmp_path, lambda doc: doc["metadata"].update(name=name))
    assert code == 0 and result["verdict"] == "valid", result["findings"]
    assert result["manifests"] and invalid_names(result["manifests"]) == []


def test_an_object_over_the_api_servers_request_limit_is_refused_naming_its_largest_part(capsys: pytest.CaptureFixture[str],
                                                                                        tmp_path: Path) -> None:
    # 3.1 MiB: under our stream limit, over the API server's
    code, result = plan_example(capsys, tmp_path, lambda doc: doc["spec"]["target"]["config"].update(padding=["x" * 1000] * 3200))
    (finding,) = [f for f in result["findings"] if f["code"] == "object-too-large"]
    assert code == 1 and finding["field"] == "spec.target" and "at most 3 MiB per object" in finding["message"]


@pytest.mark.parametrize(("scheduling", "field", "words"), [
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}}},
     "spec.scheduling.affinity", "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: must be a list, got string"),
    ({"affinity": {"foo": 1}}, "spec.scheduling.affinity", "foo: unknown field (a Kubernetes Affinity)"),
    ({"tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "tolerationSeconds": "x"}]},
     "spec.scheduling.tolerations", "[1].tolerationSeconds: must be an integer, got"),
    ({"nodeSelector": {"a b": "x"}}, "spec.scheduling.nodeSelector", "'a b' is not a label key"),
    ({"nodeSelector": {"gpu": "x" * 64}}, "spec.scheduling.nodeSelector", "is not a label value"),
    ({"priorityClassName": "Not_Valid"}, "spec.scheduling.priorityClassName", "not an object name"),
])
def test_pod_fields_a_spec_passes_through_are_checked_as_kubernetes_checks_them(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, scheduling: dict[str, object], field: str, words: str) -> None:
    """Accepted unchecked, these made Deployments the API server refuses (found by the fuzz
    suites' schema check of accepted documents' children)."""
    code, result = plan_example(capsys, tmp_path, lambda doc: doc["spec"].update(scheduling=scheduling))
    assert code == 1 and any(f["field"] == field and words in f["message"] for f in result["findings"]), result["findings"]


def test_valid_scheduling_fields_are_planned_into_the_pods(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    scheduling = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}]}}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"}, "priorityClassName": "gpu-high"}
    code, result = plan_example(capsys, tmp_path, lambda doc: doc["spec"].update(scheduling=scheduling))
    pod = result["manifests"][0]["spec"]["template"]["spec"]
    assert code == 0 and pod["tolerations"] == scheduling["tolerations"]
    # The user's term, and (scheduling.gpuNodeAffinity Required) the planned GPU's requirements with it.
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0] == {"key": "gpu", "operator": "In", "values": ["h100"]}
    assert [e["key"] for e in term["matchExpressions"][1:]] == ["nvidia.com/gpu.product"]
