"""Findings: the single shape every stage reports in (CLI JSON, CR status, events).

A finding's `stage` says which step of `pipeline.evaluate` produced it and so which condition
it lands in: spec/config/pair/load findings decide `Validated`, plan findings decide `Planned`."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Iterable, Sequence

from specdeploy.finding_codes import Severity, Stage, catalogued

VALIDATION_STAGES = frozenset({Stage.SPEC, Stage.CONFIG, Stage.PAIR, Stage.LOAD})


@dataclass(frozen=True)
class Finding:
    """One verdict of one rule: `field` names the spec path a user would edit."""

    code: str
    severity: Severity
    field: str
    message: str
    stage: Stage = Stage.PAIR

    def __post_init__(self) -> None:
        # Only a catalogued code, at a severity its entry allows, can be built (finding_codes.py).
        # An error of rules guessed for an image of unknown release is reported as a warning
        # (pipeline.Evaluation.as_guess): only the image's preflight can say it holds.
        entry = catalogued(self.code)
        guessed = self.severity is Severity.WARNING and Severity.ERROR in entry.severities
        if self.severity not in entry.severities and not guessed:
            raise ValueError(f"finding code {self.code!r} is catalogued as {entry.severity.value}, built as {self.severity.value}")

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


# --- how messages word values and lists --------------------------------------------------------

# A finding is read in a terminal, a condition and an Event: every message stays within this.
MAX_MESSAGE = 300


def shown_value(value: Any) -> str:
    """A value as a message quotes it: JSON spelling, cut short (a 5000-digit integer too)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4000'} digits"
    try:
        text = json.dumps(value, allow_nan=True, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def some_of(values: Sequence[str], shown: int = 8) -> str:
    """A list of allowed values short enough for a message: the first `shown`, then a count."""
    if len(values) <= shown:
        return ", ".join(values)
    return f"{', '.join(values[:shown])} and {len(values) - shown} more"


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, cut at a word, marked with "..." when cut."""
    if len(text) <= limit:
        return text
    return text[: limit - 3].rsplit(" ", 1)[0] + "..."


def clipped(head: str, parts: Sequence[str], limit: int = MAX_MESSAGE) -> str:
    """`head`, then as many of `parts` as fit in `limit` characters, then how many did not."""
    text, shown = head, 0
    for part in parts:
        rest = len(parts) - shown - 1
        tail = f"; +{rest} more" if rest else ""
        candidate = f"{text}{'; ' if shown else ''}{part}"
        if len(candidate) + len(tail) > limit:
            break
        text, shown = candidate, shown + 1
    return text + (f"{'; ' if shown else ''}+{len(parts) - shown} more" if shown < len(parts) else "")


def edit_distance(a: str, b: str) -> int:
    """Edits from `a` to `b`: insert, delete, replace, or swap two neighbours ("eagel3" is one
    edit from "eagle3"), the typos a person makes."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                row[j] = min(row[j], previous2[j - 2] + 1)
        previous2, previous = previous, row
    return previous[-1]


def near_misses(name: str, known: Iterable[str], most: int = 2) -> list[str]:
    """The known names `name` misspells: within `most` edits, case ignored, nearest first (empty
    when `name` is one of them exactly)."""
    names = list(dict.fromkeys(known))
    if name in names:
        return []
    scored = [(edit_distance(name.lower(), k.lower()), k) for k in names if abs(len(k) - len(name)) <= most]
    best = min((d for d, _ in scored), default=most + 1)
    return [k for d, k in scored if d == best <= most]


def did_you_mean(names: Sequence[str]) -> str:
    """ "did you mean a?" / "did you mean a or b?" """
    return f"did you mean {' or '.join(names)}?"
