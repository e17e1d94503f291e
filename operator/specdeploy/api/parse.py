"""Parse a CR (or a bare spec) at the edge; pydantic errors become findings naming the field."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import Finding, Stage, error


def _field_path(loc: tuple[Any, ...]) -> str:
    path = "spec"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def findings_from_validation_error(exc: ValidationError) -> list[Finding]:
    findings = []
    for item in exc.errors():
        # Union members (int | "auto") add their own loc suffix; keep the user's field.
        loc = tuple(p for p in item["loc"] if p not in ("int", "literal['auto']", "str"))
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = f"unknown field {loc[-1]!r}"
        elif item["type"] == "missing":
            message = "field required"
        findings.append(error("spec-invalid", _field_path(loc), message, Stage.SPEC))
    return findings


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
