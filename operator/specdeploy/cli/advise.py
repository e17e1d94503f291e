"""`specdeploy advise`: acceptance, predicted speedup per k and the recommended k from a vLLM
/metrics text (issue 9: speculation telemetry)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specdeploy.api.spec import METHODS
from specdeploy.cli.common import EXIT_INVALID, EXIT_VALID, OUTPUTS, UsageError, emit, hf_token, hub_local_only
from specdeploy.vllm.methods import methods_where


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}")
    return number


def _non_negative(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {number}")
    return number


def add_advise(sub: Any) -> None:
    parser = sub.add_parser(
        "advise", help="acceptance, predicted speedup per k and the recommended k from a vLLM /metrics text",
        description="Read a vLLM server's /metrics (a saved text, stdin, or its URL) and report the draft's acceptance, "
                    "the predicted speedup for each k and the recommended k. Exit 1 when speculation is judged "
                    "ineffective (the operator's SpeculationEffective condition would be False).")
    parser.add_argument("--metrics", required=True, help="a saved /metrics text ('-' for stdin) or the URL of a vLLM server's /metrics")
    parser.add_argument("--method", choices=METHODS, help=f"the server's speculative method ({'/'.join(methods_where(False, drafting='parallel'))} draft all positions "
                             f"in one pass; {'/'.join(methods_where(False, drafting='lookup'))} cost nothing)")
    parser.add_argument("--draft-cost", type=_non_negative, help=f"cost of one draft pass relative to one target step (default: 0 for {'/'.join(methods_where(False, drafting='lookup'))}, else 0.1)")
    parser.add_argument("--num-speculative-tokens", type=_positive_int, help="the k the server runs (default: the positions in the metrics)")
    parser.add_argument("-f", "--filename", help="the server's SpeculativeDeployment: its plan's layout and GPU give the draft cost and "
                                                 "the best k per batch size, the crossover and the verdict at the running-requests load")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help="output format (default text)")
    parser.set_defaults(func=_advise)


def _advise(args: argparse.Namespace) -> int:
    """The telemetry's analysis of one /metrics text (counted since the server started).
    Exit 1 when speculation is judged ineffective (SpeculationEffective would be False)."""
    import urllib.error
    import urllib.request

    from dataclasses import replace

    from specdeploy.telemetry import analyse, parse_counters
    from specdeploy.telemetry.load import SCHEDULE_KEY, schedule, verdict_at_load
    from specdeploy.telemetry.report import load_summary, summary

    source = args.metrics
    try:
        if source.startswith(("http://", "https://")):
            with urllib.request.urlopen(source, timeout=10) as response:
                text = response.read().decode("utf-8", errors="replace")
        else:
            text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except urllib.error.URLError as exc:
        raise UsageError("--metrics", f"{source}: {exc.reason}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError("--metrics", f"cannot read {source}: {exc}") from None
    counters = parse_counters(text)
    plan = _advise_plan(args.filename) if args.filename else None
    if plan is not None and args.method is None:
        args.method = plan.get("method")
    cost, cost_source = _advise_draft_cost(args, plan)
    analysis = analyse(counters, method=args.method, cost=cost, cost_source=cost_source, k=args.num_speculative_tokens)
    load = _advise_load(analysis, plan, text) if plan is not None else None
    if load is not None:
        analysis = replace(analysis, verdict=verdict_at_load(analysis, load))
    verdict = analysis.verdict
    report = {"speculationEffective": {"status": verdict.status, "reason": verdict.reason, "message": verdict.message}, **summary(analysis),
              **(load_summary(load, analysis.k) if load is not None else {})}
    ranges = schedule(load, plan.get("vllmVersion")) if load is not None and plan is not None else None
    if ranges is not None:
        report["speculativeConfig"] = {SCHEDULE_KEY: [list(r) for r in ranges]}

    def text_report() -> str:
        lines = [f"SpeculationEffective={verdict.status} ({verdict.reason}): {verdict.message}"]
        if analysis.predictions:
            best = analysis.recommended
            lines += [f"draft cost {analysis.cost:.3f} of a target step: {analysis.cost_source}", "   k  tokens/step  speedup"]
            for p in analysis.predictions:
                marks = ("  <- in force" if p.k == analysis.k else "") + ("  <- recommended" if best and p.k == best.k else "")
                lines.append(f"  {p.k:2d}  {p.expected_tokens:11.3f}  {p.speedup:6.3f}x{' (extrapolated)' if p.extrapolated else ''}{marks}")
        return "\n".join(lines + (_advise_load_table(load) if load is not None else []) + _advise_schedule_text(ranges)) + "\n"

    emit(args.output, report, text_report)
    return EXIT_INVALID if verdict.status == "False" else EXIT_VALID


def _advise_draft_cost(args: argparse.Namespace, plan: dict[str, Any] | None) -> tuple[float, str]:
    """--draft-cost, else the plan's draft/target weights (0 for lookups), else the default."""
    from specdeploy.telemetry.model import DEFAULT_DRAFT_COST, draft_cost
    from specdeploy.vllm.methods import drafting

    if args.draft_cost is not None:
        return args.draft_cost, "given (--draft-cost)"
    if drafting(args.method) == "lookup" or plan is not None:
        return draft_cost(args.method or "", plan)
    return DEFAULT_DRAFT_COST, "assumed (pass --draft-cost: draft weights per GPU / target weights per GPU)"


def _advise_plan(filename: str) -> dict[str, Any]:
    """The plan of the (first) SpeculativeDeployment in the file, as `specdeploy plan` makes it."""
    from specdeploy.stream import StreamError, plan_stream

    try:
        text = sys.stdin.read() if filename == "-" else Path(filename).read_text()
        report = plan_stream(text, filename, hf_token=hf_token(), hub_local_only=hub_local_only)
    except (OSError, UnicodeDecodeError, StreamError) as exc:
        raise UsageError("--filename", f"cannot plan {filename}: {exc}") from None
    result = report.results[0]
    if result.plan is None:
        why = "; ".join(f.message for f in result.findings + result.unjudged if f.severity == "error") or "no plan"
        raise UsageError("--filename", f"{result.namespace}/{result.name} does not plan: {why}")
    return result.plan


def _advise_load(analysis: Any, plan: dict[str, Any], text: str) -> Any:
    """The cost model at the running-requests reading(s) of the metrics text."""
    from specdeploy.telemetry.cost import CostModelError
    from specdeploy.telemetry.load import analyse_load
    from specdeploy.telemetry.metrics import parse_sample

    try:
        return analyse_load(analysis, plan, [r for r in parse_sample(text).running if r >= 1])
    except CostModelError as exc:
        raise UsageError("--filename", str(exc)) from None


def _advise_load_table(load: Any) -> list[str]:
    """Predicted speedup per batch size (rows) and k (columns), the pick marked with *."""
    ks = range(1, len(load.work.acceptance) + 1)
    lines = [f"cost model: {load.source}",
             "crossover: " + ("none: some k pays at every batch up to 2^20" if load.crossover is None
                              else f"batch {load.crossover} (no k pays from there on)"),
             "  batch  " + "".join(f"   k={k:<3d}" for k in ks) + "  best k"]
    for advice in load.by_batch:
        cells = "".join(f"  {load.work.speedup(advice.batch_size, k):5.2f}{'*' if k == advice.k else ' '}" for k in ks)
        lines.append(f"  {advice.batch_size:5d}  {cells}  {advice.k}{'  (off)' if advice.k == 0 else ''}")
    if load.observed is not None:
        lines.append(f"observed: {load.observed.samples} running-requests reading(s), typical batch {load.observed.typical:g}")
    return lines


def _advise_schedule_text(ranges: list[tuple[int, int, int]] | None) -> list[str]:
    """The opt-in: the table as the release's per-batch-size k, to paste into the CR."""
    if ranges is None:
        return []
    from specdeploy.telemetry.load import SCHEDULE_KEY

    return [f"opt-in (off by default): spec.draft.speculativeConfig.{SCHEDULE_KEY}: {json.dumps([list(r) for r in ranges])}",
            "  vLLM #49548 (open): with such a schedule an 8-way concurrent run fell from about 232 to 24-157 tok/s; measure before keeping it"]
