"""GPU catalog: what `resources.gpu.product` may name, and how much memory each one has."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuProduct:
    key: str
    memory_gib: float
    vendor: str  # "nvidia" or "amd": decides the default resource name and image


# Memory is the usable HBM the driver reports (GiB), keyed "<GPU>-<marketing size>GB".
CATALOG: dict[str, GpuProduct] = {
    p.key.lower(): p
    for p in (
        GpuProduct("A100-40GB", 40.0, "nvidia"),
        GpuProduct("A100-80GB", 80.0, "nvidia"),
        GpuProduct("H100-80GB", 80.0, "nvidia"),
        GpuProduct("H100-94GB", 94.0, "nvidia"),
        GpuProduct("H200-141GB", 141.0, "nvidia"),
        GpuProduct("H20-96GB", 96.0, "nvidia"),
        GpuProduct("L4-24GB", 24.0, "nvidia"),
        GpuProduct("L40S-48GB", 48.0, "nvidia"),
        GpuProduct("A10G-24GB", 24.0, "nvidia"),
        GpuProduct("B200-180GB", 180.0, "nvidia"),
        GpuProduct("B300-288GB", 288.0, "nvidia"),
        GpuProduct("GB200-186GB", 186.0, "nvidia"),
        GpuProduct("MI300X-192GB", 192.0, "amd"),
        GpuProduct("MI325X-256GB", 256.0, "amd"),
        GpuProduct("MI355X-288GB", 288.0, "amd"),
    )
}


def _aliases() -> dict[str, GpuProduct]:
    """The GPU name alone ("H200") is an alias only where exactly one size exists."""
    by_name: dict[str, list[GpuProduct]] = {}
    for product in CATALOG.values():
        by_name.setdefault(product.key.split("-")[0].lower(), []).append(product)
    return {name: products[0] for name, products in by_name.items() if len(products) == 1}


ALIASES = _aliases()
# The extended resource each vendor's device plugin advertises.
RESOURCE_NAMES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
DEFAULT_RESOURCE_NAME = RESOURCE_NAMES["nvidia"]


def resource_name(explicit: str | None, product: GpuProduct | None) -> str:
    """`resources.gpu.resourceName`, else the product's vendor's, else nvidia.com/gpu."""
    if explicit:
        return explicit
    return RESOURCE_NAMES[product.vendor] if product is not None else DEFAULT_RESOURCE_NAME


class UnknownGpuError(ValueError):
    pass


def lookup_gpu(name: str) -> GpuProduct:
    """Resolve a product name case-insensitively; the message lists what is allowed."""
    key = name.strip().lower()
    if key in CATALOG:
        return CATALOG[key]
    if key in ALIASES:
        return ALIASES[key]
    ambiguous = sorted(p.key for p in CATALOG.values() if p.key.split("-")[0].lower() == key)
    if ambiguous:
        raise UnknownGpuError(f"GPU {name!r} is ambiguous: name one of {', '.join(ambiguous)}")
    allowed = ", ".join(sorted(p.key for p in CATALOG.values()))
    raise UnknownGpuError(f"unknown GPU {name!r}: use one of {allowed}, or set memoryGiB")
