"""Stage "resolve k": the number of speculative tokens as vLLM's SpeculativeConfig settles it
(vllm/config/speculative.py __post_init__ / _verify_args), once, for every later stage."""

from __future__ import annotations

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import Finding, error, info
from specdeploy.geometry import Geometry, Models
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


def resolve_num_speculative_tokens(spec: SpeculativeDeploymentSpec, models: Models) -> tuple[int | None, list[Finding]]:
    method, k = spec.draft.method, spec.draft.num_speculative_tokens
    if method == "suffix" and k is None:
        depth = spec.draft.speculative_config.get("suffix_decoding_max_tree_depth", 24)
        return int(depth), [info("k-default", K_FIELD, f"suffix decoding defaults k to its tree depth ({depth})")]
    n_predict = draft_n_predict(method, models.draft)
    if k is None and models.draft_is_target:
        # __post_init__ makes the target its own draft only when k is set; without k and a
        # draft model there is no draft config to default from.
        return None, [error("k-required", K_FIELD,
                            f"numSpeculativeTokens is required for {method} without draft.model: vLLM drafts from the target checkpoint only when k is set")]
    if k is None:
        if not n_predict or n_predict <= 0:
            return None, [error("k-required", K_FIELD,
                                f"numSpeculativeTokens is required: the {method} draft config has no {default_k_source(method)} to default from; set an integer >= 1")]
        return n_predict, [info("k-default", K_FIELD, f"numSpeculativeTokens defaults to {n_predict} from the draft config")]
    # k > n_predict must be a multiple of it (vLLM reuses the prediction heads); DSpark's block
    # size is not an n_predict for this rule.
    if method != "dspark" and n_predict and k > n_predict and k % n_predict != 0:
        return k, [error("k-not-multiple-of-n-predict", K_FIELD,
                         f"numSpeculativeTokens {k} exceeds the draft's n_predict {n_predict} and must then be a multiple of it (vLLM reuses the {n_predict} prediction heads)")]
    return k, []
