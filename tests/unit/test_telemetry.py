"""The goodput model, the /metrics parser and the sliding window, against hand-computed cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdeploy.telemetry import Counters, Window, analyse, expected_tokens, parse_counters, speedup
from prometheus_client.parser import text_string_to_metric_families

from specdeploy.telemetry.metrics import RUNNING, MetricsError, Sample, parse_sample
from specdeploy.telemetry.model import (
    COLLAPSE_ACCEPTANCE_RATE,
    DEFAULT_DRAFT_COST,
    MIN_DRAFTS,
    draft_cost,
    extrapolate,
    geometric_acceptance,
)
from specdeploy.telemetry.report import speculation_status
from specdeploy.telemetry.window import NotARestart

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


# -- the model ---------------------------------------------------------------------------------
def test_leviathan_alpha_08_k4_cost_01() -> None:
    """alpha = 0.8, k = 4, c = 0.1. By hand: E = 1 + .8 + .64 + .512 + .4096 = 3.3616
    (= (1 - .8^5) / (1 - .8)); speedup = 3.3616 / (1 + 0.1 * 4) = 2.40114."""
    a = geometric_acceptance(0.8, 4)
    assert expected_tokens(a, 4) == pytest.approx(3.3616)
    assert expected_tokens(a, 4) == pytest.approx((1 - 0.8**5) / (1 - 0.8))
    assert speedup(a, 4, 0.1) == pytest.approx(3.3616 / 1.4)
    assert speedup(a, 4, 0.1) == pytest.approx(2.40114, abs=1e-5)


def test_parallel_drafter_pays_one_pass_for_all_positions() -> None:
    """dflash/dspark: 3.3616 / (1 + 0.1) = 3.05600, more than the sequential 2.40114."""
    a = geometric_acceptance(0.8, 4)
    assert speedup(a, 4, 0.1, parallel=True) == pytest.approx(3.3616 / 1.1)
    counters = Counters(1000, 4000, 2361.6, (800, 640, 512, 409.6))
    seq = analyse(counters, method="eagle3", cost=0.1)
    par = analyse(counters, method="dspark", cost=0.1)
    assert seq.predicted_speedup == pytest.approx(2.40114, abs=1e-5)
    assert par.predicted_speedup == pytest.approx(3.05600, abs=1e-5)
    assert par.parallel and not seq.parallel


def test_recommendation_from_the_reported_acceptance() -> None:
    """The report in the issue: per-position acceptance .844/.599/.385/.271 at k = 4. With
    c = 0.1 by hand: k=1 1.844/1.1 = 1.676, k=2 2.443/1.2 = 2.036, k=3 2.828/1.3 = 2.175,
    k=4 3.099/1.4 = 2.214 -> k=4 best; with c = 0.3: k=1 1.418, k=2 1.527, k=3 1.488,
    k=4 1.409 -> k=2, the k that measured fastest (303.6 vs 210.0 tok/s)."""
    drafts = 10_000
    per_pos = (8440, 5990, 3850, 2710)
    counters = Counters(drafts, 4 * drafts, sum(per_pos), per_pos)
    cheap = analyse(counters, method="eagle", cost=0.1, k=4)
    assert [round(p.speedup, 3) for p in cheap.predictions[:4]] == [1.676, 2.036, 2.175, 2.214]
    dear = analyse(counters, method="eagle", cost=0.3, k=4)
    assert [round(p.speedup, 3) for p in dear.predictions[:4]] == [1.418, 1.527, 1.488, 1.409]
    assert dear.recommended is not None and dear.recommended.k == 2
    # The acceptance rate ranks k=1 best (.844 > .722 > ...): the wrong ranking (vLLM #9565).
    rates = [sum(per_pos[:k]) / (k * drafts) for k in range(1, 5)]
    assert rates == sorted(rates, reverse=True)


def test_extrapolation_uses_the_lowest_conditional_acceptance() -> None:
    """.9, .72 (ratio .8), .612 (ratio .85): the next two use .8 -> .4896, .39168."""
    assert extrapolate([0.9, 0.72, 0.612], 2) == pytest.approx([0.9, 0.72, 0.612, 0.4896, 0.39168])
    counters = Counters(1000, 3000, 2232, (900, 720, 612))
    a = analyse(counters, method="eagle3", cost=0.0)
    assert [p.k for p in a.predictions] == [1, 2, 3, 4, 5]
    assert [p.extrapolated for p in a.predictions] == [False, False, False, True, True]
    # With no draft cost every extra position pays: the best k is the farthest extrapolated.
    assert a.recommended is not None and a.recommended.k == 5


def test_collapse_and_no_speedup_verdicts() -> None:
    collapsed = analyse(Counters(5000, 20000, 242, (200, 30, 10, 2)), method="eagle3", cost=0.05, k=4)
    assert collapsed.acceptance_rate == pytest.approx(0.0121)
    assert collapsed.acceptance_rate < COLLAPSE_ACCEPTANCE_RATE
    assert collapsed.verdict.status == "False" and collapsed.verdict.reason == "AcceptanceCollapsed"
    assert "eagle_aux_hidden_state_layer_ids" in collapsed.verdict.message and "revision" in collapsed.verdict.message
    # k=1: 1.04 / 1.05 = 0.990: no k pays.
    assert "no k is predicted to pay (best: k=1 at 0.99x)" in collapsed.verdict.message
    # 30 % acceptance at k = 4 with an expensive draft: E = 1 + .5 + .4 + .2 + .1 = 2.2, / (1 + .4*4) = 0.846.
    slow = analyse(Counters(1000, 4000, 1200, (500, 400, 200, 100)), method="draft_model", cost=0.4, k=4)
    assert slow.predicted_speedup == pytest.approx(2.2 / 2.6)
    assert slow.verdict.status == "False" and slow.verdict.reason == "NoSpeedup"
    assert "best k is 1" in slow.verdict.message  # 1.5 / 1.4 = 1.07 > 1
    good = analyse(Counters(1000, 4000, 2361.6, (800, 640, 512, 409.6)), method="eagle3", cost=0.1)
    assert good.verdict.status == "True" and good.verdict.reason == "Effective"
    few = analyse(Counters(MIN_DRAFTS - 1, 3 * (MIN_DRAFTS - 1), 0, (0, 0, 0)), method="eagle3", cost=0.1)
    assert few.verdict.status == "Unknown" and few.verdict.reason == "NotEnoughDrafts"
    assert few.recommended is None


def test_draft_cost_from_the_plan() -> None:
    plan = {"memory": {"targetWeightsGiB": 14.96, "draftWeightsGiB": 0.79}}
    cost, source = draft_cost("eagle3", plan)
    assert cost == pytest.approx(0.79 / 14.96)
    assert "0.79/14.96" in source
    assert draft_cost("ngram", plan)[0] == 0.0
    # No memory estimate: the assumed c = 0.1 the README states, said so in the source.
    assert draft_cost("eagle3", {"memory": None}) == (0.1, draft_cost("eagle3", None)[1]) == (DEFAULT_DRAFT_COST, draft_cost("eagle3", None)[1])
    assert "assumed" in draft_cost("eagle3", None)[1]


def test_status_is_rounded_and_shaped_by_the_api_model() -> None:
    counters = Counters(300, 900, 421, (200, 140, 81))
    status = speculation_status(analyse(counters, method="eagle3", cost=0.1), window_s=600, observed_at="2026-12-03T06:00:00Z", pods=2)
    # By hand: 421 / 900 = 0.46778, 1 + 421/300 = 2.40333, 200/300, 140/300, 81/300.
    assert status["acceptanceRate"] == 0.4678
    assert status["meanAcceptanceLength"] == 2.4033
    assert status["perPositionAcceptance"] == [0.6667, 0.4667, 0.27]
    assert (status["drafts"], status["draftTokens"], status["acceptedTokens"]) == (300, 900, 421)
    assert status["window"] == "600s" and status["pods"] == 2
    assert status["numSpeculativeTokens"] == 3


# -- the parser --------------------------------------------------------------------------------
def test_parse_a_saved_vllm_metrics_text() -> None:
    """A /metrics text saved from vLLM 0.32.0's CPU build (ngram, k = 3, greedy looping output)."""
    text = (FIXTURES / "vllm-0.32.0-ngram-k3.txt").read_text()
    c = parse_counters(text)
    assert c.num_speculative_tokens == 3
    assert c.drafts > 0 and c.accepted_tokens <= c.draft_tokens
    assert c.accepted_per_position[0] >= c.accepted_per_position[1] >= c.accepted_per_position[2]
    assert sum(c.accepted_per_position) == c.accepted_tokens  # vLLM counts each accepted token at its position


def test_engines_are_summed_and_created_samples_ignored() -> None:
    lines = []
    for engine, (d, t, a, p) in enumerate([(10, 30, 12, (6, 4, 2)), (5, 15, 3, (2, 1, 0))]):
        labels = f'engine="{engine}",model_name="m"'
        lines += [f"vllm:spec_decode_num_drafts_total{{{labels}}} {d}",
                  f"vllm:spec_decode_num_drafts_created{{{labels}}} 1.7e9",
                  f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {t}",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {a}"]
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {v}' for i, v in enumerate(p)]
    assert parse_counters("\n".join(lines) + "\n") == Counters(15, 45, 15, (8, 5, 2))


def test_metrics_without_speculation_or_garbage_are_errors() -> None:
    with pytest.raises(MetricsError, match="speculative decoding is not enabled"):
        parse_counters("vllm:num_requests_running{engine=\"0\"} 0.0\n")
    with pytest.raises(MetricsError, match="not a Prometheus metrics text"):
        parse_counters("<html>this is not it</html> {{{\n")


def _by_prometheus_client(text: str) -> Sample:
    """What prometheus_client's own parser reads of a page (summed as the scraper sums)."""
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    total = lambda name: sum(s.value for s in samples if s.name == name)  # noqa: E731
    per_pos = sorted((int(s.labels["position"]), s.value) for s in samples if s.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total")
    k = per_pos[-1][0] + 1 if per_pos else 0
    counters = Counters(total("vllm:spec_decode_num_drafts_total"), total("vllm:spec_decode_num_draft_tokens_total"),
                        total("vllm:spec_decode_num_accepted_tokens_total"),
                        tuple(sum(v for p, v in per_pos if p == i) for i in range(k)),
                        total("vllm:request_prompt_tokens_count"), total("vllm:request_prompt_tokens_sum"),
                        total("vllm:request_generation_tokens_sum"), total("vllm:generation_tokens_total"),
                        total("http_requests_total"),
                        sum(s.value for s in samples if s.name == "http_requests_total" and s.labels.get("status") == "5xx"))
    started = [s.value for s in samples if s.name == "process_start_time_seconds"]
    return Sample(counters, tuple(s.value for s in samples if s.name == RUNNING), max(started) if started else None)


ESCAPED = "\n".join([
    "# TYPE vllm:spec_decode_num_drafts counter",
    'vllm:spec_decode_num_drafts_total{engine="0",model_name="a \\"quoted\\" ,position=\\"9\\" name"} 10 1796000000000',
    'vllm:spec_decode_num_drafts_total{engine="1",model_name="b\\\\"} 5.5e+01',
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1",engine="0",} 3',
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",position="0"} 7',
    "vllm:spec_decode_num_draft_tokens_total 30",
    'vllm:num_requests_running{engine="0"} 4',
    'vllm:num_requests_running{engine="1"} 0',
    "vllm:spec_decode_num_drafts_totality 1000",  # another name that starts the same: not read
    "process_start_time_seconds 1.7e9",
]) + "\n"


@pytest.mark.parametrize("page", ["vllm-0.32.0-ngram-k3.txt", "vllm-0.32.0-draft-model-random-k3.txt", "escaped"])
def test_the_one_pass_parser_reads_what_prometheus_clients_parser_reads(page: str) -> None:
    """The scraper reads only the lines it needs, once (it parsed each whole page twice with
    prometheus_client: half its CPU at 2000 CRs); on vLLM's own pages and on label values with
    escapes, commas and a quoted position it reads the same numbers."""
    text = ESCAPED if page == "escaped" else (FIXTURES / page).read_text()
    assert parse_sample(text) == _by_prometheus_client(text)
    assert parse_counters(text) == parse_sample(text).counters


@pytest.mark.parametrize("line", [
    'vllm:spec_decode_num_drafts_total{engine="0" 10',  # the label set does not close
    'vllm:spec_decode_num_drafts_total{engine=0} 10',  # an unquoted label value
    "vllm:spec_decode_num_drafts_total ten",
    "vllm:spec_decode_num_drafts_total 10 20 30",
    'vllm:spec_decode_num_drafts_total{engine="0"}10',
    "vllm:spec_decode_num_drafts_total",
])
def test_a_line_of_a_sample_read_that_does_not_parse_refuses_the_page(line: str) -> None:
    with pytest.raises(MetricsError, match="not a Prometheus metrics text: a vllm:spec_decode_num_drafts_total line does not parse"):
        parse_counters(f'vllm:spec_decode_num_drafts_total{{engine="1"}} 1\n{line}\n')


def test_lines_the_scraper_does_not_read_are_not_parsed() -> None:
    text = "vllm:some_other_metric{{{ not a sample at all\nvllm:spec_decode_num_drafts_total 12\n"
    assert parse_counters(text).drafts == 12


def test_a_per_position_sample_without_an_integer_position_is_refused() -> None:
    for labels in ('engine="0"', 'position="first"'):
        with pytest.raises(MetricsError, match="no integer position label"):
            parse_counters(f"vllm:spec_decode_num_drafts_total 1\nvllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels}}} 1\n")


def test_a_megabyte_line_is_read_once() -> None:
    """A hostile label value of 4 MiB: refused or read, in one pass (the label pattern cannot
    backtrack), not hung."""
    huge = "x" * (4 * 1024 * 1024)
    assert parse_counters(f'vllm:spec_decode_num_drafts_total{{model_name="{huge}"}} 3\n').drafts == 3
    with pytest.raises(MetricsError, match="does not parse"):
        parse_counters(f'vllm:spec_decode_num_drafts_total{{model_name="{huge}\\"}} 3\n')


# -- the window --------------------------------------------------------------------------------
def test_window_sums_pods_and_forgets_old_samples() -> None:
    w = Window(seconds=100)
    assert not w.observe("a", 0, Counters(10, 30, 15, (8, 5, 2)))  # first sample: a baseline only
    assert w.increase(0) == Counters()
    assert w.observe("a", 60, Counters(20, 60, 30, (16, 10, 4)))
    assert not w.observe("b", 60, Counters(1000, 3000, 0, (0, 0, 0)))  # b started long ago
    assert w.observe("b", 120, Counters(1010, 3030, 3, (3, 0, 0)))
    assert w.increase(120) == Counters(20, 60, 18, (11, 5, 2))
    # At 200 a's samples at 0 and 60 are older than the window: 60 is the baseline, nothing after it.
    assert not w.observe("a", 200, Counters(20, 60, 30, (16, 10, 4)))
    assert w.increase(200) == Counters(10, 30, 3, (3, 0, 0))
    # At 400 every sample is older than the window: both pods are forgotten.
    assert w.increase(400) == Counters() and w.pods == []


def test_window_counts_a_restart_when_the_process_start_time_moves_on() -> None:
    w = Window(seconds=600)
    w.observe("a", 0, Counters(100, 300, 200, (90, 70, 40)), started=1000.0)
    assert w.observe("a", 60, Counters(5, 15, 6, (4, 2, 0)), started=1050.0)  # a new process: 5 drafts since
    assert w.increase(60) == Counters(5, 15, 6, (4, 2, 0))
    # A new process that already counted more than the old one had: all of it is new.
    assert w.observe("a", 120, Counters(500, 1500, 600, (300, 200, 100)), started=1100.0)
    assert w.increase(120) == Counters(505, 1515, 606, (304, 202, 100))


@pytest.mark.parametrize("before, after, words", [
    (1000.0, 1000.0, "process_start_time_seconds did not change: not a restart"),
    (1000.0, 900.0, "process_start_time_seconds went back: not a restart"),
    (None, None, "the server exports no process_start_time_seconds"),
    (1000.0, None, "the server exports no process_start_time_seconds"),
])
def test_a_count_that_goes_down_in_the_same_process_is_not_counted(before: float | None, after: float | None, words: str) -> None:
    w = Window(seconds=600)
    w.observe("a", 0, Counters(100, 300, 200, (90, 70, 40)), started=before)
    with pytest.raises(NotARestart, match=words) as refused:
        w.observe("a", 60, Counters(100, 300, 200, (90, 70, 1)), started=after)  # only one position went down
    assert "accepted_tokens_per_pos[2]" in str(refused.value)
    # Nothing recorded: the last good sample stays the baseline.
    assert w.observe("a", 120, Counters(110, 330, 210, (95, 75, 40)), started=before)
    assert w.increase(120) == Counters(10, 30, 10, (5, 5, 0))


def test_counters_that_fall_on_every_scrape_count_nothing() -> None:
    """A pod whose counters swing between 60 000 and 1 on every scrape, its start time still:
    before, each fall counted as a restart and each rise as new drafts (2.94 M drafts in 100
    scrapes here; 5.9 M and "Effective 2.21x" in the issue); now every low sample is refused
    and the high ones count what really moved: nothing."""
    w = Window(seconds=6000)
    high, low = Counters(60_000, 180_000, 150_000, (55_000, 50_000, 45_000)), Counters(1, 3, 3, (1, 1, 1))
    refused = 0
    for scrape in range(100):
        try:
            w.observe("swing", scrape * 2.0, low if scrape % 2 else high, started=1000.0)
        except NotARestart:
            refused += 1
    assert refused == 50 and w.increase(200.0).drafts == 0 and w.increase(200.0) == Counters(0, 0, 0, (0, 0, 0))


def test_parse_sample_reads_vllms_process_start_time() -> None:
    sample = parse_sample((FIXTURES / "vllm-0.32.0-ngram-k3.txt").read_text())
    assert sample.started == pytest.approx(1.79627992782e9)
    with pytest.raises(MetricsError, match="process_start_time_seconds is nan"):
        parse_sample((FIXTURES / "vllm-0.32.0-ngram-k3.txt").read_text().replace("process_start_time_seconds 1.79627992782e+09",
                                                                                 "process_start_time_seconds NaN"))
