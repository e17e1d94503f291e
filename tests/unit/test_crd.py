"""The generated CRD: no drift from the models, structural, CEL rules that mean what they say,
and every example accepted by the schema the apiserver would enforce."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any, Iterator

import celpy
import jsonschema
import kubernetes_validate
import pydantic
import pytest
import yaml

from specdeploy.api import crd as crd_mod
from specdeploy.api.spec import SpeculativeDeploymentSpec

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "specdeploy.io_speculativedeployments.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _schema() -> dict[str, Any]:
    return crd_mod.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_crd_file_matches_the_models() -> None:
    assert CRD_FILE.read_text() == crd_mod.crd_yaml(), (
        "crds/ drifted from api/: run `make crd` (specdeploy crd > crds/specdeploy.io_speculativedeployments.yaml)"
    )


@pytest.mark.parametrize("version", ["1.31.0", "1.35.0"])
def test_crd_object_is_a_valid_apiextensions_v1_crd(version: str) -> None:
    kubernetes_validate.validate(yaml.safe_load(CRD_FILE.read_text()), version, strict=True)


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}[*]")
    if "items" in node:
        yield from _walk(node["items"], f"{path}[]")


FORBIDDEN = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "nullable", "title", "default", "const"}


def test_schema_is_structural() -> None:
    nodes = list(_walk(_schema()))
    assert len(nodes) > 60
    for path, node in nodes:
        assert not FORBIDDEN & node.keys(), f"{path}: {FORBIDDEN & node.keys()}"
        special = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        assert "type" in node or special, f"{path}: no type"
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "object" and path not in (".metadata",):
            assert "properties" in node or "additionalProperties" in node or node.get(
                "x-kubernetes-preserve-unknown-fields"
            ), f"{path}: object without a shape"
        if node.get("exclusiveMinimum") is not None:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path


def test_metadata_is_not_restricted() -> None:
    assert _schema()["properties"]["metadata"] == {"type": "object"}


def test_every_field_is_described_and_bounded() -> None:
    for path, node in _walk(_schema()):
        if path.endswith("[]") or path.endswith("[*]") or path == ".metadata":
            continue
        assert node.get("description"), f"{path}: no description (kubectl explain shows nothing)"
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path}: unbounded list"
        if node.get("type") == "string" and "enum" not in node and path.startswith(".spec"):
            assert "maxLength" in node, f"{path}: unbounded string"


def test_optional_fields_are_absent_not_nullable() -> None:
    spec = _schema()["properties"]["spec"]
    assert spec["required"] == ["target", "draft"]
    revision = spec["properties"]["target"]["properties"]["revision"]
    assert revision == {"type": "string", "description": revision["description"], "maxLength": 128}


def test_int_or_string_fields() -> None:
    props = _schema()["properties"]["spec"]["properties"]
    for node in (
        props["parallelism"]["properties"]["tensorParallelSize"],
        props["draft"]["properties"]["tensorParallelSize"],
        props["draft"]["properties"]["numSpeculativeTokens"],
        props["rollout"]["properties"]["maxSurge"],
    ):
        assert node["x-kubernetes-int-or-string"] is True
        assert node["x-kubernetes-validations"]
    assert "Default: auto." in props["parallelism"]["properties"]["tensorParallelSize"]["description"]


def test_subresources_and_printer_columns() -> None:
    version = crd_mod.crd()["spec"]["versions"][0]
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names[:5] == ["Method", "TP", "Draft-TP", "Replicas", "Ready"] and names[-1] == "Age"
    status = _schema()["properties"]["status"]["properties"]
    for column in version["additionalPrinterColumns"]:
        first = column["jsonPath"].split(".")[1:3]
        if first[0] == "status":
            assert first[1].split("[")[0] in status, column


def test_unknown_cel_path_is_refused() -> None:
    with pytest.raises(crd_mod.SchemaConversionError, match="unknown paths"):
        crd_mod.structural(SpeculativeDeploymentSpec.model_json_schema(by_alias=True), rules={"nope.x": []})


# ---- CEL rules, evaluated offline -------------------------------------------------------------

_ENV = celpy.Environment()


@functools.cache
def _program(rule: str) -> Any:
    return _ENV.program(_ENV.compile(rule))


def _cel_ok(rules: list[dict[str, str]], value: Any) -> bool:
    activation = {"self": celpy.json_to_cel(value)}
    return all(bool(_program(r["rule"]).evaluate(activation)) for r in rules)


BASE = {"target": {"model": "org/target", "config": {"model_type": "llama"}}, "draft": {"method": "ngram"}}
DRAFT = {"method": "eagle3", "model": "org/draft"}

# (path, value, valid, does pydantic enforce the same rule?) -- it must, for every rule: what
# the API server refuses, `specdeploy plan` refuses.
CEL_SAMPLES = [
    ("parallelism.tensorParallelSize", 8, True, True),
    ("parallelism.tensorParallelSize", "auto", True, True),
    ("parallelism.tensorParallelSize", 0, False, True),
    ("parallelism.tensorParallelSize", "eight", False, True),
    ("parallelism.pipelineParallelSize", 2, True, True),
    ("parallelism.pipelineParallelSize", -1, False, True),
    ("draft.tensorParallelSize", 1, True, True),
    ("draft.tensorParallelSize", "Auto", False, True),
    ("draft.numSpeculativeTokens", 4, True, True),
    ("draft.numSpeculativeTokens", "auto", True, True),
    ("draft.numSpeculativeTokens", 0, False, True),
    ("draft.numSpeculativeTokens", 65, False, True),
    ("draft.numSpeculativeTokens", "four", False, True),
    ("target", {"model": "a/b", "config": {}}, True, True),
    ("target", {"model": "a/b", "config": {}, "configMapRef": {"name": "c"}}, False, True),
    ("draft", {**DRAFT, "configMapRef": {"name": "c"}}, True, True),
    ("draft", {**DRAFT, "config": {}, "configMapRef": {"name": "c"}}, False, True),
    ("target.model", "moonshotai/Kimi-K3", True, True),
    ("target.model", "moonshotai/Kimi K3", False, True),
    ("draft.model", "org/draft", True, True),
    # a name the table does not know may be a plugin's: the schema bounds its shape only
    ("draft.method", "my_plugin_method2", True, True),
    ("draft.method", "My Plugin", False, True),
    ("draft.method", "2fast", False, True),
    ("draft", {"method": "my_plugin_method"}, True, True),
    ("draft", {"method": "my_plugin_method", "model": "org/draft"}, True, True),
    ("draft.model", "org/draft\n", False, True),
    ("image", "vllm/vllm-openai:v0.32.0", True, True),
    ("image", "", False, True),
    ("resources.gpu.resourceName", "nvidia.com/gpu", True, True),
    ("resources.gpu.resourceName", "amd.com/gpu", True, True),
    ("resources.gpu.resourceName", "gpu", False, True),
    ("rollout.maxSurge", 0, True, True),
    ("rollout.maxSurge", "25%", True, True),
    ("rollout.maxSurge", "25", False, True),
    ("rollout.maxUnavailable", 1, True, True),
    ("rollout.maxUnavailable", "one", False, True),
    ("rollout.maxUnavailable", -1, False, True),
    ("modelCache.sizeLimit", "200Gi", True, True),
    ("modelCache.sizeLimit", "1.5T", True, True),
    ("modelCache.sizeLimit", "lots", False, True),
    ("vllm.extraArgs[]", "--enable-prefix-caching", True, True),
    ("vllm.extraArgs[]", "", False, True),
    ("draft", {"method": "eagle3"}, False, True),
    ("draft", {"method": "mtp"}, True, True),
    ("draft", {"method": "dspark"}, True, True),
    ("draft", {"method": "ngram", "model": "org/draft"}, False, True),
    ("draft", {"method": "suffix", "config": {}}, False, True),
]


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    if path.startswith("draft") and path != "draft":
        doc["draft"] = copy.deepcopy(DRAFT)
    parts = path.split(".")
    node = doc
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    last = parts[-1]
    if last.endswith("[]"):
        node[last[:-2]] = [value]
    else:
        node[last] = value
    return doc


def test_a_hostile_method_name_is_refused_by_the_schema_with_the_field_named() -> None:
    """10 kB: over maxLength for the API server (which then never runs the CEL rule) and pydantic."""
    hostile = _set(BASE, "draft.method", "x" * 10_000)
    assert _schema_accepts(hostile, with_cel=False) is False
    with pytest.raises(pydantic.ValidationError) as refused:
        SpeculativeDeploymentSpec.model_validate(hostile)
    assert refused.value.errors()[0]["loc"][:2] == ("draft", "method")


@pytest.mark.parametrize(("path", "value", "valid", "pydantic_too"), CEL_SAMPLES)
def test_cel_rule(path: str, value: Any, valid: bool, pydantic_too: bool) -> None:
    assert _cel_ok(crd_mod.CEL_RULES[path], value) is valid
    assert _schema_accepts(_set(BASE, path, value), with_cel=True) is valid
    if pydantic_too:
        try:
            SpeculativeDeploymentSpec.model_validate(_set(BASE, path, value))
            parsed = True
        except pydantic.ValidationError:
            parsed = False
        assert parsed is valid, "the CRD and the operator's parser disagree"


def test_every_cel_rule_has_good_and_bad_samples() -> None:
    for path in crd_mod.CEL_RULES:
        verdicts = {valid for p, _, valid, _ in CEL_SAMPLES if p == path}
        assert verdicts == {True, False}, path


# ---- the schema as the apiserver would enforce it (jsonschema + CEL) --------------------------


def _to_jsonschema(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI v3.0 structural schema -> Draft 4, closing objects the apiserver would prune
    (strict field validation rejects unknown fields rather than dropping them)."""
    out = {k: v for k, v in node.items() if not k.startswith("x-kubernetes") and k not in ("properties", "items", "additionalProperties", "format")}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if "properties" in node:
        out["properties"] = {k: _to_jsonschema(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _to_jsonschema(node["additionalProperties"])
    if "items" in node:
        out["items"] = _to_jsonschema(node["items"])
    return out


def _cel_everywhere(schema: dict[str, Any], value: Any) -> bool:
    if "x-kubernetes-validations" in schema and not _cel_ok(schema["x-kubernetes-validations"], value):
        return False
    if isinstance(value, dict):
        for key, sub in value.items():
            child = schema.get("properties", {}).get(key)
            if child is None and isinstance(schema.get("additionalProperties"), dict):
                child = schema["additionalProperties"]
            if child is not None and not _cel_everywhere(child, sub):
                return False
    if isinstance(value, list) and "items" in schema:
        return all(_cel_everywhere(schema["items"], v) for v in value)
    return True


def _schema_accepts(spec: dict[str, Any], *, with_cel: bool) -> bool:
    spec_schema = _schema()["properties"]["spec"]
    try:
        jsonschema.Draft4Validator(_to_jsonschema(spec_schema)).validate(spec)
    except jsonschema.ValidationError:
        return False
    return _cel_everywhere(spec_schema, spec) if with_cel else True


def test_schema_rejects_unknown_and_mistyped_fields() -> None:
    assert _schema_accepts(BASE, with_cel=True)
    assert not _schema_accepts({**BASE, "replica": 2}, with_cel=True)
    assert not _schema_accepts({**BASE, "replicas": "2"}, with_cel=True)
    assert not _schema_accepts({"target": BASE["target"]}, with_cel=True)
    assert not _schema_accepts(_set(BASE, "resources.gpu.memoryGiB", 0), with_cel=True)


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 6, [p.name for p in EXAMPLES]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_accepted_by_the_crd_and_the_parser(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    sds = [d for d in docs if d.get("kind") == "SpeculativeDeployment"]
    assert sds, f"{path.name}: no SpeculativeDeployment"
    full = _to_jsonschema(_schema())
    for doc in sds:
        assert doc["apiVersion"] == "specdeploy.io/v1alpha1"
        jsonschema.Draft4Validator(full).validate(doc)
        assert _cel_everywhere(_schema()["properties"]["spec"], doc["spec"])
        SpeculativeDeploymentSpec.model_validate(doc["spec"])
