"""Draft canaries, pure: the decision from both arms' counters, the phase step, the arms' workloads."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Sequence

import pytest

from specdeploy.api.conditions import Reason
from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.render import render_manifests
from specdeploy.rollout.arms import (ARM_LABEL, CANARY, STABLE, arm_of, canary_workload, failed, live_draft, promoting, ready,
                                     rolled_out, with_draft)
from specdeploy.rollout.decision import MIN_DRAFTS, Arm, decide, figures
from specdeploy.rollout.phase import Seen, canary_replicas, draft_key, step
from specdeploy.telemetry import Counters, Window
from specdeploy.telemetry.metrics import parse_counters
from tests.unit.test_render import MULTI, make_plan
from tests.unit.test_render import spec as render_spec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


def counters_of(lengths: Sequence[int], k: int, **extra: float) -> Counters:
    """The counters vLLM would show after drafts whose accepted lengths are `lengths` (each 0..k)."""
    per_position = tuple(float(sum(1 for x in lengths if x >= i + 1)) for i in range(k))
    return Counters(float(len(lengths)), float(k * len(lengths)), float(sum(lengths)), per_position, **extra)


def geometric(alpha: float, k: int, n: int, seed: int) -> list[int]:
    """n drafts, each token accepted with probability alpha until the first rejection."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = 0
        while x < k and rng.random() < alpha:
            x += 1
        out.append(x)
    return out


def arm(alpha: float, n: int, *, k: int = 3, seed: int = 1, **kw: Any) -> Arm:
    extra = {key: kw.pop(key) for key in ("responses", "server_errors", "output_tokens") if key in kw}
    return Arm(counters_of(geometric(alpha, k, n, seed), k, **extra), k=k, cost=0.1, **kw)


# -- the decision ------------------------------------------------------------------------------
def test_no_drafts_waits_and_says_how_many_are_needed() -> None:
    d = decide(Arm(Counters(), k=3, cost=0.1), Arm(Counters(), k=3, cost=0.1))
    assert (d.action, d.why) == ("Wait", Reason.NOT_ENOUGH_DRAFTS)
    assert f"at least {MIN_DRAFTS}" in d.message and d.canary.speedup is None


def test_too_few_drafts_in_either_arm_waits_even_when_the_canary_looks_bad() -> None:
    d = decide(arm(0.0, MIN_DRAFTS - 1), arm(0.9, 5000))
    assert (d.action, d.why) == ("Wait", Reason.NOT_ENOUGH_DRAFTS)
    d = decide(arm(0.0, 5000), arm(0.9, MIN_DRAFTS - 1))
    assert d.action == "Wait"


def test_a_draft_as_good_as_the_stable_one_is_promoted() -> None:
    d = decide(arm(0.8, 2000, seed=2), arm(0.8, 20000, seed=3))
    assert (d.action, d.why) == ("Promote", Reason.CANARY_NOT_WORSE)
    assert d.lower is not None and d.lower >= 0 and "not worse by more than 10%" in d.message


def test_a_draft_that_accepts_half_as_much_is_rolled_back() -> None:
    d = decide(arm(0.4, 2000, seed=4), arm(0.8, 20000, seed=5))
    assert (d.action, d.why) == ("RollBack", Reason.CANARY_WORSE)
    assert d.upper is not None and d.upper < 0
    assert d.canary.acceptance_rate < d.stable.acceptance_rate / 1.5


def test_a_random_draft_that_accepts_nothing_is_rolled_back_at_the_minimum_count() -> None:
    d = decide(arm(0.0, MIN_DRAFTS), arm(0.95, MIN_DRAFTS, seed=6))
    assert (d.action, d.why) == ("RollBack", Reason.CANARY_WORSE)


def test_a_close_call_on_few_drafts_waits_for_more() -> None:
    """0.75 against 0.8 is inside a 10 % margin on speedup, but 150 drafts cannot show it."""
    d = decide(arm(0.75, 150, seed=7), arm(0.8, 150, seed=8))
    assert (d.action, d.why) == ("Wait", Reason.NOT_ENOUGH_DRAFTS)
    assert d.lower is not None and d.lower < 0 <= d.upper and "straddle" in d.message


def test_waiting_ends_on_the_counts_at_max_drafts() -> None:
    """A canary exactly at the margin: the bounds straddle 0 at any count; max_drafts ends it."""
    stable = arm(0.8, 2000, seed=9)
    s = figures(stable).speedup
    # Scale the canary's cost so that its speedup is 0.9 x the stable's (the margin).
    canary = Arm(stable.counters, k=3, cost=(1 + 0.1 * 3) / 0.9 / 3 - 1 / 3)
    assert figures(canary).speedup == pytest.approx(0.9 * s)
    assert decide(canary, stable).action == "Wait"
    d = decide(canary, stable, max_drafts=2000)
    assert d.why == Reason.WITHIN_MARGIN and d.action in ("Promote", "RollBack")


def test_a_larger_k_is_judged_by_speedup_not_by_its_lower_acceptance_rate() -> None:
    """k=5 accepts a smaller share of its draft tokens than k=2 at the same per-token alpha, yet
    yields more tokens per step; the acceptance rate alone would have rolled it back."""
    stable = arm(0.9, 5000, k=2, seed=10)
    canary = Arm(counters_of(geometric(0.9, 5, 5000, 11), 5), k=5, cost=0.02)
    stable = Arm(stable.counters, k=2, cost=0.02)
    d = decide(canary, stable)
    assert d.canary.acceptance_rate < d.stable.acceptance_rate
    assert d.canary.mean_accepted_length > d.stable.mean_accepted_length
    assert (d.action, d.why) == ("Promote", Reason.CANARY_NOT_WORSE)


def test_the_variance_comes_from_the_per_position_counts() -> None:
    """E[X] and Var[X] of the accepted length, read from vLLM's per-position counters, equal
    the sample's own: the bound needs nothing vLLM does not count."""
    lengths = geometric(0.7, 4, 3000, 12)
    c = Arm(counters_of(lengths, 4), k=4, cost=0.0)
    f = figures(c)
    mean = sum(lengths) / len(lengths)
    assert f.mean_accepted_length == pytest.approx(1 + mean)
    var = sum((x - mean) ** 2 for x in lengths) / len(lengths)
    from specdeploy.rollout.decision import _speedup

    assert _speedup(c).variance == pytest.approx(var / len(lengths))


def test_per_position_counts_above_a_shallower_position_are_clipped() -> None:
    """Summed over pods of mixed k, or torn by a scrape: position 1 above position 0 is not taken as is."""
    torn = Counters(100.0, 300.0, 150.0, (50.0, 80.0, 20.0))
    f = figures(Arm(torn, k=3, cost=0.0))
    assert f.speedup == pytest.approx(1 + 0.5 + 0.5 + 0.2)


def test_a_canary_not_ready_waits_and_compares_nothing() -> None:
    d = decide(arm(0.0, 5000, ready=False), arm(0.9, 5000))
    assert (d.action, d.why) == ("Wait", Reason.CANARY_STARTING)


def test_a_canary_that_cannot_come_up_is_rolled_back() -> None:
    d = decide(arm(0.9, 0, ready=False, failed="ProgressDeadlineExceeded: ReplicaSet has timed out"), arm(0.9, 5000))
    assert (d.action, d.why) == ("RollBack", Reason.CANARY_NOT_READY)
    assert "ProgressDeadlineExceeded" in d.message


def test_a_canary_serving_5xx_is_rolled_back_even_with_better_acceptance() -> None:
    d = decide(arm(0.95, 5000, responses=100, server_errors=3), arm(0.5, 5000, responses=900, server_errors=0))
    assert (d.action, d.why) == ("RollBack", Reason.CANARY_ERRORS)
    assert "3 of 100" in d.message


def test_errors_at_the_stable_arms_own_rate_do_not_roll_back() -> None:
    d = decide(arm(0.8, 5000, seed=13, responses=100, server_errors=1),
               arm(0.8, 5000, seed=14, responses=1000, server_errors=20))
    assert d.action == "Promote"


def test_tokens_per_second_per_running_request_is_reported_not_decisive() -> None:
    c = arm(0.8, 1000, output_tokens=6000, seconds=60, running=2)
    f = figures(c)
    assert f.output_tokens_per_second_per_request == pytest.approx(50.0)
    assert figures(arm(0.8, 1000)).output_tokens_per_second_per_request is None


def test_a_counter_reset_on_a_canary_pod_restart_is_counted_from_the_new_process() -> None:
    """The arm's counts come from the restart-aware window: a pod that restarts neither loses
    what it counted before nor has its new counts subtracted from the old ones."""
    window = Window(float("inf"))
    bad = geometric(0.1, 3, 400, 15)
    window.observe("canary-0", 0, counters_of([], 3), started=100.0)
    window.observe("canary-0", 1, counters_of(bad[:300], 3), started=100.0)
    window.observe("canary-0", 2, counters_of(bad[300:], 3), started=200.0)  # restarted: counts began again
    total = window.increase(3)
    assert total.drafts == 400
    d = decide(Arm(total, k=3, cost=0.1), arm(0.9, 5000))
    assert (d.action, d.why) == ("RollBack", Reason.CANARY_WORSE)


# -- the phase ---------------------------------------------------------------------------------
def canary_spec(**draft: Any) -> SpeculativeDeploymentSpec:
    base = render_spec().model_dump(mode="json", by_alias=True, exclude_none=True)
    base["draft"] = {**base["draft"], **draft}
    base["rollout"] = {**base.get("rollout", {}), "strategy": "Canary"}
    return SpeculativeDeploymentSpec.model_validate(base)


def with_action(spec: SpeculativeDeploymentSpec, action: str) -> SpeculativeDeploymentSpec:
    body = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    body["rollout"]["canary"]["action"] = action
    return SpeculativeDeploymentSpec.model_validate(body)


OLD = canary_spec(numSpeculativeTokens=3)
NEW = canary_spec(numSpeculativeTokens=5)
PROMOTE = decide(arm(0.8, 2000, seed=2), arm(0.8, 20000, seed=3))
ROLLBACK = decide(arm(0.0, 2000), arm(0.8, 2000))
WAIT = decide(arm(0.8, 10), arm(0.8, 10))


def test_draft_key_follows_the_draft_and_nothing_else() -> None:
    assert draft_key(OLD) != draft_key(NEW)
    body = OLD.model_dump(mode="json", by_alias=True, exclude_none=True)
    body["replicas"] = 7
    assert draft_key(SpeculativeDeploymentSpec.model_validate(body)) == draft_key(OLD)


def test_the_default_strategy_keeps_the_rolling_update() -> None:
    plain = render_spec()
    assert plain.rollout.strategy == "RollingUpdate"
    s = step(plain, stable_draft="0" * 16, seen=Seen(), decision=None)
    assert (s.phase, s.reason, s.apply_stable, s.canary) == (None, Reason.STABLE, True, False)


def test_no_canary_for_a_new_object_a_multi_node_plan_or_zero_replicas() -> None:
    for kwargs in ({"stable_draft": None}, {"stable_draft": draft_key(OLD), "multi_node": True}):
        s = step(NEW, seen=Seen(), decision=None, **kwargs)
        assert (s.phase, s.apply_stable, s.canary) == (None, True, False)


def test_a_draft_change_starts_a_canary_and_leaves_the_stable_arm_alone() -> None:
    s = step(NEW, stable_draft=draft_key(OLD), seen=Seen(), decision=None)
    assert (s.phase, s.reason, s.apply_stable, s.canary, s.draft) == ("Canary", Reason.CANARY_STARTING, False, True, draft_key(NEW))


def test_a_decision_about_another_draft_is_not_taken() -> None:
    s = step(NEW, stable_draft=draft_key(OLD), seen=Seen("Canary", "some-other-dr"), decision=PROMOTE)
    assert (s.phase, s.reason, s.canary) == ("Canary", Reason.CANARY_STARTING, True)


def test_the_canary_waits_for_its_decision() -> None:
    s = step(NEW, stable_draft=draft_key(OLD), seen=Seen("Canary", draft_key(NEW)), decision=WAIT)
    assert (s.phase, s.reason, s.apply_stable, s.canary) == ("Canary", Reason.NOT_ENOUGH_DRAFTS, False, True)


def test_promotion_rolls_the_stable_arm_then_settles_as_promoted() -> None:
    key = draft_key(NEW)
    s = step(NEW, stable_draft=draft_key(OLD), seen=Seen("Canary", key), decision=PROMOTE)
    assert (s.phase, s.reason, s.apply_stable, s.canary) == ("Promoting", Reason.CANARY_NOT_WORSE, True, False)
    # The stable workload carries the new draft but is still rolling: Promoting.
    s = step(NEW, stable_draft=key, seen=Seen("Promoting", key), decision=None, stable_rolled_out=False)
    assert (s.phase, s.reason, s.apply_stable) == ("Promoting", Reason.PROMOTING, True)
    s = step(NEW, stable_draft=key, seen=Seen("Promoting", key), decision=None, stable_rolled_out=True)
    assert (s.phase, s.reason) == ("Promoted", Reason.PROMOTED)
    s = step(NEW, stable_draft=key, seen=Seen("Promoted", key), decision=None)
    assert s.phase == "Promoted"
    # A promotion whose stable patch has not landed yet stays Promoting (no new canary).
    s = step(NEW, stable_draft=draft_key(OLD), seen=Seen("Promoting", key), decision=None)
    assert (s.phase, s.apply_stable, s.canary) == ("Promoting", True, False)


def test_rollback_deletes_only_the_canary_and_never_tries_the_same_draft_again() -> None:
    key = draft_key(NEW)
    s = step(NEW, stable_draft=draft_key(OLD), seen=Seen("Canary", key), decision=ROLLBACK)
    assert (s.phase, s.reason, s.apply_stable, s.canary, s.rejected) == ("RolledBack", Reason.CANARY_WORSE, False, False, key)
    again = step(NEW, stable_draft=draft_key(OLD), seen=Seen("RolledBack", key, key), decision=None)
    assert (again.phase, again.reason, again.apply_stable, again.canary) == ("RolledBack", Reason.ROLLED_BACK, False, False)
    assert "spec.rollout.canary.action: Promote" in again.message


def test_after_a_rollback_a_new_draft_gets_a_canary_and_the_old_draft_a_plain_stable() -> None:
    rejected = draft_key(NEW)
    third = canary_spec(numSpeculativeTokens=4)
    s = step(third, stable_draft=draft_key(OLD), seen=Seen("RolledBack", rejected, rejected), decision=None)
    assert (s.phase, s.canary, s.rejected) == ("Canary", True, rejected)
    s = step(OLD, stable_draft=draft_key(OLD), seen=Seen("RolledBack", rejected, rejected), decision=None)
    assert (s.phase, s.apply_stable) == (None, True)


def test_manual_promote_goes_on_after_a_rollback_and_manual_abort_rolls_back() -> None:
    key = draft_key(NEW)
    s = step(with_action(NEW, "Promote"), stable_draft=draft_key(OLD), seen=Seen("RolledBack", key, key), decision=None)
    assert (s.phase, s.reason, s.apply_stable, s.canary) == ("Promoting", Reason.MANUAL_PROMOTE, True, False)
    s = step(with_action(NEW, "Abort"), stable_draft=draft_key(OLD), seen=Seen("Canary", key), decision=WAIT)
    assert (s.phase, s.reason, s.apply_stable, s.canary, s.rejected) == ("RolledBack", Reason.MANUAL_ABORT, False, False, key)


def test_seen_takes_only_short_strings_from_status() -> None:
    assert Seen.of({"phase": 3, "draft": "x" * 65, "rejectedDraft": "abc"}) == Seen(None, None, "abc")
    assert Seen.of(None) == Seen() and Seen.of("junk") == Seen()


@pytest.mark.parametrize(("stable", "share", "pods"), [(9, 10, 1), (1, 10, 1), (18, 10, 2), (4, 50, 4), (0, 10, 1)])
def test_canary_replicas_follow_the_share_with_at_least_one_pod(stable: int, share: int, pods: int) -> None:
    assert canary_replicas(stable, share) == pods


def test_the_canary_spec_is_validated_and_named_in_errors() -> None:
    from pydantic import ValidationError

    body = OLD.model_dump(mode="json", by_alias=True, exclude_none=True)
    body["rollout"]["canary"]["share"] = 80
    with pytest.raises(ValidationError, match="share"):
        SpeculativeDeploymentSpec.model_validate(body)
    body["rollout"]["canary"] = {"action": "Later"}
    with pytest.raises(ValidationError, match="action"):
        SpeculativeDeploymentSpec.model_validate(body)


# -- the arms' workloads ------------------------------------------------------------------------
def stable_deployment() -> dict[str, Any]:
    (dep,) = [m for m in render_manifests(NEW, make_plan(), name="llama", namespace="ml") if m["kind"] == "Deployment"]
    return with_draft(dep, draft_key(NEW))


def test_the_canary_is_the_rendered_workload_renamed_with_the_arm_label() -> None:
    stable = stable_deployment()
    canary = canary_workload(stable, 1)
    assert canary["metadata"]["name"] == "llama-canary" and canary["spec"]["replicas"] == 1
    assert canary["spec"]["template"]["metadata"]["labels"][ARM_LABEL] == CANARY
    assert canary["spec"]["selector"]["matchLabels"][ARM_LABEL] == CANARY
    # Same pod spec (the new draft's args), and still selected by the Service's selector.
    assert canary["spec"]["template"]["spec"] == stable["spec"]["template"]["spec"]
    assert stable["spec"]["selector"]["matchLabels"].items() < canary["spec"]["template"]["metadata"]["labels"].items()
    assert ARM_LABEL not in stable["spec"]["template"]["metadata"]["labels"]
    assert arm_of(canary["spec"]["template"]["metadata"]["labels"]) == CANARY
    assert arm_of(stable["spec"]["template"]["metadata"]["labels"]) == STABLE and arm_of(None) == STABLE
    assert live_draft(canary) == draft_key(NEW)


def test_a_multi_node_workload_has_no_canary() -> None:
    (lws,) = [m for m in render_manifests(NEW, MULTI, name="llama", namespace="ml") if m["kind"] == "LeaderWorkerSet"]
    with pytest.raises(ValueError, match="spec.rollout.strategy"):
        canary_workload(lws, 1)


def test_promotion_never_takes_a_ready_pod_away() -> None:
    promoted = promoting(stable_deployment(), 2)
    assert promoted["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 2, "maxUnavailable": 0}
    assert promoting(stable_deployment(), 0)["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 1


def test_readiness_failure_and_rollout_read_from_untrusted_status() -> None:
    live = {"metadata": {"generation": 3}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}}
    assert ready(live) and rolled_out(live) and failed(live) is None
    assert not rolled_out({**live, "status": {**live["status"], "observedGeneration": 2}})
    assert not rolled_out({**live, "status": {**live["status"], "replicas": 3}})  # an old pod still up
    assert not ready({"spec": {"replicas": 2}, "status": {"readyReplicas": "2"}})
    assert not ready("junk") and not rolled_out(None) and failed([]) is None
    stuck = {"status": {"conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                                        "message": "ReplicaSet has timed out"}]}}
    assert failed(stuck).startswith("ProgressDeadlineExceeded")
    assert live_draft({"metadata": {"annotations": {"specdeploy.io/draft": 5}}}) is None


# -- the counters each arm needs ----------------------------------------------------------------
def test_the_real_page_yields_output_tokens_and_responses() -> None:
    c = parse_counters((FIXTURES / "vllm-0.32.0-draft-model-random-k3.txt").read_text())
    assert c.output_tokens == 192 and c.responses == 4 and c.server_errors == 0


def test_5xx_responses_are_counted_as_server_errors() -> None:
    page = (FIXTURES / "vllm-0.32.0-ngram-k3.txt").read_text()
    page += 'http_requests_total{handler="/v1/completions",method="POST",status="5xx"} 3.0\n'
    c = parse_counters(page)
    assert (c.responses, c.server_errors) == (15, 3)
    assert c.increase_since(c).server_errors == 0 and c.plus(c).server_errors == 6


# -- the arms applied ---------------------------------------------------------------------------
def rendered() -> list[dict[str, Any]]:
    return render_manifests(NEW, make_plan(), name="llama", namespace="ml")


def test_during_the_canary_the_stable_workload_is_held_as_it_is_live() -> None:
    from specdeploy.controller.reconcile.apply import merge_patch
    from specdeploy.rollout.phase import arm_children

    live = with_draft(render_manifests(OLD, make_plan(), name="llama", namespace="ml")[0], draft_key(OLD))
    live = {**live, "metadata": {**live["metadata"], "uid": "u1", "generation": 4, "resourceVersion": "9"},
            "status": {"readyReplicas": 2}}
    now = step(NEW, stable_draft=draft_key(OLD), seen=Seen(), decision=None)
    out = arm_children(rendered(), now, live_stable=live, canary_pods=1)
    stable, canary = out[0], out[-1]
    assert merge_patch(live, stable) == {}  # nothing to patch: the stable arm is not touched
    assert canary["metadata"]["name"] == "llama-canary" and live_draft(canary) == draft_key(NEW)
    assert [c["kind"] for c in out] == ["Deployment", "Service", "PodDisruptionBudget", "Deployment"]


def test_promoting_applies_the_new_draft_with_max_unavailable_zero_and_no_canary() -> None:
    from specdeploy.rollout.phase import arm_children

    now = step(NEW, stable_draft=draft_key(OLD), seen=Seen("Canary", draft_key(NEW)), decision=PROMOTE)
    out = arm_children(rendered(), now, live_stable={"metadata": {}}, canary_pods=1)
    assert live_draft(out[0]) == draft_key(NEW)
    assert out[0]["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert [c["metadata"]["name"] for c in out].count("llama-canary") == 0


def test_the_decision_the_telemetry_wrote_is_read_back_untrusted() -> None:
    from specdeploy.rollout.phase import Decided, rollout_status

    assert Decided.of({"decision": {"action": "Promote", "reason": "CanaryNotWorse", "message": "m"}}) == Decided(
        "Promote", "CanaryNotWorse", "m")
    assert Decided.of({"decision": {"action": "Explode"}}) is None and Decided.of("x") is None
    now = step(NEW, stable_draft=draft_key(OLD), seen=Seen("Canary", draft_key(NEW)),
               decision=Decided.of({"decision": {"action": "RollBack", "reason": Reason.CANARY_WORSE, "message": "worse"}}))
    assert (now.phase, now.reason) == ("RolledBack", Reason.CANARY_WORSE)
    status = rollout_status(now, canary_workload="Deployment/llama-canary", canary_pods=1,
                            previous={"draft": draft_key(NEW), "decision": {"action": "RollBack"}, "canary": {"drafts": 5}})
    assert status["phase"] == "RolledBack" and status["rejectedDraft"] == draft_key(NEW)
    assert status["decision"] == {"action": "RollBack"} and "canaryWorkload" not in status
    from specdeploy.api.status import RolloutStatus

    RolloutStatus.model_validate({**status, "decision": {"action": "RollBack", "reason": Reason.CANARY_WORSE}})


def test_a_multi_node_plan_refuses_the_canary_strategy_naming_the_field() -> None:
    from specdeploy.pipeline import ROLLOUT_CANARY_MULTI_NODE, _rollout_findings

    (finding,) = _rollout_findings(NEW, MULTI)
    assert finding.code == ROLLOUT_CANARY_MULTI_NODE and finding.field == "spec.rollout.strategy"
    assert _rollout_findings(NEW, make_plan()) == [] and _rollout_findings(render_spec(), MULTI) == []


def test_promoted_is_read_from_the_stable_workloads_own_status() -> None:
    from specdeploy.rollout.phase import promotion_done

    key = draft_key(NEW)
    promoting_status = {"phase": "Promoting", "draft": key, "decision": {"action": "Promote"}}
    workload = {**with_draft(stable_deployment(), key), "status": {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}}
    done = promotion_done(promoting_status, workload)
    assert done is not None and done["phase"] == "Promoted" and done["decision"] == {"action": "Promote"}
    assert promotion_done(promoting_status, {**workload, "status": {"replicas": 3, "updatedReplicas": 2, "readyReplicas": 2}}) is None
    assert promotion_done({**promoting_status, "draft": "other"}, workload) is None
    assert promotion_done({**promoting_status, "phase": "Canary"}, workload) is None and promotion_done(None, workload) is None
