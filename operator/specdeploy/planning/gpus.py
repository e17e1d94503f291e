"""GPU catalog: what `resources.gpu.product` may name, how much memory each one has, and the
figures the speculation cost model needs (telemetry/cost.py): HBM bandwidth, dense bf16/fp8
peak and interconnect bandwidth, each from the vendor's datasheet named in `source`."""

from __future__ import annotations

from dataclasses import dataclass

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import Finding, Stage, did_you_mean, error, info, near_misses


@dataclass(frozen=True)
class Roofline:
    """Datasheet figures of one GPU. Peaks are *dense* (the datasheets' headline numbers are
    often "with sparsity", twice these); interconnect is the per-GPU aggregate the datasheet
    quotes (NVLink/Infinity Fabric, both directions; PCIe Gen4 x16 for cards without a link)."""

    hbm_gb_s: float  # memory bandwidth, GB/s (10^9 bytes)
    bf16_tflops: float  # dense bf16 tensor peak, TFLOP/s
    fp8_tflops: float  # dense fp8 tensor peak (= bf16 where the GPU has no fp8 units)
    interconnect_gb_s: float
    source: str  # the datasheet these figures come from


@dataclass(frozen=True)
class GpuProduct:
    key: str
    memory_gib: float
    vendor: str  # "nvidia" or "amd": decides the default resource name and image
    roofline: Roofline | None = None  # None: no datasheet figures; the cost model says so
    # The names the vendor's node labeller gives this product (NVIDIA GPU Feature Discovery's
    # nvidia.com/gpu.product: the driver's name with spaces as dashes; AMD's node labeller's
    # amd.com/gpu.product-name), one per board form the key covers (SXM, PCIe, ...).
    node_products: tuple[str, ...] = ()
    # NVIDIA's CUDA compute capability (major*10 + minor; None for AMD): which of vLLM's kernels
    # the GPU can run (planning/placement.py lm_head_copy_findings).
    compute_capability: int | None = None


_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (SXM)"
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446 (SXM)"
_H20 = "NVIDIA HGX H20 product brief (2024): 96 GB HBM3, 4.0 TB/s, FP8 296 / BF16 148 dense TFLOPS, NVLink 900 GB/s"
_L40S = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_L4 = "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_HGX_B = "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200 / B300 per-GPU figures: the 8-GPU board's totals / 8)"
_GB200 = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (per GPU: the NVL72 rack's totals / 72)"
_MI300X = "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf"
_MI325X = "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/product-briefs/instinct-mi325x-datasheet.pdf"
_PCIE4 = 64.0  # PCIe Gen4 x16, both directions


# Memory is the usable HBM the driver reports (GiB), keyed "<GPU>-<marketing size>GB".
CATALOG: dict[str, GpuProduct] = {
    p.key.lower(): p
    for p in (
        GpuProduct("A100-40GB", 40.0, "nvidia", Roofline(1555, 312, 312, 600, _A100), node_products=("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"), compute_capability=80),
        GpuProduct("A100-80GB", 80.0, "nvidia", Roofline(2039, 312, 312, 600, _A100), node_products=("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"), compute_capability=80),
        GpuProduct("H100-80GB", 80.0, "nvidia", Roofline(3350, 989, 1979, 900, _H100 + " (SXM)"), node_products=("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"), compute_capability=90),
        GpuProduct("H100-94GB", 94.0, "nvidia", Roofline(3900, 835, 1671, 600, _H100 + " (NVL)"), node_products=("NVIDIA-H100-NVL",), compute_capability=90),
        GpuProduct("H200-141GB", 141.0, "nvidia", Roofline(4800, 989, 1979, 900, _H200), node_products=("NVIDIA-H200", "NVIDIA-H200-NVL"), compute_capability=90),
        GpuProduct("H20-96GB", 96.0, "nvidia", Roofline(4000, 148, 296, 900, _H20), node_products=("NVIDIA-H20",), compute_capability=90),
        GpuProduct("L4-24GB", 24.0, "nvidia", Roofline(300, 121, 242.5, _PCIE4, _L4), node_products=("NVIDIA-L4",), compute_capability=89),
        GpuProduct("L40S-48GB", 48.0, "nvidia", Roofline(864, 362, 733, _PCIE4, _L40S), node_products=("NVIDIA-L40S",), compute_capability=89),
        GpuProduct("A10G-24GB", 24.0, "nvidia", node_products=("NVIDIA-A10G",), compute_capability=86),
        GpuProduct("B200-180GB", 180.0, "nvidia", Roofline(8000, 2250, 4500, 1800, _HGX_B), node_products=("NVIDIA-B200",), compute_capability=100),
        GpuProduct("B300-288GB", 288.0, "nvidia", Roofline(8000, 2250, 4500, 1800, _HGX_B), node_products=("NVIDIA-B300-SXM6-AC",), compute_capability=103),
        GpuProduct("GB200-186GB", 186.0, "nvidia", Roofline(8000, 2500, 5000, 1800, _GB200), node_products=("NVIDIA-GB200",), compute_capability=100),
        GpuProduct("MI300X-192GB", 192.0, "amd", Roofline(5300, 1307.4, 2614.9, 896, _MI300X), node_products=("AMD_Instinct_MI300X_OAM",)),
        GpuProduct("MI325X-256GB", 256.0, "amd", Roofline(6000, 1307.4, 2614.9, 896, _MI325X), node_products=("AMD_Instinct_MI325X_OAM",)),
        GpuProduct("MI355X-288GB", 288.0, "amd", node_products=("AMD_Instinct_MI355X_OAM",)),
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
# The node label each vendor's labeller puts the product name in (GPU Feature Discovery; AMD's
# k8s-device-plugin node labeller), and NVIDIA's per-GPU memory label (MiB; AMD's vram label is
# text such as "192G", which a node affinity cannot compare).
PRODUCT_LABELS = {"nvidia": "nvidia.com/gpu.product", "amd": "amd.com/gpu.product-name"}
MEMORY_MIB_LABELS = {"nvidia": "nvidia.com/gpu.memory"}
DEFAULT_RESOURCE_NAME = RESOURCE_NAMES["nvidia"]


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
    keys = sorted(p.key for p in CATALOG.values())
    # One edit off a short name is often another GPU (T4 is not an L4): only longer names are typos.
    meant = near_misses(name.strip(), keys + [alias.upper() for alias in ALIASES], most=1) if len(name.strip()) >= 5 else []
    if meant:
        raise UnknownGpuError(f"unknown GPU {name!r}: {did_you_mean(meant)}")
    raise UnknownGpuError(f"unknown GPU {name!r}: use one of {', '.join(keys)}, or set memoryGiB")


@dataclass(frozen=True)
class SpecGpu:
    """The GPU a spec asks for, looked up once for the device checks and the plan: its catalog
    entry (None: not named, or `unknown`), its memory (None: not known) and what the lookup found."""

    product: GpuProduct | None
    unknown: bool
    memory_gib: float | None
    findings: tuple[Finding, ...]


def spec_gpu(spec: SpeculativeDeploymentSpec) -> SpecGpu:
    product, lookup = gpu_product(spec)
    memory_gib, findings = gpu_memory_gib(spec, product, lookup)
    return SpecGpu(product, bool(lookup), memory_gib, tuple(findings))


def gpu_product(spec: SpeculativeDeploymentSpec) -> tuple[GpuProduct | None, list[Finding]]:
    """The catalog entry `resources.gpu.product` names; a name not in the catalog is an error
    even when memoryGiB is given (a typo there would otherwise go unnoticed)."""
    product = spec.resources.gpu.product
    if product is None:
        return None, []
    try:
        return lookup_gpu(product), []
    except UnknownGpuError as exc:
        return None, [error("gpu-unknown", "spec.resources.gpu.product", str(exc), Stage.PLAN)]


def gpu_memory_gib(spec: SpeculativeDeploymentSpec, product: GpuProduct | None,
                    findings: list[Finding]) -> tuple[float | None, list[Finding]]:
    """GPU memory: memoryGiB, else the product's; `findings` are the product lookup's."""
    gpu = spec.resources.gpu
    if gpu.memory_gi_b is not None:
        return gpu.memory_gi_b, findings
    if product is not None:
        return product.memory_gib, findings
    if not findings:
        findings = [info("memory-not-checked", "spec.resources.gpu",
                         "no GPU product or memoryGiB given: the memory fit is not checked", Stage.PLAN)]
    return None, findings
