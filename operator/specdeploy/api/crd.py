"""The CustomResourceDefinition, generated from the pydantic models in api/.

pydantic emits JSON Schema 2020-12; the apiserver wants a *structural* OpenAPI v3.0
schema. `structural()` converts one into the other: `$ref`s inlined, `Optional[X]` turned
into plain X (an absent field, not `nullable`), titles dropped, numeric exclusive bounds in
v3.0 form, `int | str` unions as `x-kubernetes-int-or-string`. Defaults stay in pydantic
(the operator is the one place that applies them) and are stated in each description so
`kubectl explain` shows them. CEL rules for what a single field can say live in
`CEL_RULES`, keyed by the field's path; the unit tests evaluate them offline and check that
they agree with pydantic's verdict on the same samples.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Iterable

import yaml

from specdeploy.api.spec import (
    API_GROUP,
    API_VERSION,
    KIND,
    METHOD_NAME_RE,
    METHOD_NAME_RULE,
    NO_SPACE_RE,
    PLURAL,
    QUANTITY_RE,
    RESOURCE_NAME_RE,
    SHORT_NAMES,
    SINGULAR,
    SpeculativeDeploymentSpec,
)
from specdeploy.api.status import SpeculativeDeploymentStatus
from specdeploy.vllm.methods import methods_where

Schema = dict[str, Any]


def _cel_string(text: str) -> str:
    """A regex as a CEL single-quoted string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in sorted(items)) + "]"


_INT_OR_AUTO = [{"rule": "type(self) == int ? self >= 1 : self == 'auto'", "message": "must be 'auto' or an integer >= 1"}]
_INT_OR_PERCENT = [{"rule": "type(self) == int ? self >= 0 : self.matches('^[0-9]+%$')", "message": "must be an integer >= 0 or a percentage like '25%'"}]
_NO_SPACE = {"rule": f"!self.matches({_cel_string(NO_SPACE_RE)})", "message": "must not contain whitespace"}
_NOT_EMPTY = {"rule": "self.size() > 0", "message": "must not be empty"}
_ONE_CONFIG_SOURCE = {"rule": "!(has(self.config) && has(self.configMapRef))", "message": "set at most one of config and configMapRef"}

# Path (dot-separated property names under the spec; `[]` for list items) -> CEL rules.
CEL_RULES: dict[str, list[dict[str, str]]] = {
    "target": [_ONE_CONFIG_SOURCE],
    "target.model": [_NO_SPACE],
    # Cross-field rules of DraftSpec._model_needed, so `kubectl apply` refuses them with no webhook.
    "draft": [
        _ONE_CONFIG_SOURCE,
        {"rule": f"!(self.method in {_cel_list(methods_where(draft='required'))}) || has(self.model)",
         "message": "this method needs draft.model (a Hub repo id or a path); only "
                    f"{', '.join(methods_where(False, draft='none') + methods_where(False, draft='optional'))} draft without one"},
        {"rule": f"!(self.method in {_cel_list(methods_where(draft='none'))}) || !(has(self.model) || has(self.config) || has(self.configMapRef))",
         "message": f"{', '.join(methods_where(draft='none'))} use no draft model: remove draft.model/config/configMapRef"},
    ],
    "draft.method": [{"rule": f"self.matches({_cel_string(METHOD_NAME_RE)})", "message": METHOD_NAME_RULE}],
    "draft.model": [_NO_SPACE],
    "draft.tensorParallelSize": _INT_OR_AUTO,
    "draft.numSpeculativeTokens": [{"rule": "type(self) == int ? self >= 1 && self <= 64 : self == 'auto'", "message": "must be 'auto' or an integer from 1 to 64"}],
    "parallelism.tensorParallelSize": _INT_OR_AUTO,
    "parallelism.pipelineParallelSize": _INT_OR_AUTO,
    "image": [_NOT_EMPTY, _NO_SPACE],
    "resources.gpu.resourceName": [{"rule": f"self.matches({_cel_string(RESOURCE_NAME_RE)})", "message": "must be an extended resource name like nvidia.com/gpu"}],
    "rollout.maxSurge": _INT_OR_PERCENT,
    "rollout.maxUnavailable": _INT_OR_PERCENT,
    "modelCache.sizeLimit": [{"rule": f"self.matches({_cel_string(QUANTITY_RE)})", "message": "must be a Kubernetes quantity like 200Gi"}],
    "vllm.extraArgs[]": [_NOT_EMPTY],
}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Method", "type": "string", "jsonPath": ".spec.draft.method", "description": "Speculative decoding method."},
    {"name": "TP", "type": "integer", "jsonPath": ".status.plan.tensorParallelSize", "description": "Planned target tensor parallel size."},
    {"name": "Draft-TP", "type": "integer", "jsonPath": ".status.plan.draftTensorParallelSize", "description": "Planned draft tensor parallel size."},
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "description": "Desired serving replicas."},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas", "description": "Replicas ready to serve."},
    {"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason", "priority": 1, "description": "Reason of the Ready condition."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

# Keys that carry no meaning for the apiserver (or are replaced below).
_DROPPED = {"title", "default", "additionalProperties", "$defs", "const"}


class SchemaConversionError(ValueError):
    """The models use a construct this converter does not map; fix the model, not the CRD."""


def _describe_default(out: Schema, node: Schema) -> None:
    """State the pydantic default in the description; the CRD itself defaults nothing."""
    if "default" not in node or node["default"] in (None, [], {}, ""):
        return
    text = out.get("description", "")
    shown = json.dumps(node["default"]) if not isinstance(node["default"], str) else node["default"]
    if "default" not in text.lower():
        out["description"] = f"{text.rstrip()} Default: {shown}.".strip()


class _Converter:
    def __init__(self, defs: dict[str, Schema], rules: dict[str, list[dict[str, str]]]):
        self.defs = defs
        self.rules = rules
        self.unused_rules = set(rules)

    def resolve(self, node: Schema) -> Schema:
        if "$ref" in node:
            merged = copy.deepcopy(self.defs[node["$ref"].rsplit("/", 1)[-1]])
            merged.update({k: v for k, v in node.items() if k != "$ref"})
            return merged
        return node

    def convert(self, node: Schema, path: str) -> Schema:
        out = self._convert(node, path)
        if path == "" and self.unused_rules:
            raise SchemaConversionError(f"CEL rules for unknown paths: {sorted(self.unused_rules)}")
        return out

    def _convert(self, node: Schema, path: str) -> Schema:
        node = self.resolve(node)
        if "anyOf" in node:
            return self._union(node, path)
        out = {k: v for k, v in node.items() if k not in _DROPPED}
        if "const" in node:
            out["enum"] = [node["const"]]
        if "exclusiveMinimum" in node:  # JSON Schema 2020-12 -> OpenAPI v3.0
            out["minimum"], out["exclusiveMinimum"] = node["exclusiveMinimum"], True
        if "exclusiveMaximum" in node:
            out["maximum"], out["exclusiveMaximum"] = node["exclusiveMaximum"], True
        _describe_default(out, node)
        kind = node.get("type")
        if kind == "object":
            props = node.get("properties")
            if props is not None:
                out["properties"] = {
                    name: self._convert(sub, f"{path}.{name}" if path else name) for name, sub in props.items()
                }
                if node.get("required"):
                    out["required"] = list(node["required"])
            elif isinstance(node.get("additionalProperties"), dict):  # dict[str, X]
                out["additionalProperties"] = self._convert(node["additionalProperties"], f"{path}[*]")
            elif not node.get("x-kubernetes-preserve-unknown-fields"):
                raise SchemaConversionError(f"{path}: a free-form object must be marked x-kubernetes-preserve-unknown-fields")
        elif kind == "array":
            out["items"] = self._convert(node["items"], f"{path}[]")
        elif kind is None and not node.get("x-kubernetes-preserve-unknown-fields"):
            raise SchemaConversionError(f"{path}: node has no type")
        return self._finish(out, path)

    def _union(self, node: Schema, path: str) -> Schema:
        branches = [self.resolve(b) for b in node["anyOf"] if b.get("type") != "null"]
        outer = {k: v for k, v in node.items() if k != "anyOf"}
        if len(branches) == 1:  # Optional[X]: an absent field, not a nullable one
            merged = {**branches[0], **{k: v for k, v in outer.items() if k != "description"}}
            merged["description"] = outer.get("description") or branches[0].get("description", "")
            return self._convert(merged, path)
        types = {b.get("type") for b in branches}
        if types != {"integer", "string"}:
            raise SchemaConversionError(f"{path or '<root>'}: union {types} has no structural form")
        out: Schema = {"x-kubernetes-int-or-string": True}  # IntOrAuto / IntOrPercent
        if "description" in outer:
            out["description"] = outer["description"]
        _describe_default(out, node)
        return self._finish(out, path)

    def _finish(self, out: Schema, path: str) -> Schema:
        if path in self.rules:
            out["x-kubernetes-validations"] = copy.deepcopy(self.rules[path])
            self.unused_rules.discard(path)
        rank = {key: i for i, key in enumerate(_KEY_ORDER)}
        return dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(rank))))


# Key order in the generated YAML: what a reader scans for first, nested structure last.
_KEY_ORDER = (
    "type", "description", "format", "enum", "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields", "minimum", "exclusiveMinimum", "maximum",
    "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
    "required", "properties", "additionalProperties", "items", "x-kubernetes-validations",
)


def structural(model_schema: Schema, rules: dict[str, list[dict[str, str]]] | None = None) -> Schema:
    """Convert a pydantic `model_json_schema(by_alias=True)` into a structural schema,
    attaching `rules` (default: CEL_RULES, the spec's) by path."""
    return _Converter(model_schema.get("$defs", {}), CEL_RULES if rules is None else rules).convert(model_schema, "")


def spec_schema() -> Schema:
    return structural(SpeculativeDeploymentSpec.model_json_schema(by_alias=True))


def status_schema() -> Schema:
    return structural(SpeculativeDeploymentStatus.model_json_schema(by_alias=True), rules={})


def openapi_schema() -> Schema:
    """The version's openAPIV3Schema: the whole object, spec required."""
    return {
        "type": "object",
        "description": f"{KIND} serves a model with vLLM and a speculative-decoding draft, checked against the target before any GPU is taken.",
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of this representation of the object."},
            "kind": {"type": "string", "description": "Kind of this REST resource."},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "required": ["spec"],
    }


def crd() -> dict[str, Any]:
    """The CRD object (apiextensions.k8s.io/v1)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["all", "specdeploy"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


HEADER = "# Generated by `specdeploy crd` from operator/specdeploy/api/ -- do not edit by hand.\n"


def crd_yaml() -> str:
    """The CRD as YAML, exactly what crds/specdeploy.io_speculativedeployments.yaml holds."""
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, width=100, allow_unicode=True)
