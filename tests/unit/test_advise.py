"""`specdeploy advise` on /metrics texts saved from vLLM 0.32.0's CPU build (tests/fixtures/
metrics): the console script as a user runs it, against values computed here from the raw lines."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.metrics_server import serve_metrics

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
NGRAM = FIXTURES / "vllm-0.32.0-ngram-k3.txt"  # greedy looping output: ngram accepts
RANDOM_DRAFT = FIXTURES / "vllm-0.32.0-draft-model-random-k3.txt"  # random-weight draft: accepts nothing
EXE = shutil.which("specdeploy", path=str(Path(sys.executable).parent)) or "specdeploy"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, "advise", *args], capture_output=True, text=True, timeout=120)


def raw(path: Path, name: str) -> list[float]:
    """The values of one counter's samples, read with a regex (not the parser under test)."""
    return [float(v) for v in re.findall(rf"^vllm:{name}_total{{[^}}]*}} (\S+)$", path.read_text(), re.M)]


def test_advise_json_on_a_saved_ngram_metrics_text() -> None:
    result = run("--metrics", str(NGRAM), "--method", "ngram", "-o", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    (drafts,), (tokens,), (accepted,) = raw(NGRAM, "spec_decode_num_drafts"), raw(NGRAM, "spec_decode_num_draft_tokens"), raw(NGRAM, "spec_decode_num_accepted_tokens")
    per_pos = raw(NGRAM, "spec_decode_num_accepted_tokens_per_pos")
    assert (out["drafts"], out["draftTokens"], out["acceptedTokens"]) == (drafts, tokens, accepted)
    assert out["acceptanceRate"] == round(accepted / tokens, 4)
    assert out["meanAcceptanceLength"] == round(1 + accepted / drafts, 4)
    assert out["perPositionAcceptance"] == [round(p / drafts, 4) for p in per_pos]
    # ngram costs no model pass: speedup = tokens per step = 1 + sum of the per-position acceptances.
    assert out["draftCost"] == 0.0
    assert out["predictedSpeedup"] == round(1 + sum(per_pos) / drafts, 3)
    assert out["numSpeculativeTokens"] == len(per_pos) == 3
    assert out["speculationEffective"]["status"] == "True"
    ks = [p["k"] for p in out["predictions"]]
    assert ks == [1, 2, 3, 4, 5] and [p["extrapolated"] for p in out["predictions"]] == [False] * 3 + [True] * 2


def test_advise_flags_a_random_weight_draft_and_exits_1() -> None:
    result = run("--metrics", str(RANDOM_DRAFT), "--method", "draft_model", "--draft-cost", "0.5")
    assert result.returncode == 1, result.stdout + result.stderr
    (drafts,) = raw(RANDOM_DRAFT, "spec_decode_num_drafts")
    assert f"in {drafts:.0f} drafts" in result.stdout
    assert result.stdout.startswith("SpeculationEffective=False (AcceptanceCollapsed)")
    # Nothing accepted: E(k) = 1, speedup 1 / (1 + 0.5 k): k=1 0.667x ... k=3 0.400x.
    assert re.search(r"^\s+1\s+1\.000\s+0\.667x.*recommended", result.stdout, re.M), result.stdout
    assert re.search(r"^\s+3\s+1\.000\s+0\.400x.*in force", result.stdout, re.M), result.stdout


def test_advise_reads_a_url() -> None:
    with serve_metrics(NGRAM.read_bytes) as port:
        from_url = run("--metrics", f"http://127.0.0.1:{port}/metrics", "-o", "json")
    from_file = run("--metrics", str(NGRAM), "-o", "json")
    assert from_url.returncode == 0, from_url.stderr
    assert json.loads(from_url.stdout) == json.loads(from_file.stdout)


def test_advise_usage_and_io_errors_exit_2(tmp_path: Path) -> None:
    not_metrics = tmp_path / "page.html"
    not_metrics.write_text("<html>{{ not metrics }}</html>\n")
    no_spec = tmp_path / "plain.txt"
    no_spec.write_text('vllm:num_requests_running{engine="0"} 0.0\n')
    for args, message in [
        (("--metrics", str(not_metrics)), "not a Prometheus metrics text"),
        (("--metrics", str(no_spec)), "speculative decoding is not enabled"),
        (("--metrics", str(tmp_path / "missing.txt")), "No such file"),
        (("--metrics", "http://127.0.0.1:1/metrics"), "refused"),
        (("--metrics", str(NGRAM), "--draft-cost", "-1"), "must be >= 0"),
        (("--metrics", str(NGRAM), "--num-speculative-tokens", "0"), "expected an integer >= 1"),
    ]:
        result = run(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert message in result.stderr, (args, result.stderr)


LLAMA_EAGLE3 = Path(__file__).resolve().parents[2] / "examples" / "llama-3.1-8b-eagle3.yaml"


def test_advise_with_the_cr_reports_k_by_batch_size_and_the_crossover(tmp_path: Path) -> None:
    # The ngram fixture read as the Llama-8B EAGLE-3 CR's on one H100, at 700 running requests, with its
    # acceptance halved per position (50/25/12.5 %): at the fixture's 100 % the calibrated model has
    # speculation pay up to batch 6262 (docs/speculation-under-load.md), past vLLM's 1024 sequences.
    metrics = tmp_path / "metrics.txt"
    text = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", r"\1 700.0", NGRAM.read_text(), flags=re.M)
    for position, accepted in (("0", 60), ("1", 30), ("2", 15)):
        text = re.sub(rf'^(vllm:spec_decode_num_accepted_tokens_per_pos_total\{{[^}}]*position="{position}"\}}) \S+$',
                      rf"\g<1> {accepted}.0", text, flags=re.M)
    text = re.sub(r"^(vllm:spec_decode_num_accepted_tokens_total\{[^}]*\}) \S+$", r"\1 105.0", text, flags=re.M)
    metrics.write_text(text)
    out = run("--metrics", str(metrics), "-f", str(LLAMA_EAGLE3), "-o", "json")
    report = json.loads(out.stdout)
    rows = report["byBatchSize"]
    assert [r["batchSize"] for r in rows] == [2**i for i in range(11)]  # vLLM's 1024 max sequences on an H100
    ks = [r["recommendedNumSpeculativeTokens"] for r in rows]
    assert ks == sorted(ks, reverse=True) and ks[0] > 0 and ks[-1] == 0
    crossover = report["crossoverBatchSize"]
    assert all((r["recommendedNumSpeculativeTokens"] == 0) == (r["batchSize"] >= crossover) for r in rows)
    assert report["observedLoad"]["typicalBatchSize"] == 700
    assert report["speculationEffective"]["reason"] == "NoSpeedupAtLoad" and out.returncode == 1
    assert "H100-80GB" in report["costModel"]
    # The opt-in schedule (vLLM 0.32.0 has the key): the same picks as vLLM's ranges, from batch 1 to 1024.
    ranges = report["speculativeConfig"]["num_speculative_tokens_per_batch_size"]
    assert ranges[0][0] == 1 and ranges[-1][1] == 1024
    for row in rows:
        assert next(k for start, end, k in ranges if start <= row["batchSize"] <= end) == row["recommendedNumSpeculativeTokens"]
    text = run("--metrics", str(metrics), "-f", str(LLAMA_EAGLE3)).stdout
    assert f"crossover: batch {crossover}" in text and "best k" in text
    assert "opt-in (off by default)" in text and "#49548" in text


def test_advise_with_a_cr_without_a_gpu_product_says_the_cost_model_needs_one(tmp_path: Path) -> None:
    cr = tmp_path / "cr.yaml"
    cr.write_text(re.sub(r"  resources:\n    gpu:\n      product: H100-80GB\n", "", LLAMA_EAGLE3.read_text()))
    out = run("--metrics", str(NGRAM), "-f", str(cr), "-o", "json")
    assert out.returncode == 2 and "spec.resources.gpu.product" in out.stdout + out.stderr
