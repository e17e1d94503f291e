"""The model cache must hold the checkpoints the pod downloads into it.

An emptyDir's `sizeLimit` is enforced by the kubelet, which evicts the pod once the volume
grows past it: a cache smaller than the weights fails every start, after the download.
A named PVC's size is not in the spec, so it is not checked here."""

from __future__ import annotations

from decimal import Decimal

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import Finding, Stage, error, warning

FIELD = "spec.modelCache.sizeLimit"
_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "": 1}


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes quantity (200Gi, 1.5T, 500M) in bytes; the CRD admits only this form."""
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if suffix and quantity.endswith(suffix):
            return int(Decimal(quantity[: -len(suffix)]) * _SUFFIX[suffix])
    return int(Decimal(quantity))


def check_model_cache(spec: SpeculativeDeploymentSpec, weight_bytes: int, estimated: bool) -> list[Finding]:
    """`weight_bytes`: target + draft checkpoints, as one pod downloads them."""
    if spec.model_cache.persistent_volume_claim or weight_bytes <= 0:
        return []
    limit = quantity_bytes(spec.model_cache.size_limit)
    if limit >= weight_bytes:
        return []
    # An explicit sizeLimit that is too small is an error; the default (never chosen for these
    # weights) is a warning, so that validating a pair does not fail on a value nobody set.
    make = error if "size_limit" in spec.model_cache.model_fields_set else warning
    basis = "estimated from config.json" if estimated else "from the safetensors index or weightsGiB"
    return [make("model-cache-too-small", FIELD,
                 f"the model cache emptyDir is {spec.model_cache.size_limit}{'' if make is error else ' (the default)'} but the weights it must hold are "
                 f"{weight_bytes / 2**30:.0f} GiB ({basis}): the kubelet would evict the pod during the download; "
                 f"set modelCache.sizeLimit to at least {-(-weight_bytes // 2**30)}Gi or name a PVC", Stage.PLAN)]
