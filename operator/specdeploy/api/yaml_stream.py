"""Read a YAML stream the way `kubectl apply -f` does, safe against hostile input.

PyYAML's composer recurses once per nesting level (5,000 levels is a RecursionError) and
shares aliased nodes, so a "billion laughs" document is small in memory but explodes in
anything that walks it (pydantic, json.dumps). One pass over the parser's events (libyaml
where present) bounds both before anything is built: the depth, and the node count with
every alias expanded. The same pass refuses duplicate keys, as kubectl's default
`--validate=strict` does. After loading, values JSON cannot hold (NaN, infinities, non-string
keys, bytes) are refused: the API server only ever sees JSON.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

import yaml

# Deeper than any SpeculativeDeployment needs (inline config.json files nest < 10 levels).
MAX_DEPTH = 64
# Per document, aliases expanded; a large inline config is a few thousand nodes (Kimi-K3's
# whole CR: ~1,500). Parsing 100k takes ~1 s: the bound keeps any document well inside 10 s.
MAX_NODES = 100_000
# The whole stream (several objects, each sent as its own request): parsing stays bounded. Each
# object is then held to the API server's 3 MiB request limit (api/parse.py MAX_REQUEST_BYTES).
MAX_BYTES = 8 * 1024 * 1024
# Python refuses to convert integers over 4300 digits (a ValueError naming no line).
MAX_NUMBER_CHARS = 100
_NUMBER_RE = re.compile(r"^[-+]?(0b[01_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*(:[0-5]?[0-9])*)$")  # YAML 1.1 integers

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StringTimestamps(_Loader):  # type: ignore[misc, valid-type]
    """Unquoted dates stay strings, as in Kubernetes' YAML->JSON conversion."""


_StringTimestamps.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
}


class StreamError(ValueError):
    """The stream is not something the API server would take; the message says where and why."""


class _Frame:
    __slots__ = ("anchor", "size", "is_mapping", "expect_key", "keys")

    def __init__(self, anchor: str | None, is_mapping: bool) -> None:
        self.anchor, self.is_mapping = anchor, is_mapping
        self.size, self.expect_key, self.keys = 1, True, set()


def _where(event: Any, source: str) -> str:
    mark = event.start_mark
    return f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark else source


def _check_events(text: str, source: str) -> None:
    """Bound depth and expanded size, refuse duplicate keys, before any object is built."""
    walk = _Walk(source)
    for event in yaml.parse(text, Loader=_Loader):
        walk.see(event)


class _Walk:
    """The parser's events, one at a time: the open collections, each anchor's expanded size,
    and the values in the current document (aliases expanded)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.stack: list[_Frame] = []
        self.anchors: dict[str, int] = {}
        self.nodes = 0

    def see(self, event: Any) -> None:
        if isinstance(event, yaml.DocumentStartEvent):
            self.anchors.clear()
            self.nodes = 0
            return
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            self._open(event)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            frame = self.stack.pop()
            if frame.anchor:
                self.anchors[frame.anchor] = frame.size
            self._add(frame.size, None, event)
        elif isinstance(event, yaml.ScalarEvent):
            self._scalar(event)
        elif isinstance(event, yaml.AliasEvent):
            self._alias(event)
        else:
            return
        if self.nodes > MAX_NODES:
            why = "once aliases are expanded (an alias bomb?)" if self.anchors else "in one document (a SpeculativeDeployment has a few thousand)"
            raise StreamError(f"{_where(event, self.source)}: more than {MAX_NODES} values {why}")

    def _open(self, event: Any) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise StreamError(f"{_where(event, self.source)}: nested deeper than {MAX_DEPTH} levels")
        self.stack.append(_Frame(event.anchor, isinstance(event, yaml.MappingStartEvent)))
        self.nodes += 1

    def _scalar(self, event: Any) -> None:
        if event.implicit[0] and len(event.value) > MAX_NUMBER_CHARS and _NUMBER_RE.match(event.value):
            raise StreamError(f"{_where(event, self.source)}: a number of {len(event.value)} characters; no field takes one "
                              "that long (quote it if it is text)")
        if event.anchor:
            self.anchors[event.anchor] = 1
        self.nodes += 1
        self._add(1, event.value, event)

    def _alias(self, event: Any) -> None:
        if any(frame.anchor == event.anchor for frame in self.stack):
            raise StreamError(f"{_where(event, self.source)}: alias *{event.anchor} refers to a node that contains it "
                              "(a recursive structure, which JSON cannot hold)")
        size = self.anchors.get(event.anchor, 1)
        self.nodes += size
        self._add(size, None, event)

    def _add(self, size: int, key: str | None, event: Any) -> None:
        """A finished value joins its parent: its size, and its key when it is one."""
        if not self.stack:
            return
        parent = self.stack[-1]
        parent.size += size
        if parent.is_mapping:
            if parent.expect_key and key is not None:
                if key in parent.keys:
                    raise StreamError(f"{_where(event, self.source)}: duplicate key {key!r}")
                parent.keys.add(key)
            parent.expect_key = not parent.expect_key


def _json_safe(value: Any, path: str, source: str) -> None:
    """What the API server's YAML->JSON step would refuse (or, for dates, what it keeps as text)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise StreamError(f"{source}: {path or 'document'} is {value!r}, which JSON (and so the API server) cannot hold")
    if isinstance(value, (bytes, datetime.date, set)):
        raise StreamError(f"{source}: {path or 'document'} is a YAML {type(value).__name__}, which JSON cannot hold: quote it")
    if isinstance(value, dict):
        for key, sub in value.items():
            if not isinstance(key, str):
                raise StreamError(f"{source}: {path or 'document'} has a non-string key {key!r}: quote it")
            _json_safe(sub, f"{path}.{key}" if path else key, source)
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            _json_safe(sub, f"{path}[{index}]", source)


def load_documents(text: str, source: str = "<stream>") -> list[Any]:
    """Every non-empty document of a YAML (or JSON) stream; StreamError says what is wrong."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise StreamError(f"{source}: larger than {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        _check_events(text, source)
        documents = [d for d in yaml.load_all(text, Loader=_StringTimestamps) if d is not None]
    except StreamError:
        raise
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).replace('in "<unicode string>", ', "").split())
        raise StreamError(f"{source}: not valid YAML: {detail}") from None
    except RecursionError:  # defence in depth: _check_events bounds depth first
        raise StreamError(f"{source}: nested too deeply") from None
    for index, document in enumerate(documents):
        _json_safe(document, "", f"{source} document {index + 1}")
    return documents
