"""A sample of the broad hostile corpus (tests/fuzz/broad.py) through `plan -f` and `validate`,
each in a forked process with a 10 s limit: no traceback, no hang, no run over 1 GiB, every
refusal exit 1 with an error finding naming a field or exit 2 with a message in our words
(not Python's). About 40 s for the default 400 + 100 cases; SPECDEPLOY_FUZZ_COUNT runs more
(the recorded run: `python -m tests.fuzz.broad --count 12000`, bench/RESULTS.md)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from specdeploy.cli import common as cli_common
from tests.fuzz.broad import _judged, _warm_up, plan_cases, run_forked, validate_cases

COUNT = int(os.environ.get("SPECDEPLOY_FUZZ_COUNT", "400"))


def test_a_broad_hostile_corpus_gets_a_clear_refusal_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a Hub repo id is read from the (empty) cache, never waited on
    monkeypatch.setattr(cli_common, "_HUB_LOCAL_ONLY", None)
    _warm_up()
    problems, codes = [], set()
    for case in itertools.chain(plan_cases(COUNT, seed=5), validate_cases(COUNT // 4, seed=5)):
        outcome = _judged(run_forked(case, tmp_path))
        codes.add(outcome.code)
        if outcome.problem:
            problems.append(f"{outcome.argv[0]} [{outcome.what}]: {outcome.problem}")
    assert not problems, "\n".join(problems[:20])
    assert codes == {0, 1, 2}  # the corpus reaches every verdict (it is not all refused at the door)


def test_the_schema_check_of_accepted_children_catches_what_the_api_server_refuses() -> None:
    """The fuzz suites' check of accepted documents (tests/fuzz/schemas.py) can fail: a pod
    field Kubernetes does not have, and a Service name over 63 characters."""
    from tests.fuzz.schemas import child_problems

    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
                  "spec": {"selector": {}, "template": {"spec": {"containers": [], "affinity": {"foo": 1}}}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s" * 64}, "spec": {}}
    problems = child_problems([deployment, service])
    assert any("spec.template.spec.affinity" in p and "'foo' was unexpected" in p for p in problems), problems
    assert any("s" * 64 in p and "DNS-1035" in p for p in problems), problems
