"""The `--speculative-config` JSON vLLM gets: the plan's method, k and draft TP, the draft
checkpoint, and the spec's passed-through SpeculativeConfig keys."""

from __future__ import annotations

import json
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.planning.plan import Plan


def speculative_config(spec: SpeculativeDeploymentSpec, plan: Plan) -> dict[str, Any]:
    draft = spec.draft
    config: dict[str, Any] = {"method": plan.method, "num_speculative_tokens": plan.num_speculative_tokens}
    if draft.passes_model:
        config["model"] = draft.model
    if draft.revision:
        config["revision"] = draft.revision
    if plan.draft_tensor_parallel_size is not None:
        config["draft_tensor_parallel_size"] = plan.draft_tensor_parallel_size
    return {**draft.speculative_config, **config}


def speculative_config_arg(spec: SpeculativeDeploymentSpec, plan: Plan) -> str:
    """One JSON arg, canonical so equal plans render byte-equal args."""
    return json.dumps(speculative_config(spec, plan), sort_keys=True, separators=(",", ":"))
