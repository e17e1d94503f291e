"""The sizes a model's layers divide by TP that a TP does not divide, from vLLM's per-model layer
tables (vllm/tp_splits.py, vllm/layer_splits.py, vllm/fp8_blocks.py) applied to the config the
geometry read once: the load rules (validation/load.py) ask here and never read the config."""

from __future__ import annotations

from specdeploy.geometry.model_geometry import Geometry
from specdeploy.vllm.fp8_blocks import fp8_block_failures
from specdeploy.vllm.layer_splits import layer_split_failures
from specdeploy.vllm.parallel_layers import audited
from specdeploy.vllm.tp_splits import (dense_mlp_failures, expert_count_failures, expert_width_failures,
                                        gated_delta_net_failures, tp_split_failures, vocab_failures)


def _registered(architectures: list[str], version: str) -> str | None:
    """The architecture vLLM builds: the first its audit knows (else the first named)."""
    return next((a for a in architectures if audited(version, a)), architectures[0] if architectures else None)


def split_failures(model: Geometry, architectures: list[str], tp: int, ep: bool, version: str) -> list[str]:
    """Sizes the model's layers divide by TP that this TP does not divide: its class's
    (vllm/tp_splits.py), its sub-modules' (vllm/layer_splits.py: shared experts, projectors,
    mixers, draft heads' LM heads), its dense MLP's width, its experts' count and width (the width
    unless `ep`: expert parallel keeps experts whole), and its FP8 weight blocks (vllm/fp8_blocks.py)."""
    archs, text = tuple(architectures), model.text_config
    reasons = tp_split_failures(archs, text, {"vision_config": model.vision_config}, tp)
    name = architectures[0] if architectures else model.model_type
    layers = (vocab_failures(model.vocab_size, tp) + gated_delta_net_failures(archs, text, tp)
              + expert_count_failures(archs, text, tp)
              + dense_mlp_failures(text, tp)
              + ([] if ep else expert_width_failures(text, tp, archs))
              + layer_split_failures(_registered(architectures, version), text, tp, version)
              + fp8_block_failures(text, model.quantization, tp, ep))
    return reasons + [f"{name}'s {reason}" for reason in layers]


def module_split_failures(architecture: str, model: Geometry, tp: int, version: str) -> list[str]:
    """The sub-module sizes `architecture` (an MTP module vLLM builds from `model`) splits by TP."""
    return layer_split_failures(architecture, model.text_config, tp, version)
