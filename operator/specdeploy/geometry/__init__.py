"""config.json -> Geometry: attention, MLA, MoE and vocab shape as vLLM reads it."""

from specdeploy.geometry.model_geometry import Geometry, read_geometry

__all__ = ["Geometry", "read_geometry"]
