"""Stage "resolve k": the number of speculative tokens as vLLM's SpeculativeConfig settles it
(vllm/config/speculative.py __post_init__ / _verify_args), once, for every later stage."""

from __future__ import annotations

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import Finding, Stage, error, info
from specdeploy.geometry import Geometry, Models
from specdeploy.vllm import VllmFacts
from specdeploy.vllm.methods import Method, default_k

K_FIELD = "spec.draft.numSpeculativeTokens"


def draft_n_predict(method: Method, draft: Geometry | None) -> int | None:
    """The draft's own proposal count: DSpark's block size, the MTP module's layers, else
    the draft config's n_predict (what SpeculativeConfig reads for each)."""
    if draft is None or method.k_source in ("none", "option"):
        return None
    if method.k_source == "block_size":
        return draft.block_size
    if method.k_source == "mtp_layers":
        return draft.mtp.n_predict if draft.mtp else None
    return draft.n_predict


# With numSpeculativeTokens: auto and no default in the draft config (vLLM then has none), the
# first k -- the operator's choice, not vLLM's; the telemetry then moves it to the goodput
# model's recommendation (controller/scraping/telemetry.py, telemetry/auto_k.py).
AUTO_START_K = 3


def _refused_by_n_predict(method: Method, n_predict: int | None, k: int) -> bool:
    # k > n_predict must be a multiple of it (vLLM reuses the prediction heads); DSpark's block
    # size is not an n_predict for this rule.
    return method.k_source != "block_size" and bool(n_predict) and k > n_predict and k % n_predict != 0  # type: ignore[operator]


def resolve_num_speculative_tokens(
    spec: SpeculativeDeploymentSpec, models: Models, facts: VllmFacts, k_in_force: int | None = None
) -> tuple[int | None, list[Finding]]:
    """k for every later stage. With `auto`: `k_in_force` (the k the telemetry chose, from
    status.speculation) when vLLM would accept it, else where auto starts."""
    method, k = spec.draft.speculative_method, spec.draft.num_speculative_tokens
    n_predict = draft_n_predict(method, models.draft)
    option_k = default_k(method, spec.draft.speculative_config, facts)
    if k == "auto":
        return _auto_k(spec, n_predict, option_k, k_in_force)
    if k is None and option_k is not None:
        return option_k, [info("k-default", K_FIELD, f"{method.name} defaults k to {method.k_option} ({option_k})")]
    if k is None and models.draft_is_target:
        # __post_init__ makes the target its own draft only when k is set; without k and a
        # draft model there is no draft config to default from.
        return None, [error("k-required", K_FIELD,
                            f"numSpeculativeTokens is required for {method.name} without draft.model: vLLM drafts from the target checkpoint only when k is set (or set it to auto)")]
    if k is None:
        if not n_predict or n_predict <= 0:
            source = (f"the {method.name} draft config has no {method.k_source_name()} to default from" if method.k_source != "none"
                      else f"{method.name} has no default")
            return None, [error("k-required", K_FIELD, f"numSpeculativeTokens is required: {source}; set an integer >= 1 or auto")]
        return n_predict, [info("k-default", K_FIELD, f"numSpeculativeTokens defaults to {n_predict} from the draft config")]
    if _refused_by_n_predict(method, n_predict, k):
        return k, [error("k-not-multiple-of-n-predict", K_FIELD,
                         f"numSpeculativeTokens {k} exceeds the draft's n_predict {n_predict} and must then be a multiple of it (vLLM reuses the {n_predict} prediction heads)")]
    if method.fixed_k is not None and k != method.fixed_k:
        # extract_hidden_states: its speculator's __init__ (v1/worker/gpu/spec_decode/extract_hidden_states.py)
        # raises at start-up; the config check passes.
        return k, [error("k-fixed-by-method", K_FIELD, f"method {method.name} runs with numSpeculativeTokens {method.fixed_k} only, got {k}: "
                                                       f"the pod would fail at start-up", Stage.LOAD)]
    return k, []


def _auto_k(spec: SpeculativeDeploymentSpec, n_predict: int | None, option_k: int | None,
            k_in_force: int | None) -> tuple[int, list[Finding]]:
    method = spec.draft.speculative_method
    if method.fixed_k is not None:
        return method.fixed_k, [info("k-auto", K_FIELD, f"numSpeculativeTokens auto: {method.name} runs with k {method.fixed_k} only")]
    if k_in_force is not None and not _refused_by_n_predict(method, n_predict, k_in_force):
        return k_in_force, [info("k-auto", K_FIELD, f"numSpeculativeTokens auto: k {k_in_force}, chosen from the measured acceptance (status.speculation)")]
    if option_k is not None:
        start, why = option_k, f"{method.name}'s {method.k_option}"
    elif n_predict and n_predict > 0:
        start, why = n_predict, "the draft config's default"
    else:
        start, why = AUTO_START_K, "no default in the draft config"
    return start, [info("k-auto", K_FIELD, f"numSpeculativeTokens auto: starting at {start} ({why}); the operator moves it to the recommended k once the measured acceptance says it pays")]
