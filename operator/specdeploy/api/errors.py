"""pydantic's validation errors in our words: the field, what it allows and what it got, one
message per field (a union's members each refuse a value; the user wrote one).

pydantic's own text ("Input should be a valid integer") names neither what is allowed nor what
was written, and a union of N members gives N lines. A validator of ours that raises
`PydanticCustomError(code, message)` keeps its message and gives its finding that code."""

from __future__ import annotations

import re
import typing
from typing import Any, Iterable, Mapping

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from specdeploy.findings import did_you_mean, json_type, near_misses, shown_value, some_of

SPEC_INVALID = "spec-invalid"
# The loc entries pydantic adds for a union's members (int | "auto", int | str).
_UNION_MEMBERS = ("int", "str", "literal['auto']")
_TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "string_type": "a string", "bool_type": "a boolean (true or false)", "bool_parsing": "a boolean (true or false)",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping", "list_type": "a list",
}
_BOUND_WORDS = {"greater_than_equal": ("ge", "at least"), "greater_than": ("gt", "more than"),
                "less_than_equal": ("le", "at most"), "less_than": ("lt", "less than")}


def user_loc(item: ErrorDetails) -> tuple[Any, ...]:
    """The field the user wrote, without the union member pydantic tried."""
    return tuple(p for p in item["loc"] if p not in _UNION_MEMBERS)


def is_ours(item: ErrorDetails) -> bool:
    """A `PydanticCustomError` of ours: its type is a finding code (kebab-case, unlike pydantic's)."""
    return "-" in item["type"]


def _allowed(item: ErrorDetails, patterns: Mapping[str, str]) -> str | None:
    """What the field allows, as this one error says it."""
    kind, ctx = item["type"], item.get("ctx") or {}
    if kind in _TYPE_WORDS:
        return _TYPE_WORDS[kind]
    if kind in _BOUND_WORDS:
        key, words = _BOUND_WORDS[kind]
        bound = ctx[key]
        return f"{words} {int(bound) if isinstance(bound, float) and bound.is_integer() else bound}"
    if kind == "literal_error":
        values = re.findall(r"'[^']*'", str(ctx.get("expected", "")))
        return values[0] if len(values) == 1 else f"one of {some_of(values)}"
    if kind in ("string_too_long", "too_long"):
        return f"at most {ctx['max_length']} {'characters' if kind == 'string_too_long' else 'items'}"
    if kind in ("string_too_short", "too_short"):
        return "not empty" if ctx.get("min_length") == 1 else f"at least {ctx['min_length']} items"
    if kind == "string_pattern_mismatch":
        return patterns.get(ctx["pattern"], f"text matching {ctx['pattern']}")
    return None


def shown_input(value: Any) -> str:
    """What was written: its YAML/JSON type and, for a scalar, the value."""
    if isinstance(value, (dict, list)):
        return json_type(value)
    return shown_value(value) if value is None or isinstance(value, bool) else f"{json_type(value)} {shown_value(value)}"


def _quoted_hint(allowed: list[str], value: Any) -> str:
    """A number or boolean written in quotes is the commonest of these mistakes: say so."""
    if not isinstance(value, str):
        return ""
    if "an integer" in allowed and re.fullmatch(r"\s*-?\d+\s*", value) or \
            "a boolean (true or false)" in allowed and value.strip().lower() in ("true", "false"):
        return f" (write {value.strip()} without quotes)"
    return ""


def field_message(items: list[ErrorDetails], patterns: Mapping[str, str]) -> str:
    """One field's errors (a union's members each give one) as one message."""
    allowed = list(dict.fromkeys(a for a in (_allowed(i, patterns) for i in items) if a))
    value = items[0].get("input")
    if not allowed:
        return f"cannot take {shown_input(value)}"
    return f"must be {' or '.join(allowed)}, got {shown_input(value)}{_quoted_hint(allowed, value)}"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's type holds (through Optional, Annotated, list and dict)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def field_names(root: type[BaseModel], loc: Iterable[Any]) -> list[str]:
    """The field names (as written: camelCase) of the object at `loc` under `root`."""
    models = [root]
    for part in loc:
        if isinstance(part, int):
            continue  # a list item: the list's model
        fields = [f for m in models for name, f in m.model_fields.items() if (f.alias or name) == part]
        models = [m for f in fields for m in _models_in(f.annotation)]
    return [f.alias or name for m in models for name, f in m.model_fields.items()]


def unknown_field(name: str, known: list[str], where: str) -> str:
    """An unknown key: the field it misspells, else the fields there are."""
    meant = near_misses(name, known)
    if meant:
        return f"unknown field {name!r}: {did_you_mean(meant)}"
    return f"unknown field {name!r}: {where} has {some_of(known)}" if known else f"unknown field {name!r}"
