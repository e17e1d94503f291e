"""Findings: the single shape every stage reports in (CLI JSON, CR status, events).

A finding's `stage` says which step of `pipeline.evaluate` produced it and so which condition
it lands in: spec/config/pair/load findings decide `Validated`, plan findings decide `Planned`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Iterable


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Stage(str, Enum):
    SPEC = "spec"  # the CR itself: schema, extra args, rule-set choice
    CONFIG = "config"  # a model's config.json as vLLM parses it
    PAIR = "pair"  # draft vs target, k, and the layout rules vLLM's config check runs
    LOAD = "load"  # what fails only when vLLM builds the models
    PLAN = "plan"  # our layout search: GPUs, nodes, memory fit


VALIDATION_STAGES = frozenset({Stage.SPEC, Stage.CONFIG, Stage.PAIR, Stage.LOAD})


@dataclass(frozen=True)
class Finding:
    """One verdict of one rule: `field` names the spec path a user would edit."""

    code: str
    severity: Severity
    field: str
    message: str
    stage: Stage = Stage.PAIR

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity.value, "stage": self.stage.value,
                "field": self.field, "message": self.message}


def error(code: str, field: str, message: str, stage: Stage = Stage.PAIR) -> Finding:
    return Finding(code, Severity.ERROR, field, message, stage)


def warning(code: str, field: str, message: str, stage: Stage = Stage.PAIR) -> Finding:
    return Finding(code, Severity.WARNING, field, message, stage)


def info(code: str, field: str, message: str, stage: Stage = Stage.PAIR) -> Finding:
    return Finding(code, Severity.INFO, field, message, stage)


def at_stage(findings: Iterable[Finding], stage: Stage) -> list[Finding]:
    """The same findings, attributed to `stage` (the pipeline stamps what each stage returns)."""
    return [replace(f, stage=stage) for f in findings]


def has_errors(findings: Iterable[Finding], stages: frozenset[Stage] | None = None) -> bool:
    return any(f.severity is Severity.ERROR and (stages is None or f.stage in stages) for f in findings)


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))


def json_type(value: object) -> str:
    """A value's type as a YAML or JSON author knows it ("null", "array"), not Python's name."""
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)
