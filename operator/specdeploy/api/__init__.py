"""The CR's shape: pydantic models for spec and status, and the CRD generated from them."""

from specdeploy.api.spec import SpeculativeDeploymentSpec

__all__ = ["SpeculativeDeploymentSpec"]
