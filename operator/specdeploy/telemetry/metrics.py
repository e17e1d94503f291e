"""vLLM's speculative-decoding counters, read from a Prometheus /metrics text.

The names are vLLM's (`specdeploy.vllm.spec_decode_metrics`); each is exposed with Prometheus'
`_total` suffix and one series per engine. A pod's value is the sum over its engines
(data-parallel ranks).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from specdeploy.api.spec import MAX_NUM_SPECULATIVE_TOKENS
from specdeploy.vllm.spec_decode_metrics import ACCEPTED_PER_POSITION, ACCEPTED_TOKENS, DRAFT_TOKENS, DRAFTS, POSITION_LABEL


_TOTALS = frozenset(name + "_total" for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS))


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
        )

    def increase_since(self, earlier: "Counters") -> "Counters":
        """What was counted between `earlier` and this sample. A counter that went down means
        the server restarted: then everything it shows now was counted since (Prometheus'
        `increase()` treats resets the same way)."""
        if self.drafts < earlier.drafts or len(self.accepted_per_position) != len(earlier.accepted_per_position):
            return self
        return Counters(
            self.drafts - earlier.drafts,
            self.draft_tokens - earlier.draft_tokens,
            self.accepted_tokens - earlier.accepted_tokens,
            tuple(a - b for a, b in zip(self.accepted_per_position, earlier.accepted_per_position)),
        )


def parse_counters(text: str) -> Counters:
    """The spec-decode counters of one /metrics text, summed over engines.

    Raises MetricsError when the text does not parse, a counter is not finite and >= 0 (NaN
    or Inf would poison every rate of the window), or speculative decoding is off (vLLM
    registers these counters only when a speculative config is set)."""
    totals: dict[str, float] = defaultdict(float)
    per_position: dict[int, float] = defaultdict(float)
    seen = False
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:  # by sample name: a text without # TYPE lines has no families
                if sample.name == ACCEPTED_PER_POSITION + "_total":
                    position = int(sample.labels[POSITION_LABEL])
                    if not 0 <= position < MAX_NUM_SPECULATIVE_TOKENS:  # k is one of 1..64: no 10**9-long tuple
                        raise MetricsError(f"{POSITION_LABEL}={position}: a draft position is from 0 to {MAX_NUM_SPECULATIVE_TOKENS - 1}")
                    per_position[position] += sample.value
                elif sample.name in _TOTALS:
                    totals[sample.name.removesuffix("_total")] += sample.value
                else:
                    continue
                if not math.isfinite(sample.value) or sample.value < 0:
                    raise MetricsError(f"{sample.name} is {sample.value}: a counter is a finite number >= 0")
                seen = True
    except MetricsError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise MetricsError(f"not a Prometheus metrics text: {exc}") from exc
    if not seen:
        raise MetricsError(f"no {DRAFTS}_total in the metrics: speculative decoding is not enabled on this server")
    k = max(per_position) + 1 if per_position else 0
    return Counters(
        totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED_TOKENS],
        tuple(per_position.get(i, 0.0) for i in range(k)),
    )
