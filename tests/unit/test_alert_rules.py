"""The chart's alerts and dashboard, checked by Prometheus' own promtool (built from the Go module
proxy at the version hack/tools/promtool/go.mod pins, cached outside the clone): the rules
parse, each alert fires on its series and stays silent on the healthy ones, every dashboard
query parses, and every metric a panel or an alert names is one the operator exports or one
vLLM's /metrics has (its names taken from specdeploy.vllm.spec_decode_metrics, not written here)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from specdeploy.controller.process.metrics import Metrics
from specdeploy.vllm import spec_decode_metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "specdeploy" / "files" / "prometheus-rules.yaml"
DASHBOARD = ROOT / "charts" / "specdeploy" / "files" / "grafana-dashboard.json"
RULE_TESTS = ROOT / "tests" / "unit" / "alerts" / "prometheus-rules-test.yaml"


@pytest.fixture(scope="session")
def promtool() -> Path:
    """The pinned promtool (built on first use, a few minutes; then cached)."""
    done = subprocess.run(["bash", str(ROOT / "hack" / "tools" / "build.sh"), "promtool"], stdout=subprocess.PIPE, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1]) / "promtool"


def _promtool(promtool: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_is_the_pinned_release(promtool: Path) -> None:
    go_mod = (ROOT / "hack" / "tools" / "promtool" / "go.mod").read_text()
    pinned = re.search(r"^\s*github\.com/prometheus/prometheus (v\S+)", go_mod, re.MULTILINE).group(1)
    assert f"version {pinned} " in _promtool(promtool, "--version").stdout


def test_the_rules_pass_promtool_check(promtool: Path) -> None:
    done = _promtool(promtool, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def test_each_alert_fires_on_its_series_and_stays_silent_on_healthy_ones(promtool: Path) -> None:
    done = _promtool(promtool, "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    # Every alert of the file is tested both ways: some case expects it, some expects silence.
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    for alert in (rule["alert"] for rule in _rules()):
        expected = [case["exp_alerts"] for case in cases if case["alertname"] == alert]
        assert any(expected) and not all(expected), alert


def test_a_broken_rule_fails_promtool(promtool: Path, tmp_path: Path) -> None:
    """The checks above can fail: a threshold moved makes the collapse alert stay silent."""
    broken = tmp_path / "rules.yaml"
    broken.write_text(RULES.read_text().replace("< 0.5 * avg_over_time", "< 0.1 * avg_over_time"))
    tests = tmp_path / "test.yaml"
    tests.write_text(RULE_TESTS.read_text().replace("../../../charts/specdeploy/files/prometheus-rules.yaml", str(broken)))
    done = _promtool(promtool, "test", "rules", str(tests))
    assert done.returncode != 0 and "SpeculativeDecodingAcceptanceCollapsed" in done.stdout + done.stderr


def _dashboard_queries() -> list[str]:
    """Every query of the dashboard: panel targets and template variables."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(re.fullmatch(r"label_values\((.*), \w+\)", variable["query"]["query"]).group(1))
    return queries


def _grafana_free(query: str) -> str:
    """The query as Grafana sends it for "All": its variables replaced by a regex."""
    return re.sub(r"\$\{?\w+\}?", ".*", query)


def test_every_dashboard_query_parses(promtool: Path, tmp_path: Path) -> None:
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:query_{i}", "expr": _grafana_free(q)}
                                                         for i, q in enumerate(_dashboard_queries())]}]}
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = _promtool(promtool, "check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"}


def metric_names(query: str) -> set[str]:
    """The metric names a PromQL query selects: identifiers that are not functions, keywords,
    label names (in matchers or grouping clauses) or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', "", _grafana_free(query))  # strings
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)  # matchers, ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\boffset\s+\S+", " ", text)
    names = re.findall(r"(?<![\w.:])([A-Za-z_:][\w:]*+)(?!\s*\()", text)
    return {name for name in names if name not in _KEYWORDS}


def test_the_name_extraction_finds_names_and_only_names() -> None:
    query = ('sum by (namespace, pod) (rate(vllm:x_total{pod=~"a-.*", le="0.5"}[5m])) / ignoring (position) group_left '
             'max(up offset 30m) > 0.5 * avg_over_time(max by (name) (my_gauge)[6h:5m] offset 30m) and time() - ts_seconds < 900')
    assert metric_names(query) == {"vllm:x_total", "up", "my_gauge", "ts_seconds"}


def _operator_exports() -> set[str]:
    """Every sample name the operator's /metrics has once each of its metrics has a value."""
    metrics = Metrics()
    metrics.reconciles.labels("error").inc()
    metrics.duration.observe(0.1)
    metrics.preflight_disagreements.labels("load").inc()
    metrics.api_errors.labels("GET", "Pod", "500").inc()
    metrics.state.observe("team-a", "llama", {
        "conditions": [{"type": "Ready", "status": "True"}], "findings": [{"code": "k-default", "severity": "info"}],
        "preflight": {"outcome": "Passed"}, "plan": {"numSpeculativeTokens": 3},
        "speculation": {"drafts": 10, "acceptanceRate": 0.5, "meanAcceptanceLength": 2.5, "window": "600s",
                        "observedAt": "2026-12-06T10:00:00Z", "predictedSpeedup": 2.0, "numSpeculativeTokens": 3,
                        "crossoverBatchSize": 64, "observedLoad": {"typicalBatchSize": 8.0, "predictedSpeedup": 1.5}},
    })
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def _vllm_exports() -> set[str]:
    """vLLM's spec-decode Counters, as exposed (Prometheus adds _total)."""
    names = (spec_decode_metrics.DRAFTS, spec_decode_metrics.DRAFT_TOKENS, spec_decode_metrics.ACCEPTED_TOKENS,
             spec_decode_metrics.ACCEPTED_PER_POSITION)
    return {name + "_total" for name in names}


def test_every_metric_a_panel_or_an_alert_names_is_exported() -> None:
    exported = _operator_exports() | _vllm_exports()
    named = {name: source for source, queries in (("alert", [r["expr"] for r in _rules()]), ("dashboard", _dashboard_queries()))
             for query in queries for name in metric_names(query)}
    assert len(named) >= 15, named  # the extraction saw the queries
    assert {name: source for name, source in named.items() if name not in exported} == {}
    # The dashboard shows each per-CR gauge the operator exports.
    per_cr = {name for name in _operator_exports() if name.startswith(("specdeploy_speculation_", "specdeploy_preflight_outcome"))}
    assert per_cr - set(named) <= {"specdeploy_speculation_observed_timestamp_seconds"}, per_cr - set(named)
