"""Speculative-decoding telemetry, pure: parse vLLM's /metrics text, aggregate pods over a
sliding window, and judge the draft with a goodput model. The controller's scraper and
`specdeploy advise` both call these functions; nothing here reads the network or the clock."""

from specdeploy.telemetry.metrics import Counters, parse_counters
from specdeploy.telemetry.model import Analysis, analyse, expected_tokens, speedup
from specdeploy.telemetry.window import Window

__all__ = ["Analysis", "Counters", "Window", "analyse", "expected_tokens", "parse_counters", "speedup"]
