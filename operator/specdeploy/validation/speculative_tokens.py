"""Stage "resolve k": the number of speculative tokens as vLLM's SpeculativeConfig settles it
(vllm/config/speculative.py __post_init__ / _verify_args), once, for every later stage."""

from __future__ import annotations

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import Finding, error, info
from specdeploy.geometry import Geometry, Models
from specdeploy.vllm import VllmFacts
from specdeploy.vllm.drafts import default_k_source

K_FIELD = "spec.draft.numSpeculativeTokens"


def draft_n_predict(method: str, draft: Geometry | None) -> int | None:
    """The draft's own proposal count: DSpark's block size, the MTP module's layers, else
    the draft config's n_predict (what SpeculativeConfig reads for each)."""
    if draft is None:
        return None
    if method == "dspark":
        return draft.block_size
    if method == "mtp":
        return draft.mtp.n_predict if draft.mtp else None
    return draft.n_predict


# With numSpeculativeTokens: auto and no default in the draft config (vLLM then has none), the
# first k -- the operator's choice, not vLLM's; the telemetry then moves it to the goodput
# model's recommendation (controller/telemetry.py, telemetry/auto_k.py).
AUTO_START_K = 3


def _refused_by_n_predict(method: str, n_predict: int | None, k: int) -> bool:
    # k > n_predict must be a multiple of it (vLLM reuses the prediction heads); DSpark's block
    # size is not an n_predict for this rule.
    return method != "dspark" and bool(n_predict) and k > n_predict and k % n_predict != 0  # type: ignore[operator]


def _suffix_default_k(spec: SpeculativeDeploymentSpec, facts: VllmFacts) -> int:
    """The release's own default (the tree depth, or min(cap, depth) where suffix/config.py caps it), with the depth
    as set or as the release's SpeculativeConfig defaults it."""
    depth = spec.draft.speculative_config.get("suffix_decoding_max_tree_depth",
                                              facts.speculative_fields["suffix_decoding_max_tree_depth"]["default"])
    return facts.suffix_default_k(int(depth))


def resolve_num_speculative_tokens(
    spec: SpeculativeDeploymentSpec, models: Models, facts: VllmFacts, k_in_force: int | None = None
) -> tuple[int | None, list[Finding]]:
    """k for every later stage. With `auto`: `k_in_force` (the k the telemetry chose, from
    status.speculation) when vLLM would accept it, else where auto starts."""
    method, k = spec.draft.method, spec.draft.num_speculative_tokens
    n_predict = draft_n_predict(method, models.draft)
    if k == "auto":
        return _auto_k(spec, n_predict, k_in_force, facts)
    if method == "suffix" and k is None:
        default = _suffix_default_k(spec, facts)
        return default, [info("k-default", K_FIELD, f"suffix decoding in vLLM {facts.version} defaults k to {default}")]
    if k is None and models.draft_is_target:
        # __post_init__ makes the target its own draft only when k is set; without k and a
        # draft model there is no draft config to default from.
        return None, [error("k-required", K_FIELD,
                            f"numSpeculativeTokens is required for {method} without draft.model: vLLM drafts from the target checkpoint only when k is set (or set it to auto)")]
    if k is None:
        if not n_predict or n_predict <= 0:
            return None, [error("k-required", K_FIELD,
                                f"numSpeculativeTokens is required: the {method} draft config has no {default_k_source(method)} to default from; set an integer >= 1 or auto")]
        return n_predict, [info("k-default", K_FIELD, f"numSpeculativeTokens defaults to {n_predict} from the draft config")]
    if _refused_by_n_predict(method, n_predict, k):
        return k, [error("k-not-multiple-of-n-predict", K_FIELD,
                         f"numSpeculativeTokens {k} exceeds the draft's n_predict {n_predict} and must then be a multiple of it (vLLM reuses the {n_predict} prediction heads)")]
    return k, []


def _auto_k(spec: SpeculativeDeploymentSpec, n_predict: int | None, k_in_force: int | None,
            facts: VllmFacts) -> tuple[int, list[Finding]]:
    method = spec.draft.method
    if k_in_force is not None and not _refused_by_n_predict(method, n_predict, k_in_force):
        return k_in_force, [info("k-auto", K_FIELD, f"numSpeculativeTokens auto: k {k_in_force}, chosen from the measured acceptance (status.speculation)")]
    if method == "suffix":
        start, why = _suffix_default_k(spec, facts), "suffix decoding's default"
    elif n_predict and n_predict > 0:
        start, why = n_predict, "the draft config's default"
    else:
        start, why = AUTO_START_K, "no default in the draft config"
    return start, [info("k-auto", K_FIELD, f"numSpeculativeTokens auto: starting at {start} ({why}); the operator moves it to the recommended k once the measured acceptance says it pays")]
