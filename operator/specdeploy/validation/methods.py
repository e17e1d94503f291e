"""What each speculative method asks of the draft, restated from vLLM 0.32.0's
vllm/config/speculative.py (SpeculativeConfig.__post_init__, hf_config_override)."""

from __future__ import annotations

from specdeploy.geometry import Geometry
from specdeploy.validation import vllm_support

# Pipeline parallelism: vLLM forces the draft to PP=1; DSpark stops sharing the target
# embedding under PP and MTP+PP is broken upstream (vllm-facts.md §1.8).
NO_PIPELINE_PARALLEL = frozenset({"dspark", "mtp"})
# DSpark draft architectures vLLM keeps as they are; any other architecture is
# rewritten into DeepSeek-V4's in-checkpoint DSpark head.
DSPARK_ARCHITECTURES = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel", "K3DSparkModel"})
# Targets whose checkpoint carries its own DSpark head (vLLM's DSparkDraftModel / V4.1 variant).
IN_CHECKPOINT_DSPARK_TARGETS = frozenset({"deepseek_v4", "deepseek_v41"})

def effective_draft_architectures(method: str, draft: Geometry) -> list[str]:
    """The architecture names vLLM looks up for the draft under `method`: the EAGLE
    renaming, DSpark's rename of a Qwen3 `DSparkDraftModel` to `Qwen3DSparkModel`, and
    none for speculators-format drafts (vllm/config/speculative.py skips the EAGLEConfig wrap)."""
    if draft.model_type in ("speculators", "eagle"):
        return list(draft.architectures)  # their config classes already chose them; no EAGLE re-wrap
    if method == "dspark" and "DSparkDraftModel" in draft.architectures and draft.model_type == "qwen3":
        return ["Qwen3DSparkModel"]
    return vllm_support.draft_architectures(method, draft.architectures)


def default_num_speculative_tokens(method: str, draft: Geometry | None) -> int | None:
    """vLLM's default k: DSpark's block size, else the draft's n_predict (MTP: the
    MTP module's n_predict), else none (the user must set it)."""
    if draft is None:
        return None
    if method == "dspark":
        return draft.block_size
    if method == "mtp":
        return draft.mtp.n_predict if draft.mtp else None
    return draft.n_predict
