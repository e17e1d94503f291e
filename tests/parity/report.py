"""Both verdicts for every grid case, and the agreement table printed by the parity suite and
written to docs/parity-<vLLM version>.md."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from cases import Case, configs, grid


@dataclass(frozen=True)
class Row:
    case: Case
    vllm_ok: bool
    vllm_stage: str
    vllm_error: str
    ours_ok: bool
    our_errors: tuple[str, ...]
    judged_by: str  # the rule set specdeploy judged with (the installed release's, once it has one)
    built: Any = None  # the judge's real load stage (vllm_judge.Verdict), on the sample only

    @property
    def agree(self) -> bool:
        return self.vllm_ok == self.ours_ok


def our_verdict(case: Case) -> tuple[bool, tuple[str, ...], str]:
    """specdeploy's verdict through the one shared entry point (no resources: no memory check),
    for a CR whose image is the installed vLLM release (its tag picks the rule set; on release
    day, before the release has one, the nearest older release's), and the release that judged."""
    import vllm

    from specdeploy.api.spec import SpeculativeDeploymentSpec
    from specdeploy.pipeline import ModelInputs, evaluate

    cfgs = configs()
    draft: dict[str, Any] = {"method": case.method}
    if case.k is not None:  # None: k left to the default each side derives
        draft["numSpeculativeTokens"] = case.k
    if case.draft is not None:
        draft["model"] = "d"
    if case.draft_tp is not None:
        draft["tensorParallelSize"] = case.draft_tp
    if case.speculative_config:
        draft["speculativeConfig"] = dict(case.speculative_config)
    spec = SpeculativeDeploymentSpec.model_validate({
        "image": f"vllm/vllm-openai:v{vllm.__version__}",
        "target": {"model": "t"},
        "draft": draft,
        "parallelism": {"tensorParallelSize": case.tp, "pipelineParallelSize": 1},
    })
    result = evaluate(
        spec,
        ModelInputs(config=cfgs[case.target]),
        ModelInputs(config=cfgs[case.draft]) if case.draft is not None else None,
    )
    errors = tuple(f"{f.code}: {f.message}" for f in result.findings if f.severity == "error")
    return result.ok, errors, result.vllm_version


def compute_rows() -> list[Row]:
    from vllm_judge import VllmJudge

    judge = VllmJudge(configs())
    rows: list[Row] = []
    try:
        for case in grid():
            verdict = judge.judge(_request(judge, case))
            rows.append(Row(case, verdict.ok, verdict.stage, verdict.error, *our_verdict(case)))
        sample = {r.case.id for r in load_sample(rows)}
        rows = [replace(r, built=judge.built(_request(judge, r.case))) if r.case.id in sample else r for r in rows]
    finally:
        judge.close()
    return rows


def _request(judge: Any, case: Case) -> Any:
    return judge.request(case.target, case.draft, case.method, case.k, case.tp, case.draft_tp,
                         dict(case.speculative_config))


def load_sample(rows: list[Row]) -> list[Row]:
    """The cases whose load verdict the real meta-device build re-judges: every one the load
    checks refuse, and per target/draft pair the accepted case at the largest TP."""
    refused = [r for r in rows if r.vllm_stage == "load"]
    widest: dict[str, Row] = {}
    for row in rows:
        if row.vllm_ok and row.case.tp >= getattr(widest.get(row.case.pair), "case", row.case).tp:
            widest[row.case.pair] = row
    return refused + list(widest.values())


def table(rows: list[Row], vllm_version: str) -> str:
    """Markdown: one line per (pair, method), then the totals and any disagreement."""
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in rows:
        groups[(row.case.pair, row.case.method)].append(row)
    agree = sum(r.agree for r in rows)
    accepted = sum(r.vllm_ok for r in rows)
    lines = [
        f"Grid: **{len(rows)} cases** ({len(groups)} pair/method combinations × target TP "
        f"1, 2, 3, 4, 6, 8, 16 × draft TP 1 and = TP) judged by vLLM {vllm_version}: "
        f"{accepted} accepted, {len(rows) - accepted} refused. "
        f"**Agree: {agree}. Disagree: {len(rows) - agree}.**",
        "",
        "| target + draft | method | cases | vLLM accepts | agree | disagree | vLLM's reasons for refusing (stage: error) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for (pair, method), group in groups.items():
        reasons = sorted({f"{r.vllm_stage}: {_short(r.vllm_error)}" for r in group if not r.vllm_ok})
        shown = "; ".join(reasons[:3]) + (f"; … ({len(reasons) - 3} more)" if len(reasons) > 3 else "")
        ok = sum(r.vllm_ok for r in group)
        ag = sum(r.agree for r in group)
        lines.append(f"| {pair} | {method} | {len(group)} | {ok} | {ag} | {len(group) - ag} | {shown or '—'} |")
    bad = [r for r in rows if not r.agree]
    if bad:
        lines += ["", "Disagreements:", ""]
        lines += [f"- `{r.case.id}`: vLLM {'accepts' if r.vllm_ok else 'refuses (' + r.vllm_error + ')'}; "
                  f"specdeploy {'accepts' if r.ours_ok else 'refuses (' + '; '.join(r.our_errors) + ')'}"
                  for r in bad]
    return "\n".join(lines) + "\n"


def _short(error: str) -> str:
    text = error.replace("|", "/")
    return text if len(text) <= 110 else text[:107] + "..."


def main() -> None:
    """`python tests/parity/report.py OUT.json`: every row as JSON, for scripts/vllm_release.py."""
    import json
    import sys

    import vllm

    rows = compute_rows()
    out = {"vllm_version": vllm.__version__, "rows": [
        {"id": r.case.id, "vllm_ok": r.vllm_ok, "vllm_error": r.vllm_error, "ours_ok": r.ours_ok,
         "our_errors": list(r.our_errors), "judged_by": r.judged_by} for r in rows]}
    with open(sys.argv[1], "w", encoding="utf-8") as handle:
        json.dump(out, handle, indent=1)


if __name__ == "__main__":
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    main()
