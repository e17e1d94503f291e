"""Parse a CR (or a bare spec) at the edge; pydantic errors become findings naming the field."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from specdeploy.api.errors import SPEC_INVALID, field_message, field_names, is_ours, unknown_field, user_loc
from specdeploy.api.names import DNS1123_LABEL_RE, DNS1123_SUBDOMAIN_RE, is_label_value, qualified_name_problem
from specdeploy.api.spec import API_GROUP, API_VERSION, KIND, PATTERN_WORDS, SpeculativeDeploymentSpec
from specdeploy.findings import Finding, Stage, error, json_type


def _spec_error(code: str, field: str, message: str) -> Finding:
    """Findings about the object itself: stage spec (the Validated condition)."""
    return error(code, field, message, Stage.SPEC)


def _field_path(loc: tuple[Any, ...]) -> str:
    path = "spec"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


# A document with 90,000 wrong values has 90,000 findings: report the first ones and a count
# (the output stays readable and small; the first fix shows the next batch).
MAX_FINDINGS = 50


def capped(findings: list[Finding]) -> list[Finding]:
    if len(findings) <= MAX_FINDINGS:
        return findings
    rest = findings[MAX_FINDINGS - 1:]
    fields = list(dict.fromkeys(f.field for f in rest))
    more = error(rest[0].code, rest[0].field, f"{len(rest)} more error(s) like these, not shown: at {', '.join(fields[:3])}"
                 f"{', ...' if len(fields) > 3 else ''}", rest[0].stage)
    return findings[: MAX_FINDINGS - 1] + [more]


def findings_from_validation_error(exc: ValidationError) -> list[Finding]:
    """pydantic's errors as findings in our words (api/errors.py): one per field."""
    by_field: dict[tuple[Any, ...], list[ErrorDetails]] = {}
    for item in exc.errors():
        by_field.setdefault(user_loc(item), []).append(item)
    findings = []
    for loc, items in by_field.items():
        findings += [_spec_error(code, _field_path(loc), message) for code, message in _field_errors(loc, items)]
    return capped(findings)


def _field_errors(loc: tuple[Any, ...], items: list[ErrorDetails]) -> list[tuple[str, str]]:
    """(code, message) for one field: our validators' words as they are, pydantic's rewritten."""
    said = [(i["type"] if is_ours(i) else SPEC_INVALID, i["msg"].removeprefix("Value error, "))
            for i in items if is_ours(i) or i["type"] == "value_error"]
    if said:
        return said
    kind = items[0]["type"]
    if kind == "missing":
        return [(SPEC_INVALID, "field required")]
    if kind == "extra_forbidden":
        where = _field_path(loc[:-1])
        return [(SPEC_INVALID, unknown_field(str(loc[-1]), field_names(SpeculativeDeploymentSpec, loc[:-1]), where))]
    return [(SPEC_INVALID, field_message(items, PATTERN_WORDS))]


def parse_spec(spec: dict[str, Any]) -> tuple[SpeculativeDeploymentSpec | None, list[Finding]]:
    try:
        return SpeculativeDeploymentSpec.model_validate(spec), []
    except ValidationError as exc:
        return None, findings_from_validation_error(exc)


def spec_of_document(document: dict[str, Any]) -> dict[str, Any]:
    """A full SpeculativeDeployment object, or just its spec."""
    object_keys = {"apiVersion", "kind", "metadata", "spec", "status"}
    if isinstance(document, dict) and "spec" in document and set(document) <= object_keys:
        return document["spec"] or {}
    return document


# --- whole objects, as `kubectl apply` sends them --------------------------------------------

OBJECT_KEYS = ("apiVersion", "kind", "metadata", "spec", "status")
# k8s.io/apiserver/pkg/server/config.go: MaxRequestBodyBytes, 3 MiB; one object is one request.
MAX_REQUEST_BYTES = 3 * 1024 * 1024
# k8s.io/apimachinery/pkg/api/validation/objectmeta.go: TotalAnnotationSizeLimitB.
MAX_ANNOTATIONS_BYTES = 256 * 1024
# ObjectMeta's fields (k8s.io/apimachinery/pkg/apis/meta/v1/types.go) and the JSON type of each:
# the API server's strict field validation (kubectl's default) refuses any other key.
_STRING, _INTEGER, _STRING_MAP, _LIST = "a string", "an integer", "a mapping of strings to strings", "a list"
METADATA_FIELDS: dict[str, str] = {
    "name": _STRING, "generateName": _STRING, "namespace": _STRING, "selfLink": _STRING, "uid": _STRING,
    "resourceVersion": _STRING, "generation": _INTEGER, "creationTimestamp": _STRING, "deletionTimestamp": _STRING,
    "deletionGracePeriodSeconds": _INTEGER, "labels": _STRING_MAP, "annotations": _STRING_MAP,
    "ownerReferences": _LIST, "finalizers": _LIST, "managedFields": _LIST,
}


@dataclass(frozen=True)
class ParsedObject:
    """One SpeculativeDeployment of a stream: where it is, its spec if it parses, and why not."""

    name: str
    namespace: str
    spec: SpeculativeDeploymentSpec | None
    findings: tuple[Finding, ...]


def _name_findings(field: str, value: Any, *, namespace: bool) -> list[Finding]:
    if not isinstance(value, str):
        return [_spec_error("object-invalid", field, f"must be a string, got {json_type(value)}")]
    limit, pattern, what = (63, DNS1123_LABEL_RE, "a DNS-1123 label") if namespace else (253, DNS1123_SUBDOMAIN_RE, "a DNS-1123 subdomain")
    if len(value) > limit:
        return [_spec_error("object-invalid", field, f"must be at most {limit} characters, got {len(value)}")]
    if not pattern.match(value):
        return [_spec_error("object-invalid", field, f"{value!r} is not {what}: lower-case letters, digits and '-'"
                      f"{'' if namespace else ' (and dots between labels)'}, starting and ending with a letter or digit")]
    return []  # every child name is made valid from it (render/labels.py: cut short plus a hash)


def _has_type(value: Any, kind: str) -> bool:
    if value is None:
        return True  # null: the field unset, as the API server reads it
    if kind == _STRING:
        return isinstance(value, str)
    if kind == _INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _STRING_MAP:
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    return isinstance(value, list)


def _map_findings(field: str, entries: dict[str, str], *, labels: bool) -> list[Finding]:
    findings = []
    for key, value in entries.items():
        why = qualified_name_problem(key)
        if why:
            findings.append(_spec_error("object-invalid", f"{field}.{key}", f"{key!r} is not a valid key: {why}"))
        elif labels and not is_label_value(value):
            findings.append(_spec_error("object-invalid", f"{field}.{key}", f"{value[:80]!r} is not a label value: at most 63 characters "
                                        "of letters, digits, '-', '_' and '.', starting and ending with a letter or digit (or empty)"))
    if not labels and sum(len(k) + len(v) for k, v in entries.items()) > MAX_ANNOTATIONS_BYTES:
        findings.append(_spec_error("object-invalid", field, f"annotations hold at most {MAX_ANNOTATIONS_BYTES // 1024} KiB in all"))
    return findings


def metadata_findings(metadata: dict[str, Any]) -> list[Finding]:
    """The metadata as the API server validates it: known fields only (strict field
    validation), each of its type, label and annotation keys and values. The name and
    namespace have their own rules (`_name_findings`)."""
    findings = []
    for key, value in metadata.items():
        kind = METADATA_FIELDS.get(key)
        if kind is None:
            findings.append(_spec_error("object-invalid", f"metadata.{key}", f"unknown field {key!r}: metadata has {', '.join(METADATA_FIELDS)}"))
        elif key not in ("name", "namespace") and not _has_type(value, kind):
            findings.append(_spec_error("object-invalid", f"metadata.{key}", f"must be {kind}, got {json_type(value)}"))
        elif key in ("labels", "annotations") and value:
            findings += _map_findings(f"metadata.{key}", value, labels=key == "labels")
    return findings


def size_findings(document: dict[str, Any]) -> list[Finding]:
    """An object over the API server's request limit, naming its largest part of the spec."""
    size = _json_size(document)
    if size <= MAX_REQUEST_BYTES:
        return []
    spec = document.get("spec") if isinstance(document.get("spec"), dict) else {}
    parts = {f"spec.{k}": _json_size(v) for k, v in spec.items()}
    largest = max(parts, key=parts.__getitem__, default="spec")
    return [_spec_error("object-too-large", largest, f"the object is {size / 2**20:.1f} MiB as JSON, {largest} {parts.get(largest, 0) / 2**20:.1f} MiB "
                        f"of it; the API server takes at most {MAX_REQUEST_BYTES // 2**20} MiB per object: move large configs to ConfigMaps")]


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def envelope_findings(document: dict[str, Any]) -> list[Finding]:
    """apiVersion, kind and the top-level keys, as the API server checks them."""
    expected = f"{API_GROUP}/{API_VERSION}"
    findings = []
    if document.get("apiVersion") != expected:
        findings.append(_spec_error("object-invalid", "apiVersion", f"must be {expected}, got {document.get('apiVersion')!r}"))
    if document.get("kind") != KIND:
        findings.append(_spec_error("object-invalid", "kind", f"must be {KIND}, got {document.get('kind')!r}"))
    for key in document:
        if key not in OBJECT_KEYS:
            findings.append(_spec_error("object-invalid", str(key), f"unknown field {key!r}: an object has {', '.join(OBJECT_KEYS)}"))
    if not isinstance(document.get("spec"), dict):
        findings.append(_spec_error("spec-invalid", "spec", "field required: a mapping with target and draft"))
    return findings


def is_bare_spec(document: Any) -> bool:
    """The CLI's shorthands, which no one would `kubectl apply`: a spec on its own, or a
    document holding only `spec:`. Anything with apiVersion, kind or metadata is an object."""
    return isinstance(document, dict) and (not set(document) & set(OBJECT_KEYS) or set(document) == {"spec"})


def parse_object(document: Any, *, default_namespace: str = "default", namespace_override: str | None = None) -> ParsedObject:
    """Judge one document of a stream the way the API server and then the operator would."""
    if not isinstance(document, dict):
        return ParsedObject("", default_namespace, None, (_spec_error("object-invalid", "", f"a document must be a mapping, got {json_type(document)}"),))
    if is_bare_spec(document):
        spec, findings = parse_spec(spec_of_document(document))
        return ParsedObject("specdeploy", namespace_override or default_namespace, spec, tuple(findings))
    findings = envelope_findings(document) + size_findings(document)
    metadata = document.get("metadata")
    name: Any = ""
    namespace: Any = namespace_override or default_namespace
    if not isinstance(metadata, dict):
        findings.append(_spec_error("object-invalid", "metadata", "field required: a mapping with at least name"))
    else:
        findings += metadata_findings(metadata)
        if "name" not in metadata:
            findings.append(_spec_error("object-invalid", "metadata.name", "field required"))
        else:
            name = metadata["name"]
            findings += _name_findings("metadata.name", name, namespace=False)
        if "namespace" in metadata:
            findings += _name_findings("metadata.namespace", metadata["namespace"], namespace=True)
            if not namespace_override:
                namespace = metadata["namespace"]
    spec = None
    if isinstance(document.get("spec"), dict):
        spec, spec_findings = parse_spec(document["spec"])
        findings += spec_findings
    if findings:
        spec = None if any(f.severity.value == "error" for f in findings) else spec
        findings = capped(findings)
    return ParsedObject(name if isinstance(name, str) else repr(name), namespace if isinstance(namespace, str) else repr(namespace), spec, tuple(findings))
