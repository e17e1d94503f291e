"""Findings: the single shape every rule reports in (CLI JSON, CR status, events)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    """One verdict of one rule: `field` names the spec path a user would edit."""

    code: str
    severity: Severity
    field: str
    message: str
    stage: str = ""  # spec | config | pair | load | plan; "" where not yet assigned

    def to_dict(self) -> dict[str, str]:
        data = asdict(self)
        data["severity"] = self.severity.value
        return data


def error(code: str, field: str, message: str, stage: str = "") -> Finding:
    return Finding(code, Severity.ERROR, field, message, stage)


def warning(code: str, field: str, message: str, stage: str = "") -> Finding:
    return Finding(code, Severity.WARNING, field, message, stage)


def info(code: str, field: str, message: str, stage: str = "") -> Finding:
    return Finding(code, Severity.INFO, field, message, stage)


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)
