"""config.json -> Geometry: attention, MLA, MoE and vocab shape as vLLM reads it."""

from specdeploy.geometry.model_geometry import Geometry, read_geometry
from specdeploy.geometry.models import ModelInputs, Models, read_models

__all__ = ["Geometry", "ModelInputs", "Models", "read_geometry", "read_models"]
