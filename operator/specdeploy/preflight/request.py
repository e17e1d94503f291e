"""What the judge is asked: the exact args the serving pod gets, the models' config.json files
(each at a local directory the args' model names map to), the GPU the memory stage checks.

One builder for the operator's Job and `specdeploy preflight --python`, so both judge the
same request; its key names one (image, args, configs, GPU) combination.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.planning.gpus import lookup_gpu
from specdeploy.planning.plan import Plan
from specdeploy.render.pod import NodeRole, vllm_args
from specdeploy.render.speculative_config import speculative_config

TARGET, DRAFT = "target", "draft"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class JudgeRequest:
    """The judge's input before it is placed on a file system: `models` maps each model name
    of the args to a role (target, draft), `configs` each role to its config.json."""

    image: str
    args: tuple[str, ...]
    models: Mapping[str, str]
    configs: Mapping[str, Mapping[str, Any]]
    gpu: Mapping[str, Any] | None

    def to_json(self, model_dirs: Mapping[str, str]) -> dict[str, Any]:
        """REQUEST.json, with each role's config.json at `model_dirs[role]`."""
        return {"args": list(self.args), "models": {name: model_dirs[role] for name, role in self.models.items()},
                "gpu": dict(self.gpu) if self.gpu is not None else None}

    @property
    def key(self) -> str:
        """sha256 of what decides the verdict: the image, the args, each config and the GPU.
        Equal for a resync or a restart, so no second Job is started for it."""
        digests = {role: hashlib.sha256(_canonical(config).encode()).hexdigest() for role, config in self.configs.items()}
        whole = {"image": self.image, "args": list(self.args), "models": dict(self.models), "configs": digests,
                 "gpu": dict(self.gpu) if self.gpu is not None else None}
        return hashlib.sha256(_canonical(whole).encode()).hexdigest()


def judge_request(spec: SpeculativeDeploymentSpec, plan: Plan, target_config: Mapping[str, Any],
                  draft_config: Mapping[str, Any] | None) -> JudgeRequest:
    """The request for the pod that serves HTTP (a multi-node replica's leader: the judge drops
    the launch flags and judges rank 0, which builds the same engine config)."""
    role = NodeRole.LEADER if plan.multi_node else NodeRole.SINGLE
    models = {spec.target.model: TARGET}
    configs: dict[str, Mapping[str, Any]] = {TARGET: target_config}
    draft_name = speculative_config(spec, plan).get("model")
    if draft_name and draft_config is not None and draft_name not in models:
        models[draft_name] = DRAFT
        configs[DRAFT] = draft_config
    gpu = None
    if plan.memory is not None:
        gpu = {"memoryBytes": int(plan.memory.gpu_memory_gib * 1024**3), "count": plan.gpus_per_replica}
        if spec.resources.gpu.product:  # vLLM keeps an A100 on its small batch tier by name (planning/batch.py)
            gpu["deviceName"] = lookup_gpu(spec.resources.gpu.product).key
    return JudgeRequest(spec.image, tuple(vllm_args(spec, plan, role)), models, configs, gpu)
