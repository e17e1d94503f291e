"""Which nodes a replica's pods may run on: the GPU the plan was made for.

The plan sizes memory for `resources.gpu`; a pod that asks only for `nvidia.com/gpu: 1` can land
on any GPU of a mixed pool, and a 40 GB card under an 80 GB plan fails at vLLM's start-up check.
So the plan names the nodes by what the vendor's node labeller says of their GPUs: the product
(NVIDIA GPU Feature Discovery's `nvidia.com/gpu.product`, AMD's `amd.com/gpu.product-name`) or,
for a GPU given only by `memoryGiB`, where the labeller gives memory as a number (NVIDIA's
`nvidia.com/gpu.memory`, MiB), at least the memory the layout needs: weights, KV cache and
reserve over gpuMemoryUtilization, the least memory on which vLLM's start-up check passes.
"""

from __future__ import annotations

import math
from typing import Any

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.findings import Finding, Stage, cut, did_you_mean, error, near_misses
from specdeploy.planning.gpus import DEFAULT_RESOURCE_NAME, MEMORY_MIB_LABELS, PRODUCT_LABELS, RESOURCE_NAMES, GpuProduct, SpecGpu
from specdeploy.planning.plan import MemoryEstimate, Placement
from specdeploy.vllm.lm_head_copy import COPY_SOURCE, LM_HEAD_COPY_KERNELS
from specdeploy.vllm.versions import DEFAULT_VERSION, image_accelerator


def resource_name(explicit: str | None, product: GpuProduct | None) -> str:
    """`resources.gpu.resourceName`, else the product's vendor's, else nvidia.com/gpu."""
    if explicit:
        return explicit
    return RESOURCE_NAMES[product.vendor] if product is not None else DEFAULT_RESOURCE_NAME


def vendor_of(resource: str, product: GpuProduct | None) -> str | None:
    """The product's vendor, else the vendor whose device plugin advertises `resource`."""
    if product is not None:
        return product.vendor
    return next((vendor for vendor, name in RESOURCE_NAMES.items() if name == resource), None)


def min_memory_mib(memory: MemoryEstimate | None) -> int | None:
    """The least GPU memory on which the layout's need stays within gpuMemoryUtilization, in
    MiB rounded up to a whole GiB (a small change of the estimate between releases must not
    roll the pods)."""
    if memory is None or memory.budget_gib <= 0 or memory.gpu_memory_gib <= 0:
        return None
    utilization = memory.budget_gib / memory.gpu_memory_gib
    return math.ceil(memory.required_gib / utilization) * 1024


def plan_placement(product: GpuProduct | None, resource: str, memory: MemoryEstimate | None) -> Placement | None:
    """The placement a plan implies; None when nothing is known of the GPU (no product, no
    vendor's resource) and the pods may go wherever their resource request fits."""
    vendor = vendor_of(resource, product)
    if vendor is None:
        return None
    # A named product fixes the memory: its name alone places the pods (the labeller's memory
    # figure is the driver's, a little under the marketing size the catalogue plans with).
    memory_label = MEMORY_MIB_LABELS.get(vendor) if product is None else None
    placement = Placement(vendor, PRODUCT_LABELS[vendor], product.node_products if product else (),
                          memory_label, min_memory_mib(memory) if memory_label else None)
    return placement if placement.requirements() else None


# The software stack each vendor's GPUs run, as image_accelerator names it.
VENDOR_ACCELERATORS = {"nvidia": "cuda", "amd": "rocm"}
IMAGE_ACCELERATOR_MISMATCH = "image-accelerator-mismatch"
GPU_RESOURCE_MISSPELLED = "gpu-resource-misspelled"
GPU_RESOURCE_VENDOR_MISMATCH = "gpu-resource-vendor-mismatch"
RESOURCE_FIELD = "spec.resources.gpu.resourceName"


def accelerator_findings(image: str, vendor: str | None) -> list[Finding]:
    """A CUDA build on an AMD GPU or a ROCm build on an NVIDIA GPU cannot start vLLM's engine:
    refused before any GPU is taken."""
    built_for = image_accelerator(image)
    if vendor is None or built_for is None or VENDOR_ACCELERATORS[vendor] == built_for:
        return []
    wanted = VENDOR_ACCELERATORS[vendor]
    return [error(IMAGE_ACCELERATOR_MISMATCH, "spec.image",
                  f"{cut(image, 80)} is a {built_for.upper()} build of vLLM, and resources.gpu is {vendor.upper()}'s: "
                  f"use a {wanted.upper()} build (e.g. {example_image(wanted)})", Stage.SPEC)]


def resource_findings(explicit: str | None, product: GpuProduct | None) -> list[Finding]:
    """`resources.gpu.resourceName` against the device plugins: a near miss of a vendor's name
    (nvidia.com/gpus) is a resource no node has, so every pod stays Pending; another vendor's
    resource than the product's asks for GPUs the plan was not made for."""
    if not explicit:
        return []
    meant = near_misses(explicit, RESOURCE_NAMES.values())
    if meant:
        return [error(GPU_RESOURCE_MISSPELLED, RESOURCE_FIELD, f"{cut(explicit, 80)!r} is no GPU device plugin's resource "
                      f"(the pods would stay Pending): {did_you_mean(meant)}", Stage.SPEC)]
    vendor = vendor_of(explicit, None) or next((v for v, name in RESOURCE_NAMES.items()
                                                if explicit.startswith(name.split("/")[0] + "/")), None)
    if product is None or vendor is None or vendor == product.vendor:
        return []
    return [error(GPU_RESOURCE_VENDOR_MISMATCH, RESOURCE_FIELD,
                  f"{explicit} is {vendor.upper()}'s device plugin resource, but {product.key} is {product.vendor.upper()}'s: "
                  f"use {RESOURCE_NAMES[product.vendor]}, or leave resourceName unset", Stage.SPEC)]


def example_image(accelerator: str) -> str:
    return f"vllm/vllm-openai{'-rocm' if accelerator == 'rocm' else ''}:v{DEFAULT_VERSION}"


def lm_head_copy_findings(quantization: Any, vendor: str | None, product: GpuProduct | None) -> list[Finding]:
    """The quantized lm_head copy needs a kernel this GPU has (vllm/lm_head_copy.py)."""
    if quantization not in LM_HEAD_COPY_KERNELS or vendor is None:
        return []
    least_sm, on_amd = LM_HEAD_COPY_KERNELS[quantization]
    if vendor == "amd" and not on_amd:
        why = "ROCm has no weight-only NVFP4 kernel (Marlin FP4 needs CUDA SM75+)"
    elif vendor == "nvidia" and product is not None and (product.compute_capability or least_sm) < least_sm:
        why = f"{product.key} is SM{product.compute_capability}; the {quantization} lm_head kernel needs SM{least_sm}+"
    else:
        return []
    return [error("draft-load-fails", "spec.draft.speculativeConfig.draft_lm_head_quantization",
                  f"draft_lm_head_quantization {quantization} quantizes a copy of the target's lm_head when the draft "
                  f"loads, and {why} (vLLM {COPY_SOURCE}): the pod would fail "
                  f"at model load. Leave draft_lm_head_quantization unset or choose another GPU", Stage.LOAD)]


def device_findings(spec: SpeculativeDeploymentSpec, gpu: SpecGpu) -> list[Finding]:
    """The resource name, the image and the kernels the speculative config asks of the GPU they
    will run on (nvidia.com/gpus, a CUDA build on AMD's, an lm_head copy's fp8): each fails only at
    deploy time or load, so they are judged whatever the models."""
    if gpu.unknown:
        return []  # the product's own finding says it
    product = gpu.product
    explicit = spec.resources.gpu.resource_name
    vendor = vendor_of(resource_name(explicit, product), product)
    quantization = spec.draft.speculative_config.get("draft_lm_head_quantization")
    return resource_findings(explicit, product) or \
        accelerator_findings(spec.image, vendor) + lm_head_copy_findings(quantization, vendor, product)
