"""What draft_lm_head_quantization asks of the draft and of the GPU, read from the GPU path of
the releases that have the option (0.33.0 and 0.34.0 alike; the CPU build cannot run it).

While the draft loads, vLLM installs the target's lm_head on a draft that shares it, or a
quantized copy of it (model_executor/layers/quantization/online/lm_head.py
quantized_lm_head_copy); a draft that keeps its own lm_head is refused with "draft_lm_head_quantization
needs a drafter that shares the target lm_head" (v1/worker/gpu/spec_decode/eagle/utils.py:
load_eagle_model in 0.33.0, share_target_lm_head in 0.34.0). A draft keeps its own when its
checkpoint holds an lm_head (models/utils.py process_eagle_weight sets has_own_lm_head) that is not
the target's (`_should_share`): always so for an LM head of another vocabulary.

The copy's kernel:
- "fp8": Fp8PtpcOnlineLinearMethod.create_weights (quantization/online/fp8.py) raises where the
  platform's FP8 kernel is Marlin's weight-only one: "Requires SM89+ for Cutlass FP8 or ROCm MI3xx";
- "nvfp4": kernels/linear/__init__.py init_nvfp4_linear_kernel(use_a16=True) forces Marlin's
  W4A16 kernel (or Humming, or CuTe-DSL on SM100), which needs CUDA SM75+
  (quantization/utils/marlin_utils_fp4.py is_fp4_marlin_supported); ROCm has none ("Marlin FP4
  not available")."""

from __future__ import annotations

# quantization -> (the least NVIDIA compute capability its kernel needs, whether ROCm has one)
LM_HEAD_COPY_KERNELS: dict[str, tuple[int, bool]] = {"fp8": (89, True), "nvfp4": (75, False)}
SHARE_REFUSAL = ("v1/worker/gpu/spec_decode/eagle/utils.py: \"draft_lm_head_quantization needs a drafter "
                 "that shares the target lm_head\"")
COPY_SOURCE = "model_executor/layers/quantization/online/lm_head.py quantized_lm_head_copy"
