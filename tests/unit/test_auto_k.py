"""numSpeculativeTokens: auto -- where it starts, the k in force reaching the rendered
--speculative-config, and when the goodput model's recommendation may replace it."""

from __future__ import annotations

import json
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.pipeline import ModelInputs, evaluate
from specdeploy.render import render_manifests
from specdeploy.telemetry import Counters, analyse
from specdeploy.telemetry.auto_k import AUTO_MIN_DRAFTS, MIN_INTERVAL_S, decide_k
from specdeploy.validation.speculative_tokens import AUTO_START_K
from tests.conftest import load_config

LLAMA, EAGLE3 = "meta-llama__Llama-3.1-8B-Instruct", "specforge__llama3-8B-eagle3"


def auto(target: str, draft: str | None, method: str, k_in_force: int | None = None, **draft_extra: Any) -> Any:
    block: dict[str, Any] = {"method": method, "numSpeculativeTokens": "auto", **draft_extra}
    if draft:
        block["model"] = f"org/{draft}"
    spec = SpeculativeDeploymentSpec.model_validate({"target": {"model": f"org/{target}"}, "draft": block,
                                                      "parallelism": {"tensorParallelSize": 1, "pipelineParallelSize": 1}})
    return spec, evaluate(spec, ModelInputs(load_config(target)), ModelInputs(load_config(draft)) if draft else None,
                          k_in_force=k_in_force)


def k_finding(evaluation: Any) -> str:
    return next(f.message for f in evaluation.findings if f.code == "k-auto")


def rendered_k(spec: Any, evaluation: Any) -> int:
    args = render_manifests(spec, evaluation.plan, name="x", namespace="ns")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    return json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"]


def test_auto_starts_from_the_draft_default_or_3() -> None:
    # An EAGLE3 head has no n_predict: vLLM has no default, auto starts at 3.
    spec, evaluation = auto(LLAMA, EAGLE3, "eagle3")
    assert evaluation.ok and evaluation.plan.num_speculative_tokens == AUTO_START_K == 3
    assert "no default in the draft config" in k_finding(evaluation)
    # DSpark: the draft's block_size (7 for the released K3 head).
    _, dspark = auto("moonshotai__Kimi-K3", "k3-dspark-released", "dspark")
    assert dspark.plan is not None and dspark.plan.num_speculative_tokens == 7
    assert "the draft config's default" in k_finding(dspark)
    # mtp without draft.model needs k from vLLM: auto sets one, so it plans.
    _, mtp = auto("deepseek-ai__DeepSeek-V3", None, "mtp")
    assert "k-required" not in {f.code for f in mtp.findings}


def test_the_k_in_force_is_what_the_pod_gets() -> None:
    spec, evaluation = auto(LLAMA, EAGLE3, "eagle3", k_in_force=5)
    assert evaluation.plan.num_speculative_tokens == 5 and rendered_k(spec, evaluation) == 5
    assert "chosen from the measured acceptance" in k_finding(evaluation)
    # A spec that sets k itself ignores it.
    fixed = SpeculativeDeploymentSpec.model_validate({"target": {"model": "org/t"}, "draft": {"method": "eagle3", "model": "org/d", "numSpeculativeTokens": 2},
                                                      "parallelism": {"tensorParallelSize": 1, "pipelineParallelSize": 1}})
    plain = evaluate(fixed, ModelInputs(load_config(LLAMA)), ModelInputs(load_config(EAGLE3)), k_in_force=5)
    assert plain.plan.num_speculative_tokens == 2


def test_a_k_in_force_vllm_would_refuse_is_not_used() -> None:
    """A draft with n_predict 4 (MLP speculator config): k 6 is above n_predict and not a
    multiple of it, which vLLM refuses; auto keeps its start k instead. 8 is a multiple."""
    from specdeploy.geometry import Models, read_geometry
    from specdeploy.validation.speculative_tokens import resolve_num_speculative_tokens
    from specdeploy.vllm import DEFAULT_VERSION, rule_set

    facts = rule_set(DEFAULT_VERSION)
    geometry, _ = read_geometry(load_config("mlp-speculator-llama3-8b"), "spec.draft", facts)
    target, _ = read_geometry(load_config(LLAMA), "spec.target", facts)
    assert geometry is not None and target is not None and geometry.n_predict == 4
    draft = Models(target, geometry)
    spec = SpeculativeDeploymentSpec.model_validate({"target": {"model": "org/t"},
                                                      "draft": {"method": "mlp_speculator", "model": "org/d", "numSpeculativeTokens": "auto"}})
    assert resolve_num_speculative_tokens(spec, draft, facts, 6)[0] == 4
    assert resolve_num_speculative_tokens(spec, draft, facts, 8)[0] == 8
    assert resolve_num_speculative_tokens(spec, draft, facts, None)[0] == 4  # the default: n_predict


def _analysis(drafts: int, conditional: float = 0.9, k: int = 3, cost: float = 0.05) -> Any:
    per_pos = tuple(drafts * conditional ** (i + 1) for i in range(k))
    return analyse(Counters(drafts, drafts * k, sum(per_pos), per_pos), method="eagle3", cost=cost, k=k)


def test_decide_moves_k_when_the_gain_is_at_least_5_percent_with_evidence() -> None:
    """Conditional acceptance .9, c = .05, k = 3: E = 1 + .9 + .81 + .729 = 3.439, / 1.15 = 2.990.
    Extrapolated k = 5 (.6561, .59049): E = 4.68559, / 1.25 = 3.748: +25 %."""
    a = _analysis(AUTO_MIN_DRAFTS)
    change = decide_k(a, current_k=3, last_change_s=None, now_s=10_000)
    assert change is not None and change.k == 5
    assert "3.75x (extrapolated beyond the measured positions) vs 2.99x (+25%)" in change.reason
    assert decide_k(_analysis(AUTO_MIN_DRAFTS - 1), current_k=3, last_change_s=None, now_s=10_000) is None  # too few drafts
    assert decide_k(a, current_k=3, last_change_s=10_000 - MIN_INTERVAL_S + 1, now_s=10_000) is None  # within the hour
    assert decide_k(a, current_k=3, last_change_s=10_000 - MIN_INTERVAL_S, now_s=10_000) is not None
    assert (AUTO_MIN_DRAFTS, MIN_INTERVAL_S) == (1000, 3600)  # the README's "1000 drafts ... at most once an hour"


def test_decide_keeps_k_when_the_gain_is_below_5_percent() -> None:
    """Acceptance .5 per position, c = .15, k = 2: k=1 1.5/1.15 = 1.304, k=2 1.75/1.3 = 1.346,
    k=3 1.875/1.45 = 1.293: the best (k=2) is the current k. From k = 3 the gain is
    1.346/1.293 - 1 = 4.1 % < 5 %: k stays."""
    per_pos = (500.0, 250.0, 125.0)
    a = analyse(Counters(1000, 3000, 875, per_pos), method="eagle3", cost=0.15, k=3)
    assert a.recommended is not None and a.recommended.k == 2
    assert decide_k(a, current_k=3, last_change_s=None, now_s=0) is None
    assert decide_k(analyse(Counters(1000, 2000, 750, per_pos[:2]), method="eagle3", cost=0.15, k=2),
                    current_k=2, last_change_s=None, now_s=0) is None
