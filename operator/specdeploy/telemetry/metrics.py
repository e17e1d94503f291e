"""vLLM's speculative-decoding counters, read from a Prometheus /metrics text.

The names are vLLM's (`specdeploy.vllm.spec_decode_metrics`); each is exposed with Prometheus'
`_total` suffix and one series per engine. A pod's value is the sum over its engines
(data-parallel ranks).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass

from specdeploy.api.spec import MAX_NUM_SPECULATIVE_TOKENS
from specdeploy.vllm.spec_decode_metrics import ACCEPTED_PER_POSITION, ACCEPTED_TOKENS, DRAFT_TOKENS, DRAFTS, POSITION_LABEL


# The running-requests gauge: sequences in the engine's batch at the moment of the scrape
# (vllm/v1/metrics/loggers.py, PrometheusStatLogger), one series per engine.
RUNNING = "vllm:num_requests_running"
# Token counts of finished requests (histograms: `_sum` and `_count`, same loggers.py): the mean
# context a sequence holds while decoding is the mean prompt plus half the mean generation.
PROMPT_TOKENS = "vllm:request_prompt_tokens"
GENERATION_TOKENS = "vllm:request_generation_tokens"
# prometheus_client's process collector, which vLLM's API server exports: a new value is a new
# process, the only reason its counters may go down.
PROCESS_START = "process_start_time_seconds"
# Output tokens as they are generated (vllm/v1/metrics/loggers.py, counter_generation_tokens):
# a canary arm's tokens per second, counted while requests run, not when they finish.
OUTPUT_TOKENS = "vllm:generation_tokens"
# The API server's HTTP responses, by status class (prometheus_fastapi_instrumentator, which
# vllm/entrypoints/openai/api_server.py mounts; label status="2xx".."5xx"): a canary that
# answers 5xx serves errors.
HTTP_REQUESTS = "http_requests_total"
STATUS_LABEL = "status"
_TOTALS = frozenset(name + "_total" for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS))
_LENGTHS = frozenset({PROMPT_TOKENS + "_count", PROMPT_TOKENS + "_sum", GENERATION_TOKENS + "_sum", OUTPUT_TOKENS + "_total"})


class MetricsError(ValueError):
    """The text is not Prometheus exposition format, or holds no spec-decode counters."""


@dataclass(frozen=True)
class Counters:
    """Cumulative counts since the server started (or, after `minus`, over an interval).

    `accepted_per_position[i]` counts drafts whose first i+1 tokens were all accepted
    (vLLM increments positions 0..accepted-1 for each draft), so it never rises with i."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: tuple[float, ...] = ()
    requests: float = 0.0  # finished requests (the prompt-token histogram's count)
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    output_tokens: float = 0.0  # vllm:generation_tokens_total: tokens generated, finished or not
    responses: float = 0.0  # HTTP responses of the API server (http_requests_total, every status)
    server_errors: float = 0.0  # of which status 5xx

    @property
    def mean_context(self) -> float | None:
        """Context tokens a sequence holds on average while decoding (None before a request finished)."""
        if self.requests <= 0:
            return None
        return (self.prompt_tokens + self.generation_tokens / 2) / self.requests

    @property
    def num_speculative_tokens(self) -> int:
        """k of the server that produced these counters (vLLM exposes one series per position)."""
        return len(self.accepted_per_position)

    def plus(self, other: "Counters") -> "Counters":
        n = max(len(self.accepted_per_position), len(other.accepted_per_position))
        pad = lambda v: tuple(v) + (0.0,) * (n - len(v))  # noqa: E731
        return Counters(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted_tokens + other.accepted_tokens,
            tuple(a + b for a, b in zip(pad(self.accepted_per_position), pad(other.accepted_per_position))),
            self.requests + other.requests,
            self.prompt_tokens + other.prompt_tokens,
            self.generation_tokens + other.generation_tokens,
            self.output_tokens + other.output_tokens,
            self.responses + other.responses,
            self.server_errors + other.server_errors,
        )

    def fell(self, earlier: "Counters") -> str | None:
        """The first count that is lower than in `earlier` (None: none is). A counter only goes
        down when its process starts again; whether it did is the process start time's to say."""
        named = [(DRAFTS, self.drafts, earlier.drafts), (DRAFT_TOKENS, self.draft_tokens, earlier.draft_tokens),
                 (ACCEPTED_TOKENS, self.accepted_tokens, earlier.accepted_tokens), (PROMPT_TOKENS + "_count", self.requests, earlier.requests),
                 (PROMPT_TOKENS + "_sum", self.prompt_tokens, earlier.prompt_tokens),
                 (GENERATION_TOKENS + "_sum", self.generation_tokens, earlier.generation_tokens),
                 (OUTPUT_TOKENS + "_total", self.output_tokens, earlier.output_tokens),
                 (HTTP_REQUESTS, self.responses, earlier.responses),
                 (HTTP_REQUESTS + '{status="5xx"}', self.server_errors, earlier.server_errors)]
        named += [(f"{ACCEPTED_PER_POSITION}[{i}]", now, before)
                  for i, (now, before) in enumerate(zip(self.accepted_per_position, earlier.accepted_per_position))]
        return next((name for name, now, before in named if now < before), None)

    def increase_since(self, earlier: "Counters", *, restarted: bool = False) -> "Counters":
        """What was counted between `earlier` and this sample. `restarted` (the process start time
        changed, or k did): everything it shows now was counted since."""
        if restarted or len(self.accepted_per_position) != len(earlier.accepted_per_position):
            return self
        return Counters(
            self.drafts - earlier.drafts,
            self.draft_tokens - earlier.draft_tokens,
            self.accepted_tokens - earlier.accepted_tokens,
            tuple(a - b for a, b in zip(self.accepted_per_position, earlier.accepted_per_position)),
            self.requests - earlier.requests,
            self.prompt_tokens - earlier.prompt_tokens,
            self.generation_tokens - earlier.generation_tokens,
            self.output_tokens - earlier.output_tokens,
            self.responses - earlier.responses,
            self.server_errors - earlier.server_errors,
        )


# What is read of a page, and nothing else: one pass finds these samples' lines (a page is
# ~600 lines, ~20 of them these) and parses only them; the rest is never split or parsed.
_READ = (ACCEPTED_PER_POSITION + "_total", *sorted(_TOTALS), *sorted(_LENGTHS), RUNNING, PROCESS_START, HTTP_REQUESTS)
_LINE = re.compile(r"^(" + "|".join(re.escape(name) for name in _READ) + r")(?=[{ \t\r\n]|$)([^\n]*)", re.M)
# A label set as the exposition format writes it, without backtracking (each alternative starts
# with a different character): a hostile line costs its length, once.
_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
_LABELS = re.compile(r"\{(?:" + _PAIR + r"(?:," + _PAIR + r")*,?)?\}")
_ONE_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"')
_SAMPLE_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*[{ \t]")
_FIRST_SAMPLE = re.compile(r"^[ \t]*([^#\s][^\n]*)", re.M)


def _scan(text: str) -> dict[str, list[tuple[str, float]]]:
    """The samples read (`_READ`), by name: (label set, value) each, in one pass over the text.
    A line of one of them that does not parse refuses the page; other lines are not read."""
    found: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for match in _LINE.finditer(text):
        name, rest = match.group(1), match.group(2)
        labels = _LABELS.match(rest)
        end = labels.end() if labels else 0
        fields = rest[end:].split()
        try:
            if (labels is None and rest[:1] == "{") or rest[end:end + 1] not in (" ", "\t") or len(fields) not in (1, 2):
                raise ValueError(name)
            value = float(fields[0])
            if len(fields) == 2:
                float(fields[1])  # a timestamp: read, not used
        except ValueError:
            raise MetricsError(f"not a Prometheus metrics text: a {name} line does not parse") from None
        found[name].append((labels.group(0) if labels else "", value))
    if not found.get(DRAFTS + "_total"):
        first = _FIRST_SAMPLE.search(text)
        if first is not None and not _SAMPLE_NAME.match(first.group(1)):
            raise MetricsError("not a Prometheus metrics text: its first sample line is not a metric name and value")
    return found


def _position(labels: str) -> int:
    """The draft position of a per-position sample; k is one of 1..64: no 10**9-long tuple."""
    named = dict(_ONE_LABEL.findall(labels))
    try:
        position = int(named[POSITION_LABEL])
    except (KeyError, ValueError):
        raise MetricsError(f"{ACCEPTED_PER_POSITION}_total: no integer {POSITION_LABEL} label") from None
    if not 0 <= position < MAX_NUM_SPECULATIVE_TOKENS:
        raise MetricsError(f"{POSITION_LABEL}={position}: a draft position is from 0 to {MAX_NUM_SPECULATIVE_TOKENS - 1}")
    return position


def _counters(found: dict[str, list[tuple[str, float]]]) -> Counters:
    totals: dict[str, float] = defaultdict(float)
    per_position: dict[int, float] = defaultdict(float)
    for name in (*_TOTALS, *_LENGTHS):
        for _, value in found.get(name, ()):
            _check_count(name, value)
            totals[name.removesuffix("_total")] += value
    for labels, value in found.get(ACCEPTED_PER_POSITION + "_total", ()):
        _check_count(ACCEPTED_PER_POSITION + "_total", value)
        per_position[_position(labels)] += value
    if not found.get(DRAFTS + "_total"):
        raise MetricsError(f"no {DRAFTS}_total in the metrics: speculative decoding is not enabled on this server")
    responses = errors = 0.0
    for labels, value in found.get(HTTP_REQUESTS, ()):
        _check_count(HTTP_REQUESTS, value)
        responses += value
        errors += value if dict(_ONE_LABEL.findall(labels)).get(STATUS_LABEL) == "5xx" else 0.0
    k = max(per_position) + 1 if per_position else 0
    return Counters(
        totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED_TOKENS],
        tuple(per_position.get(i, 0.0) for i in range(k)),
        totals[PROMPT_TOKENS + "_count"], totals[PROMPT_TOKENS + "_sum"], totals[GENERATION_TOKENS + "_sum"],
        totals[OUTPUT_TOKENS], responses, errors,
    )


def parse_counters(text: str) -> Counters:
    """The spec-decode counters of one /metrics text, summed over engines.

    Raises MetricsError when a line of theirs does not parse, a counter is not finite and >= 0
    (NaN or Inf would poison every rate of the window), or speculative decoding is off (vLLM
    registers these counters only when a speculative config is set)."""
    return _counters(_scan(text))


@dataclass(frozen=True)
class Sample:
    """One pod's scrape: its spec-decode counters, each engine's running requests, and when the
    serving process started (None: not exported)."""

    counters: Counters
    running: tuple[float, ...]
    started: float | None = None


def parse_sample(text: str) -> Sample:
    """parse_counters plus the running-requests gauge (absent: no load reading) and the process
    start time, from the same one pass; a gauge that is not a finite count is refused like a counter."""
    found = _scan(text)
    counters = _counters(found)
    for name in (RUNNING, PROCESS_START):
        for _, value in found.get(name, ()):
            _check_count(name, value)
    running = [value for _, value in found.get(RUNNING, ())]
    started = [value for _, value in found.get(PROCESS_START, ())]
    return Sample(counters, tuple(running), max(started) if started else None)


def _check_count(name: str, value: float) -> None:
    """NaN or Inf would poison every rate and average of the window: the pod is skipped."""
    if not math.isfinite(value) or value < 0:
        raise MetricsError(f"{name} is {value}: a count is a finite number >= 0")
