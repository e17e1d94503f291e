"""Our verdict equals vLLM's for every case of the grid (tests/parity/cases.py)."""

from __future__ import annotations

import pytest

from cases import TPS, grid

CASES = grid()


def test_grid_is_the_promised_size() -> None:
    """Hundreds of cases, every TP of the brief, and both verdicts represented."""
    assert len(CASES) >= 500
    assert {c.tp for c in CASES} >= set(TPS)
    methods = {c.method for c in CASES}
    assert methods >= {"dspark", "eagle", "eagle3", "mtp", "draft_model", "dflash", "ngram", "medusa",
                       "mlp_speculator", "suffix"}


def test_both_verdicts_occur(parity_rows) -> None:
    """A grid that vLLM accepts (or refuses) entirely would prove nothing."""
    accepted = sum(r.vllm_ok for r in parity_rows)
    assert 0 < accepted < len(parity_rows)


def test_the_installed_release_judges(parity_rows) -> None:
    """The image tag picks the installed release's own rule set, never a neighbour's."""
    import vllm

    assert {r.judged_by for r in parity_rows} == {vllm.__version__}


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.id for c in CASES])
def test_same_verdict_as_vllm(parity_rows, index: int) -> None:
    row = parity_rows[index]
    assert row.case == CASES[index]
    assert row.ours_ok == row.vllm_ok, (
        f"vLLM {'accepts' if row.vllm_ok else 'refuses: ' + row.vllm_stage + ': ' + row.vllm_error}; "
        f"specdeploy {'accepts' if row.ours_ok else 'refuses: ' + '; '.join(row.our_errors)}"
    )

