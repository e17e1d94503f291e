"""A second, broader generator of hostile input for `specdeploy plan -f` and `validate`, built
independently of tests/fuzz/hostile.py (which mutates one value of six examples).

What it varies:
- every spec field, metadata (name, namespace, labels, annotations, ...), status, apiVersion
  and kind, with wrong types, bool-as-int, -0, 1e308, 10**30, 2**63, empty and deep values,
  unicode, NUL and very long strings;
- every config.json key the core reads (geometry/, planning/kv_cache.py, validation/, vllm/),
  at the top level and inside text_config, quantization_config, rope_scaling, ... and whole
  variants of those sub-objects (speculators_config, linear_attn_config, layer_types,
  index_topk_pattern, dflash_config);
- the stream: several documents, ConfigMaps (configMapRef) whose text is hostile JSON, List
  kinds, scalars, empty documents;
- the YAML text: anchors and alias bombs, merge keys, tags (!!python/object, !!binary, !!set,
  custom), timestamps, non-string and complex keys, duplicate keys, a BOM, tabs, flow style,
  CRLF, NUL, invalid UTF-8, a 300 KiB document;
- for `validate`: config.json files with NaN/Infinity, 5000-digit integers, duplicate keys,
  10,000-deep arrays, non-objects, a BOM.

Each case runs in a forked copy of one warmed-up interpreter (so thousands run in minutes)
with a 10 s wall limit, its peak RSS read from wait4; `--subprocess N` also runs N cases as a
real `python -m specdeploy.cli` process each. Every document `plan` accepts has its children
checked against the Kubernetes schemas (tests/fuzz/schemas.py).

    python -m tests.fuzz.broad --count 5000 --seed 1 [--subprocess 200] [--report out.json]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import re
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from tests.fuzz.schemas import accepted_manifests, child_problems

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TIME_LIMIT_S = 10.0
MEMORY_LIMIT_KIB = 1024 * 1024  # 1 GiB

# ---- hostile values -----------------------------------------------------------------------

def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


SCALARS: list[Any] = [
    True, False, None, 0, -0.0, -1, 1, 2, 3, 7, 1.5, 0.5, -1e-300, 1e308, -1e308, 1.7976931348623157e308, 5e-324,
    10**30, -(10**30), 2**31, 2**53 + 1, 2**63, 2**63 - 1, 2**64, 10**18 + 1, 10**7, 10**100,
    "", " ", "0", "4", "1e3", "-1", "true", "null", "NaN", "inf", "auto", "ａｕｔｏ", "x" * 70000, "\x00", "a\x00b",
    "\u202eevil", "💥" * 50, "\ud7ff", "../../etc/passwd", "%s%n", "${HOME}", "a b", "\t", "\n",
]
CONTAINERS: list[Any] = [[], {}, [[]], [{}], [1, 2, 3], ["a"], {"a": 1}, {"": None}, [None], list(range(20000)),
                         {f"k{i}": i for i in range(3000)}, _nested(30), _nested(63), [True] * 5, ["x" * 10000] * 10]
VALUES = SCALARS + CONTAINERS

# Keys the core reads from a config.json (grep of _get/.get/getattr in geometry/, planning/,
# validation/ and vllm/, plus the bounds table): each is a target for every hostile value.
CONFIG_KEYS = [
    "architectures", "attention_chunk_size", "attn_config", "bits", "block_size", "compression_config", "config_groups",
    "dflash_config", "draft_vocab_size", "dspark_block_size", "dtype", "first_k_dense_replace", "format",
    "full_attention_interval", "full_attn_layers", "group_size", "head_dim", "hidden_size", "hidden_size_per_head",
    "index_head_dim", "index_topk", "index_topk_freq", "index_topk_pattern", "index_skip_topk_offset",
    "index_share_for_mtp_iteration", "intermediate_size", "kv_lora_rank", "layer_types", "linear_attn_config",
    "linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads", "linear_num_value_heads",
    "linear_value_head_dim", "llm_config", "mamba_ssm_dtype", "max_position_embeddings", "model_max_length",
    "model_type", "moe_intermediate_size", "mtp_config", "mtp_num_hidden_layers", "multi_query", "n_predict",
    "new_decoder_architecture", "no_rope_layers", "num_attention_heads", "num_bits", "num_experts",
    "num_experts_per_tok", "num_heads", "num_hidden_layers", "num_key_value_heads", "num_mtp_modules",
    "num_nextn_predict_layers", "num_target_layers", "n_routed_experts", "n_shared_experts", "num_local_experts",
    "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "quant_method", "quantization_config", "rope_parameters",
    "rope_scaling", "rope_theta", "routed_expert_hidden_size", "short_conv_kernel_size", "sliding_window",
    "speculators_config", "speculators_model_type", "target_layer_ids", "text_config", "tie_word_embeddings",
    "torch_dtype", "transformer_layer_config", "v_head_dim", "vocab_size", "w_bit", "weights", "n_head", "n_layer",
    "n_embd", "d_model", "num_kv_heads", "multi_query_group_num", "num_attention_groups", "n_positions",
    "max_seq_len", "seq_length", "max_sequence_length", "seq_len", "original_max_position_embeddings",
    "medusa_num_heads", "medusa_num_layers", "n_embd", "emb_dim", "num_layers", "n_heads", "top_k_experts",
    "num_experts_per_token", "moe_topk", "moe_num_experts", "num_shared_experts", "sliding_window_pattern",
    "max_window_layers", "use_sliding_window", "mla_use_nope", "dspark_bonus_anchor", "markov_rank",
    "index_n_heads", "kv_n_heads", "hidden_act", "eos_token_id", "pad_token_id", "rms_norm_eps",
]
# Whole sub-objects the code reads, in shapes real and broken.
SUBTREES: dict[str, list[Any]] = {
    "quantization_config": [
        {"quant_method": "gptq", "bits": 4, "group_size": 0}, {"quant_method": "gptq", "bits": 0}, {"quant_method": "gptq", "bits": 4, "group_size": -2},
        {"quant_method": "awq", "w_bit": "4"}, {"quant_method": "awq", "bits": 10**30}, {"quant_method": 5},
        {"quant_method": "fp8", "weight_block_size": [0, 0]}, {"quant_method": "fp8", "weight_block_size": "x"},
        {"quant_method": "mxfp4"}, {"quant_method": "bitsandbytes", "load_in_4bit": "yes"}, {"quant_method": "modelopt", "quant_algo": 5},
        {"quant_method": "compressed-tensors", "config_groups": []}, {"quant_method": "compressed-tensors", "config_groups": {"g": 5}},
        {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": []}}},
        {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "group_size": 0}}}},
        {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": "4", "group_size": "128"}}}},
        {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 1e308, "group_size": 1e-308}}}},
        {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": None}}}, {"quant_method": "compressed-tensors", "config_groups": None},
        {"quant_method": "compressed-tensors", "format": 5}, {"quant_method": "gptq", "bits": True, "group_size": True},
        {"quant_method": "gptq", "bits": 4, "group_size": 2**63}, {"quant_method": "gptq", "bits": -0.0}, {}, [], "fp8", 8,
    ],
    "rope_scaling": [
        {"rope_type": "linear", "factor": 1e308}, {"rope_type": "linear", "factor": 0}, {"rope_type": "linear", "factor": -0.0},
        {"rope_type": "dynamic", "factor": -3}, {"type": "yarn", "factor": "4"}, {"rope_type": 5, "factor": 2},
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 0, "high_freq_factor": 0, "original_max_position_embeddings": 0},
        {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 10**30}, {"rope_type": "yarn", "factor": 4, "beta_fast": "x"},
        {"rope_type": "longrope", "short_factor": "x", "long_factor": None}, {"rope_type": "linear", "factor": True},
        {"rope_type": "linear", "factor": [2]}, {"full_attention": {"rope_type": "linear", "factor": 1e308}}, {"full_attention": 5},
        {"sliding_attention": {"factor": -1}, "full_attention": {}}, {"factor": 10**30}, {"rope_type": None}, {"mrope_section": [1e308]},
        {"rope_type": "su"}, {"rope_type": "default", "factor": None}, [], "linear", 2.0, {"rope_type": "linear", "factor": 2**63},
    ],
    "text_config": [
        [], 5, "x", {}, {"num_attention_heads": 0}, {"num_attention_heads": "x"}, {"model_type": "llama"}, {"model_type": 5},
        {"num_attention_heads": 32, "num_hidden_layers": 10**30}, {"text_config": {"text_config": {}}}, {"model_type": "kimi_linear", "linear_attn_config": 5},
        {"model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 2, "vocab_size": 32000, "hidden_size": 4096,
         "num_key_value_heads": 10**18 + 1}, {"num_attention_heads": 32, "vocab_size": -1, "num_hidden_layers": 1},
    ],
    "speculators_config": [
        5, [], {}, {"verifier": 5}, {"verifier": {"architectures": 5}}, {"proposal_methods": "x"}, {"proposal_methods": [{"speculative_tokens": 10**30}]},
        {"proposal_methods": [5]}, {"default_proposal_method": [], "proposal_methods": []}, {"verifier": {"name_or_path": None}},
    ],
    "linear_attn_config": [
        5, [], {}, {"full_attn_layers": 7}, {"full_attn_layers": "1,2"}, {"full_attn_layers": [10**30]}, {"full_attn_layers": [-1, 0]},
        {"full_attn_layers": list(range(5000))}, {"kda_layers": None, "full_attn_layers": None}, {"num_heads": "x", "head_dim": [1]},
        {"num_heads": 2**63, "head_dim": 2**63, "short_conv_kernel_size": -5}, {"full_attn_layers": [1.5, True]},
    ],
    "layer_types": [5, "full_attention", [], [5], ["full_attention"] * 20000, ["warp_attention"] * 4, [None, None], {"a": 1},
                    ["linear_attention"], ["sliding_attention", "full_attention"] * 3],
    "index_topk_pattern": [5, "", "x" * 5000, "FS" * 3, [], ["F"], "\x00\x00", 1e308, "FFFFSSSSFFFFSSSSFFFF" * 100],
    "dflash_config": [5, [], {}, {"block_size": 0}, {"block_size": 10**30}, {"block_size": "x"}, {"target_layer_ids": "x"},
                      {"target_layer_ids": [10**30, -1]}, {"mask_token_id": None}],
    "attn_config": [5, [], {"kv_n_heads": 0}, {"kv_n_heads": "8"}, {"kv_n_heads": 10**30}],
    "mtp_config": [5, [], {"num_nextn_predict_layers": 10**30}, {"num_layers": -1}],
    "transformer_layer_config": [5, [], {}, {"model_type": 5}, {"num_attention_heads": 0, "model_type": "llama"}],
    "target_layer_ids": [5, [], [10**30], [-1], ["x"], list(range(10000)), None],
    "no_rope_layers": [5, [], [10**30], "x", [None] * 3],
    "architectures": [5, [5], "LlamaForCausalLM", [], [""], ["x" * 100000], ["LlamaForCausalLM"] * 500, [None], {"a": 1}, [["Llama"]]],
    "eos_token_id": [[], [10**30], "x", None, -1],
}

METADATA_VARIANTS: list[Any] = [
    [], "x", 5, None, {}, {"name": 5}, {"name": ""}, {"name": "x" * 300}, {"name": "A"}, {"name": "-a"}, {"name": "a" * 63},
    {"name": "a.b"}, {"name": "ok", "namespace": []}, {"name": "ok", "namespace": "x" * 70}, {"name": "ok", "namespace": 5},
    {"name": "ok", "labels": []}, {"name": "ok", "labels": {"a": 5}}, {"name": "ok", "labels": {"x" * 400: "v"}},
    {"name": "ok", "annotations": {"a": {"b": 1}}}, {"name": "ok", "annotations": "x"}, {"name": "ok", "uid": 5},
    {"name": "ok", "generateName": "x-"}, {"generateName": "x-"}, {"name": "ok", "resourceVersion": []},
    {"name": "ok", "ownerReferences": "x"}, {"name": "ok", "finalizers": [5]}, {"name": "ok", "creationTimestamp": 5},
    {"name": "ok", "managedFields": [{"x": 1}]}, {"name": "ok", "deletionTimestamp": "2020-01-01T00:00:00Z"},
    {"name": "\u0430bc"}, {"name": "a\x00b"}, {"name": True}, {"name": None}, {"name": ["a"]}, {"name": {"a": "b"}},
    {"name": "ok", "namespace": None}, {"name": "ok", "namespace": ""}, {"name": "ok", "extra": 1},
    {"name": "ok", "kind": "x"}, {"name": "ok", "status": {}}, {"name": "ok", "labels": {"a/b/c": "x"}}, {"name": "a" * 253},
    {"name": "b" * 62 + ".c"}, {"name": "ok", "labels": {"app": "v" * 64}}, {"name": "ok", "annotations": {"k": "x" * 300_000}},
    {"name": "ok", "labels": {"example.com/tier": "gpu"}, "annotations": {"note": "x" * 1000}},
]
STATUS_VARIANTS: list[Any] = [5, [], "x", {}, {"conditions": 5}, {"conditions": [5]}, {"plan": "x"}, {"observedGeneration": "x"},
                              {"conditions": [{"type": "Ready", "status": 5}] * 200}, _nested(40)]
API_VERSIONS: list[Any] = ["specdeploy.io/v1", "specdeploy.io/v1alpha1/", "v1", "", None, 5, [], "specdeploy.io/v9",
                           "SPECDEPLOY.IO/v1alpha1", "specdeploy.io", "x/y/z", "specdeploy.io/v1alpha1 "]
KINDS: list[Any] = ["speculativedeployment", "SpeculativeDeployments", "", None, 5, [], "Deployment", "ConfigMap", "List",
                    "SpeculativeDeploymentList", "sdep"]

SPEC_PATHS: list[tuple[str, ...]] = [
    ("target",), ("target", "model"), ("target", "revision"), ("target", "trustRemoteCode"), ("target", "config"),
    ("target", "configMapRef"), ("target", "configMapRef", "name"), ("target", "configMapRef", "key"), ("target", "weightsGiB"),
    ("draft",), ("draft", "method"), ("draft", "model"), ("draft", "revision"), ("draft", "trustRemoteCode"), ("draft", "config"),
    ("draft", "configMapRef"), ("draft", "weightsGiB"), ("draft", "numSpeculativeTokens"), ("draft", "tensorParallelSize"),
    ("draft", "speculativeConfig"), ("resources",), ("resources", "gpu"), ("resources", "gpu", "product"),
    ("resources", "gpu", "memoryGiB"), ("resources", "gpu", "perNode"), ("resources", "gpu", "resourceName"),
    ("resources", "cpu"), ("resources", "memory"), ("parallelism",), ("parallelism", "tensorParallelSize"),
    ("parallelism", "pipelineParallelSize"), ("serving",), ("serving", "maxModelLen"), ("serving", "gpuMemoryUtilization"),
    ("serving", "kvCacheDtype"), ("serving", "minConcurrentSequences"), ("replicas",), ("image",), ("vllmVersion",),
    ("vllm",), ("vllm", "extraArgs"), ("vllm", "env"), ("hfTokenSecretRef",), ("hfTokenSecretRef", "name"),
    ("modelCache",), ("modelCache", "persistentVolumeClaim"), ("modelCache", "sizeLimit"), ("scheduling",),
    ("scheduling", "nodeSelector"), ("scheduling", "tolerations"), ("scheduling", "affinity"),
    ("scheduling", "priorityClassName"), ("scheduling", "runtimeClassName"), ("rollout",), ("rollout", "maxSurge"),
    ("rollout", "maxUnavailable"), ("unknownField",),
]
SPEC_SPECIAL: dict[tuple[str, ...], list[Any]] = {
    ("target", "model"): ["/etc/passwd", "/proc/self/mem", "/proc/self/environ", "/dev/zero", "/", "~root/x.json",
                          "../../../../etc/shadow", "/proc/self/fd/0", "org/name/extra", "a" * 512, "-", "C:\\x", "org/" + "n" * 200,
                          "http://example.com/x", "file:///etc/passwd", "..", "/sys/kernel/mm", "/tmp"],
    ("draft", "method"): ["EAGLE3", "eagle4", "", "ngram ", "team_tree_drafter", "a" * 65, "custom_class", "extract_hidden_states", "mtp", "dspark", "medusa", "mlp_speculator", "suffix", "dflash", "draft_model"],
    ("draft", "numSpeculativeTokens"): ["auto", "AUTO", 0, 65, 64, 10**30, -1, 1.0, "3"],
    ("draft", "speculativeConfig"): [{"method": "x"}, {"num_speculative_tokens": 3}, {"model": "x"}, {"prompt_lookup_max": 10**30},
                                     {"prompt_lookup_min": -1, "prompt_lookup_max": 0}, {"draft_tensor_parallel_size": 0},
                                     {"attention_backend": 5}, {"disable_padded_drafter_batch": "yes"}, {"x" * 1000: 1},
                                     {"speculative_token_tree": "[(0,)]" * 1000}, {"quantization": []}, {"max_model_len": 0},
                                     {"suffix_decoding_max_tree_depth": 10**30}, {"draft_sample_method": 5}, {"": None},
                                     {"fly_window_size": -1}, {"xpress_topc": 2**63}, {"rejection_sample_method": []}],
    ("serving", "gpuMemoryUtilization"): [0, 1, 1.0000001, -0.0, 5e-324, 1e-308, "0.9", True],
    ("serving", "maxModelLen"): [0, 1, 2**63, 10**30, 10**12, 131072, -1, 1.5, "8k"],
    ("parallelism", "tensorParallelSize"): [0, 1, 3, 5, 1024, 10**30, 2**63, "auto", "8", True, 1.0],
    ("parallelism", "pipelineParallelSize"): [0, 1, 3, 1024, 10**30, 2**31, "auto"],
    ("resources", "gpu", "perNode"): [0, 1, 65, 10**30, True, 8.0],
    ("resources", "gpu", "memoryGiB"): [0, 1e-300, 1e308, 10**30, 0.001, -1, True, "80"],
    ("resources", "gpu", "product"): ["H100", "h100-80gb", "", "X" * 64, "X" * 65, "H200-141GB", "MI300X", "B300", "A100-40GB"],
    ("target", "weightsGiB"): [1e-300, 1e308, 10**30, 0, -1, True],
    ("vllm", "extraArgs"): [["--max-num-seqs", "10**30"], ["--tensor-parallel-size=8"], [""], [5], "x", ["--x"] * 65,
                            ["; rm -rf /"], ["--enforce-eager"], ["-tp", "8"], ["--max-model-len", "1"], ["--" + "x" * 10000]],
    ("vllm", "env"): [[{"name": "X"}], [{"name": 5}], [{}], [{"name": "X", "valueFrom": 5}], ["X=1"], [{"name": "X", "value": 5}]],
    ("replicas",): [0, 1000, 1001, 2**63, -1, True, 1.0, "1"],
    ("image",): ["", " ", "vllm/vllm-openai:v0.33.0", "vllm/vllm-openai:v9.9.9", "vllm/vllm-openai@sha256:" + "0" * 64,
                 "x" * 600, "vllm/vllm-openai:latest", "vllm/vllm-openai:v0.32.0rc1", "localhost:5000/vllm:0.33.0-cu130", ":"],
    ("vllmVersion",): ["0.33.0", "0.32.0", "9.9.9", "0.0.0", "v0.33.0", "0.33", "99999999999999999999.0.0", ""],
    ("scheduling", "tolerations"): [[5], {"a": 1}, [{}] * 33, [[]], [{"key": 5}], [{"operator": "Exists", "tolerationSeconds": "x"}],
                                    [{"key": "a", "bogus": 1}], [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]],
    ("scheduling", "nodeSelector"): [{"a": 5}, {"a": None}, [], {"a": {"b": "c"}}, {"a b": "x"}, {"k": "v" * 64}, {"a/b/c": "x"},
                                     {"node.kubernetes.io/instance-type": "p5.48xlarge"}],
    ("scheduling", "affinity"): [{"foo": 1}, {"nodeAffinity": 5}, {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": "x"}]}},
                                 {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                                     {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}]}}}],
    ("scheduling", "priorityClassName"): ["Not_Valid", "", "a" * 254, "gpu-high", "a..b"],
    ("scheduling", "runtimeClassName"): ["nvidia", "NV", "", "a_b"],
    ("rollout", "maxSurge"): ["25%", "101%", "%", "x%", -1, 10**30, 1.5, True, "1"],
    ("modelCache", "sizeLimit"): ["0", "1Ei", "999999999999999999999Ei", "1e3", "1.5Gi", "", "-1Gi", "10Pi"],
    ("resources", "cpu"): ["0", "1e3", "100m", "x", "9" * 40, "-1"],
}

Mutator = Callable[[dict[str, Any], random.Random], str]


# ---- bases ---------------------------------------------------------------------------------

def _fixture(name: str) -> dict[str, Any]:
    for folder in ("model-configs", "synthetic"):
        path = FIXTURES / folder / name
        if path.is_file():
            return json.loads(path.read_text())
    raise FileNotFoundError(name)


PAIRS = [  # (target fixture, draft fixture or None, method)
    ("meta-llama__Llama-3.1-8B-Instruct.json", "specforge__llama3-8B-eagle3.json", "eagle3"),
    ("meta-llama__Llama-3.1-8B-Instruct.json", "SafeAILab__EAGLE-LLaMA3-Instruct-8B.json", "eagle"),
    ("meta-llama__Llama-3.1-8B-Instruct.json", "speculators-llama3.1-8b-eagle3.json", "eagle3"),
    ("meta-llama__Llama-3.1-8B-Instruct.json", "eagle-format-llama3-8b.json", "eagle"),
    ("meta-llama__Llama-3.1-8B-Instruct.json", "medusa-llama3-8b.json", "medusa"),
    ("meta-llama__Llama-3.1-8B-Instruct.json", "medusa-old-format-vicuna.json", "medusa"),
    ("meta-llama__Llama-3.1-8B-Instruct.json", "mlp-speculator-llama3-8b.json", "mlp_speculator"),
    ("meta-llama__Llama-3.1-70B-Instruct.json", "meta-llama__Llama-3.2-1B-Instruct.json", "draft_model"),
    ("Qwen__Qwen3-8B.json", "specforge__qwen3-8b-dflash.json", "dflash"),
    ("Qwen__Qwen3-8B.json", "Qwen__Qwen3-0.6B.json", "draft_model"),
    ("Qwen__Qwen3-32B.json", "specforge__qwen3-32b-eagle3.json", "eagle3"),
    ("Qwen__Qwen2.5-7B-Instruct.json", "Qwen__Qwen2.5-0.5B.json", "draft_model"),
    ("openai__gpt-oss-120b.json", "specforge__gpt-oss-120B-eagle3.json", "eagle3"),
    ("moonshotai__Kimi-K3.json", "k3-dspark-block5.json", "dspark"),
    ("moonshotai__Kimi-K3.json", "specforge__kimi-k3-dspark.json", "dspark"),
    ("deepseek-ai__DeepSeek-V3.json", None, "mtp"),
    ("zai-org__GLM-5.json", None, "mtp"),
    ("deepseek-ai__DeepSeek-V2-Lite.json", None, "ngram"),
    ("Qwen__Qwen3-235B-A22B.json", None, "suffix"),
    ("mistralai__Mixtral-8x22B-Instruct-v0.1.json", None, "ngram"),
    ("moonshotai__Kimi-K2-Instruct.json", None, "ngram"),
    ("layout-llama4-scout-text.json", None, "ngram"),
    ("layout-qwen3-next-80b.json", None, "ngram"),
]


def _pair_document(target: str, draft: str | None, method: str, index: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"target": {"model": f"org/target-{index}", "config": _fixture(target)},
                            "draft": {"method": method}, "resources": {"gpu": {"product": "H200-141GB"}}}
    if draft:
        spec["draft"].update(model=f"org/draft-{index}", config=_fixture(draft))
    if method in ("ngram", "suffix", "eagle", "eagle3", "draft_model", "mtp"):
        spec["draft"]["numSpeculativeTokens"] = 3
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": f"pair-{index}", "namespace": "team-a"}, "spec": spec}


def bases() -> list[dict[str, Any]]:
    docs = [_pair_document(t, d, m, i) for i, (t, d, m) in enumerate(PAIRS)]
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") == "SpeculativeDeployment"]
    return docs


# ---- document mutators -----------------------------------------------------------------------

def _configs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every dict under spec.{target,draft}.config, nested ones included (text_config, rope...)."""
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    out: list[dict[str, Any]] = []
    for part in ("target", "draft"):
        config = (spec.get(part) or {}).get("config") if isinstance(spec.get(part), dict) else None
        stack = [config] if isinstance(config, dict) else []
        while stack:
            node = stack.pop()
            out.append(node)
            stack += [v for v in node.values() if isinstance(v, dict) and len(out) < 50]
    return out


def _set(root: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = root
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


def _value(rng: random.Random, special: list[Any] | None = None) -> Any:
    if special and rng.random() < 0.6:
        return copy.deepcopy(rng.choice(special))
    return copy.deepcopy(rng.choice(VALUES))


def m_config_key(doc: dict[str, Any], rng: random.Random) -> str:
    configs = _configs(doc)
    if not configs:
        return m_spec_field(doc, rng)
    config, key = rng.choice(configs), rng.choice(CONFIG_KEYS)
    config[key] = _value(rng, SUBTREES.get(key))
    return f"config.{key}"


def m_config_subtree(doc: dict[str, Any], rng: random.Random) -> str:
    configs = _configs(doc)
    if not configs:
        return m_spec_field(doc, rng)
    key = rng.choice(sorted(SUBTREES))
    rng.choice(configs[:2])[key] = copy.deepcopy(rng.choice(SUBTREES[key]))
    return f"subtree.{key}"


def m_config_drop(doc: dict[str, Any], rng: random.Random) -> str:
    configs = _configs(doc)
    if not configs:
        return m_spec_field(doc, rng)
    config = rng.choice(configs)
    keys = sorted(config)
    for key in rng.sample(keys, k=rng.randint(1, max(1, len(keys)))) if keys else ():
        del config[key]
    return "config.drop"


def m_config_retype(doc: dict[str, Any], rng: random.Random) -> str:
    """Every numeric value of a config becomes the same wrong thing (string, bool, float)."""
    configs = _configs(doc)
    if not configs:
        return m_spec_field(doc, rng)
    config = rng.choice(configs)
    how = rng.choice(["str", "bool", "float", "neg", "huge", "zero", "list"])
    for key, value in list(config.items()):
        if isinstance(value, int) and not isinstance(value, bool):
            config[key] = {"str": str(value), "bool": bool(value), "float": value + 0.5, "neg": -value, "huge": value * 10**24,
                           "zero": 0, "list": [value]}[how]
    return f"config.retype-{how}"


def m_config_whole(doc: dict[str, Any], rng: random.Random) -> str:
    spec = doc.setdefault("spec", {}) if isinstance(doc.get("spec"), dict) else {}
    part = spec.get(rng.choice(["target", "draft"]))
    if isinstance(part, dict):
        part["config"] = _value(rng, [[], "x", 5, {}, {"model_type": "x"}, _nested(70), {"a": _nested(31)}, None,
                                      {"model_type": "llama", **{f"k{i}": i for i in range(50000)}}])
    return "config.whole"


def m_spec_field(doc: dict[str, Any], rng: random.Random) -> str:
    if not isinstance(doc.get("spec"), dict):
        doc["spec"] = {}
    path = rng.choice(SPEC_PATHS)
    _set(doc["spec"], path, _value(rng, SPEC_SPECIAL.get(path)))
    return "spec." + ".".join(path)


def m_spec_type(doc: dict[str, Any], rng: random.Random) -> str:
    doc["spec"] = _value(rng, [[], "x", 5, None, {}, {"target": []}, {"draft": "eagle"}, {"target": {"config": []}}, True, _nested(64)])
    return "spec.whole"


def m_metadata(doc: dict[str, Any], rng: random.Random) -> str:
    doc["metadata"] = copy.deepcopy(rng.choice(METADATA_VARIANTS))
    return "metadata"


def m_status(doc: dict[str, Any], rng: random.Random) -> str:
    doc["status"] = copy.deepcopy(rng.choice(STATUS_VARIANTS))
    return "status"


def m_envelope(doc: dict[str, Any], rng: random.Random) -> str:
    which = rng.choice(["apiVersion", "kind", "both", "drop", "extra"])
    if which in ("apiVersion", "both"):
        doc["apiVersion"] = rng.choice(API_VERSIONS)
    if which in ("kind", "both"):
        doc["kind"] = rng.choice(KINDS)
    if which == "drop":
        doc.pop(rng.choice(["apiVersion", "kind", "metadata", "spec"]), None)
    if which == "extra":
        doc[rng.choice(["data", "items", "Spec", "spec ", "x"])] = _value(rng)
    return f"envelope.{which}"


def m_configmap_ref(doc: dict[str, Any], rng: random.Random) -> str:
    """Move a config into a ConfigMap of the stream (its text made hostile); the stream step adds it."""
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else None
    part = spec.get("target") if spec else None
    if not isinstance(part, dict) or not isinstance(part.get("config"), dict):
        return m_spec_field(doc, rng)
    config = part.pop("config")
    name = rng.choice(["cm", "cm-" + "x" * 300, ""])
    part["configMapRef"] = {"name": name, "key": rng.choice(["config.json", "missing", ""])}
    doc.setdefault("__configmaps__", []).append({"name": name, "key": "config.json", "text": hostile_json_text(config, rng)})
    return "configmap"


MODEL_REFS = SPEC_SPECIAL[("target", "model")] + ["a" * 300, "a\x00b", "a/b/c", "-x", "a..b", "org/-name", "." * 3, "org/name",
                                                   "/proc/self/mem", "/proc/self/status", "/dev/null", "/etc", "\\\\server\\share"]
REVISIONS = ["main", "../../../etc", "a" * 128, "\x00", "refs/pr/1", " ", "v1.0", "0" * 40, "~", "%2e%2e"]


def m_model_ref(doc: dict[str, Any], rng: random.Random) -> str:
    """No inline config: the model reference itself is read (a path, a Hub id, nonsense)."""
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else None
    part = spec.get(rng.choice(["target", "draft"])) if spec else None
    if not isinstance(part, dict):
        return m_spec_field(doc, rng)
    part.pop("config", None)
    part["model"] = copy.deepcopy(rng.choice(MODEL_REFS))
    if rng.random() < 0.3:
        part["revision"] = rng.choice(REVISIONS)
    return "model-ref"


MUTATORS: list[tuple[Mutator, int]] = [(m_model_ref, 2), 
    (m_config_key, 10), (m_config_subtree, 6), (m_config_drop, 2), (m_config_retype, 2), (m_config_whole, 1),
    (m_spec_field, 8), (m_spec_type, 1), (m_metadata, 2), (m_status, 1), (m_envelope, 2), (m_configmap_ref, 3),
]


# ---- JSON text (ConfigMaps, validate's files) --------------------------------------------------

def hostile_json_text(config: dict[str, Any], rng: random.Random) -> str:
    how = rng.choice(["plain", "nan", "inf", "bigint", "dupkey", "deep", "array", "scalar", "bom", "nul", "truncated", "huge", "neg0",
                      "1e400", "utf16"])
    text = json.dumps(config)
    if how == "nan":
        return text[:-1] + ', "num_hidden_layers": NaN}'
    if how == "inf":
        return text[:-1] + ', "rope_scaling": {"rope_type": "linear", "factor": Infinity}}'
    if how == "bigint":
        return text[:-1] + ', "num_attention_heads": ' + "9" * 5000 + "}"
    if how == "dupkey":
        return text[:-1] + ', "num_attention_heads": 7, "num_attention_heads": 0}'
    if how == "deep":
        return text[:-1] + ', "x": ' + "[" * 10000 + "]" * 10000 + "}"
    if how == "array":
        return "[" + text + "]"
    if how == "scalar":
        return rng.choice(["5", "null", '"x"', "true", ""])
    if how == "bom":
        return "\ufeff" + text
    if how == "nul":
        return text[:-1] + ', "model_type": "ll\\u0000ama"}'
    if how == "truncated":
        return text[: len(text) // 2]
    if how == "huge":
        return text[:-1] + ', "pad": "' + "x" * (5 * 2**20) + '"}'
    if how == "neg0":
        return text[:-1] + ', "num_key_value_heads": -0, "head_dim": -0.0}'
    if how == "1e400":
        return text[:-1] + ', "max_position_embeddings": 1e400}'
    if how == "utf16":
        return text.encode("utf-16").decode("latin-1")
    return text


# ---- YAML text ---------------------------------------------------------------------------------

def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=10**6, allow_unicode=True)


def _configmap_docs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    maps = doc.pop("__configmaps__", []) if isinstance(doc, dict) else []
    namespace = (doc.get("metadata") or {}).get("namespace") if isinstance(doc.get("metadata"), dict) else None
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": m["name"], **({"namespace": namespace} if isinstance(namespace, str) else {})},
             "data": {m["key"]: m["text"]}} for m in maps]


TEXT_HOSTILITIES = ["alias-bomb", "alias-ok", "merge", "python-tag", "binary", "set", "custom-tag", "timestamp", "int-key",
                    "complex-key", "dupkey", "bom", "tabs", "flow", "crlf", "nul", "long-doc", "deep-flow", "deep-block",
                    "directive", "omap", "end-marker", "bad-indent", "anchor-self", "octal", "sexagesimal", "null-key",
                    "bool-key", "float-key", "empty-docs", "huge-line"]
# Hostilities that are one more key under `spec:`.
_UNDER_SPEC = {
    "python-tag": "  x: !!python/object/apply:os.system ['true']\n",
    "binary": "  image: !!binary aGVsbG8=\n",
    "set": "  replicas: !!set {a, b}\n",
    "custom-tag": "  replicas: !Ref 5\n",
    "timestamp": "  image: 2001-12-14t21:59:43.10-05:00\n",
    "int-key": "  5: x\n",
    "complex-key": "  ? [a, b]\n  : x\n",
    "null-key": "  ~: x\n",
    "bool-key": "  yes: x\n",
    "float-key": "  1.5: x\n",
    "dupkey": "  replicas: 1\n  replicas: 2\n",
    "omap": "  scheduling: !!omap [a: 1, b: 2]\n",
    "octal": "  replicas: 0o17\n",
    "sexagesimal": "  replicas: 1:30\n",
}


def _alias_bomb(text: str) -> str:
    bomb = 'a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))
    return text.replace("spec:\n", "spec:\n  bomb:\n" + "".join("    " + line + "\n" for line in bomb.splitlines()), 1)


def _flow(text: str) -> str:
    try:
        return json.dumps(yaml.safe_load(text))
    except Exception:  # noqa: BLE001 - the text is already broken: keep it
        return text


# Hostilities that rewrite the text otherwise.
_REWRITES: dict[str, Callable[[str], str]] = {
    "alias-bomb": _alias_bomb,
    "alias-ok": lambda text: text.replace("spec:\n", "x-shared: &shared {product: H100}\nspec:\n", 1).replace("product: H200-141GB", "<<: *shared"),
    "merge": lambda text: "base: &base\n  method: eagle3\n" + text.replace("draft:\n", "draft:\n    <<: *base\n", 1),
    "bom": lambda text: "\ufeff" + text,
    "tabs": lambda text: text.replace("  ", "\t", 3),
    "flow": _flow,
    "crlf": lambda text: text.replace("\n", "\r\n"),
    "nul": lambda text: text.replace("spec:", "spec:\x00", 1),
    "long-doc": lambda text: text.replace("spec:\n", "spec:\n  pad: " + "x" * (300 * 1024) + "\n", 1),
    "huge-line": lambda text: text + "\n# " + "y" * (2 * 2**20) + "\n",
    "directive": lambda text: "%YAML 1.1\n%TAG ! tag:x,2000:\n---\n" + text,
    "end-marker": lambda text: text + "...\n--- \n...\n",
    "bad-indent": lambda text: text.replace("\n  ", "\n   ", 1),
    "anchor-self": lambda text: text.replace("spec:\n", "spec: &s\n  self: *s\n", 1),
    "empty-docs": lambda text: "---\n---\n~\n---\n" + text + "---\n",
}


def _deep_flow(text: str, rng: random.Random) -> tuple[str, int]:
    depth = rng.choice([65, 500, 5000, 50000])
    return text.replace("spec:\n", "spec:\n  x: " + "[" * depth + "]" * depth + "\n", 1), depth


def _deep_block(text: str, rng: random.Random) -> tuple[str, int]:
    depth = rng.choice([65, 300])
    body = "".join("  " * (i + 1) + f"k{i}:\n" for i in range(depth)) + "  " * (depth + 1) + "v: 1\n"
    return text.replace("spec:\n", "spec:\n  deep:\n" + "".join("  " + line + "\n" for line in body.splitlines()), 1), depth


_DEEP = {"deep-flow": _deep_flow, "deep-block": _deep_block}


def text_transform(text: str, rng: random.Random) -> tuple[str, str]:
    """YAML-level hostility applied to a document's text: (the text, which one)."""
    how = rng.choice(TEXT_HOSTILITIES)
    if how in _UNDER_SPEC:
        return text.replace("spec:\n", "spec:\n" + _UNDER_SPEC[how], 1), how
    if how in _DEEP:
        text, depth = _DEEP[how](text, rng)
        return text, f"{how}-{depth}"
    return _REWRITES[how](text), how


def stream_of(docs: list[dict[str, Any]], rng: random.Random) -> tuple[str, str]:
    """Several documents in one stream: the mutated ones, ConfigMaps, List kinds, scalars."""
    how = rng.choice(["single"] * 6 + ["multi", "list-kind", "with-others", "scalar-doc", "same-name", "only-others"])
    extra_maps = [m for d in docs for m in _configmap_docs(d)]
    if how == "list-kind":
        return _dump({"apiVersion": "v1", "kind": "List", "items": docs + extra_maps}), how
    if how == "only-others":
        return _dump_all(extra_maps + [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}]), how
    parts: list[Any] = list(docs) + extra_maps
    if how == "with-others":
        parts += [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}, {"kind": "ConfigMap", "metadata": 5, "data": 5},
                  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"config.json": 5}}]
    if how == "scalar-doc":
        parts.insert(rng.randrange(len(parts) + 1), rng.choice([5, "x", [], True]))
    if how == "same-name":
        parts += [copy.deepcopy(docs[0])]
    rng.shuffle(parts)
    return _dump_all(parts), how


def _dump_all(parts: list[Any]) -> str:
    return "".join("---\n" + _dump(p) for p in parts)


@dataclass
class Case:
    what: str
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)  # name -> content, written to a temp dir


def plan_cases(count: int, seed: int) -> Iterator[Case]:
    rng = random.Random(seed)
    pool = bases()
    for _ in range(count):
        ndocs = 1 if rng.random() < 0.8 else rng.randint(2, 4)
        docs, whats = [], []
        for _ in range(ndocs):
            doc = copy.deepcopy(rng.choice(pool))
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                mutators, weights = zip(*MUTATORS)
                whats.append(rng.choices(mutators, weights)[0](doc, rng))
            docs.append(doc)
        text, stream_how = stream_of(docs, rng)
        if rng.random() < 0.3:
            text, text_how = text_transform(text, rng)
            whats.append("yaml." + text_how)
        if stream_how != "single":
            whats.append("stream." + stream_how)
        content = text.encode("utf-8", "surrogatepass")
        if rng.random() < 0.01:
            content = content.replace(b"spec:", b"spec:\xff\xfe", 1)
            whats.append("bytes.invalid-utf8")
        output = rng.choice(["json", "json", "yaml", "text"])
        yield Case(" ".join(whats), ["plan", "-f", "{dir}/sd.yaml", "-o", output], {"sd.yaml": content})


VALIDATE_TARGETS = [p for p in PAIRS]


def validate_cases(count: int, seed: int) -> Iterator[Case]:
    """`validate --target FILE [--draft FILE]` with hostile config.json files and flags."""
    rng = random.Random(seed + 1)
    for _ in range(count):
        target_name, draft_name, method = rng.choice(PAIRS)
        configs = {"target": _fixture(target_name), "draft": _fixture(draft_name) if draft_name else None}
        whats = []
        which = rng.choice(["target", "draft"]) if draft_name else "target"
        doc = {"spec": {which: {"config": configs[which]}}}
        mutator = rng.choice([m_config_key, m_config_key, m_config_subtree, m_config_drop, m_config_retype])
        whats.append(f"{which}:{mutator(doc, rng)}")
        texts = {k: json.dumps(v) for k, v in configs.items() if v is not None}
        if rng.random() < 0.4:
            texts[which] = hostile_json_text(configs[which], rng)
            whats.append(f"{which}:json")
        files = {f"{k}.json": v.encode("utf-8", "surrogatepass") for k, v in texts.items()}
        if rng.random() < 0.03:
            files[f"{which}.json"] = b"\xff\xfe\x00garbage"
            whats.append("bytes")
        target_ref = "{dir}/target.json"
        if rng.random() < 0.1:
            target_ref = rng.choice(MODEL_REFS + ["{dir}", "{dir}/missing.json", "{dir}/stdout"])
            whats.append("target-ref")
        argv = ["validate", "--target", target_ref, "--method", method, "-o", rng.choice(["json", "text"])]
        if draft_name:
            argv += ["--draft", "{dir}/draft.json"]
        flag = rng.choice([None, None, "--tp", "--draft-tp", "--pp", "--num-speculative-tokens", "--max-model-len", "--gpu",
                           "--vllm-version", "--image", "--revision"])
        if flag:
            argv += [flag, str(rng.choice(["0", "-1", "auto", "8", str(10**30), str(2**63), "1e3", "x", "", "H100", "0.33.0", "v0.33.0", "99.0.0"]))]
            whats.append(f"flag{flag}")
        if method in ("ngram", "suffix", "eagle", "eagle3", "draft_model", "mtp") and flag != "--num-speculative-tokens":
            argv += ["--num-speculative-tokens", "3"]
        yield Case(" ".join(whats), argv, files)


# ---- running -------------------------------------------------------------------------------

@dataclass
class Outcome:
    what: str
    argv: list[str]
    code: int | None  # None: killed at the time limit
    seconds: float
    max_rss_kib: int
    stdout: str
    stderr: str
    traceback: str | None = None
    refusal: str = ""  # what the refusal named, shortened (for the summary's histogram)
    problem: str | None = None  # what is wrong with the run (judged before stdout is dropped)


_TRACEBACK_EXIT = 70


def _child(case: Case, workdir: str, out_path: str, err_path: str) -> None:
    """In the forked child: stdout/stderr to files, the CLI's catch-all off (so a bug is a
    traceback, not an 'internal error' line), exit with the CLI's status."""
    os.environ["SPECDEPLOY_DEBUG"] = "1"
    out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - lives as long as the child
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    code = _TRACEBACK_EXIT
    try:
        from specdeploy.cli import main

        code = main([a.replace("{dir}", workdir) for a in case.argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    except BaseException:  # noqa: BLE001 - what we count
        sys.stderr.write("\n__TRACEBACK__\n" + traceback.format_exc())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_forked(case: Case, workdir: Path) -> Outcome:
    for name, content in case.files.items():
        (workdir / name).write_bytes(content)
    out_path, err_path = str(workdir / "stdout"), str(workdir / "stderr")
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            _child(case, str(workdir), out_path, err_path)
        finally:
            os._exit(_TRACEBACK_EXIT)
    code: int | None = None
    rss = 0
    while True:
        waited, status, usage = os.wait4(pid, os.WNOHANG)
        if waited:
            code = os.waitstatus_to_exitcode(status)
            rss = usage.ru_maxrss
            break
        if time.perf_counter() - start > TIME_LIMIT_S:
            os.kill(pid, signal.SIGKILL)
            _, _, usage = os.wait4(pid, 0)
            rss = usage.ru_maxrss
            break
        time.sleep(0.002)
    seconds = time.perf_counter() - start
    stdout = Path(out_path).read_text(errors="replace")
    stderr = Path(err_path).read_text(errors="replace")
    tb = stderr.partition("__TRACEBACK__\n")[2] or None
    return Outcome(case.what, case.argv, code, seconds, rss, stdout[:20_000_000], stderr[:20_000], tb)


def run_subprocess(case: Case, workdir: Path, python: str) -> Outcome:
    """The real thing: `python -m specdeploy.cli ...` as its own process (what a user runs),
    its own peak RSS from wait4, killed at the time limit."""
    for name, content in case.files.items():
        (workdir / name).write_bytes(content)
    argv = [python, "-m", "specdeploy.cli", *[a.replace("{dir}", str(workdir)) for a in case.argv]]
    out_path, err_path = workdir / "stdout", workdir / "stderr"
    start = time.perf_counter()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env={**os.environ, "SPECDEPLOY_DEBUG": ""})
    code: int | None = None
    while True:
        waited, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if waited:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.perf_counter() - start > TIME_LIMIT_S:
            proc.kill()
            _, _, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.01)
    proc.returncode = code if code is not None else -9  # reaped here: keep Popen from waiting again
    seconds = time.perf_counter() - start
    stdout, stderr = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    tb = stderr if ("Traceback (most recent call last)" in stderr or "internal error" in stderr) else None
    return Outcome(case.what, case.argv, code, seconds, usage.ru_maxrss, stdout[:20_000_000], stderr[:20_000], tb)


# Messages that are Python's words, not ours: a refusal must say which field and what is allowed.
RAW_PYTHON = ("object has no attribute", "unsupported operand", "invalid literal for", "not subscriptable",
              "unhashable type", "object is not iterable", "takes no arguments", "Exceeds the limit",
              "[Errno", "division by zero", "list index out of range", "maximum recursion", "cannot convert", "must be real number",
              "KeyError", "not supported between instances", "object of type", "is not JSON serializable", "internal error")


def problem(outcome: Outcome) -> str | None:
    """What is wrong with one run (None: a clean answer)."""
    if outcome.traceback:
        lines = [line for line in outcome.traceback.strip().splitlines() if line.strip()]
        return "traceback: " + (lines[-1] if lines else "?")
    if outcome.code is None:
        return f"over {TIME_LIMIT_S:.0f} s"
    if outcome.max_rss_kib > MEMORY_LIMIT_KIB:
        return f"peak RSS {outcome.max_rss_kib // 1024} MiB"
    if outcome.code not in (0, 1, 2):
        return f"exit {outcome.code}"
    if outcome.code in (0, 1) and outcome.argv[0] == "plan":
        children = child_problems(accepted_manifests(outcome.stdout, outcome.argv[outcome.argv.index("-o") + 1]))
        if children:
            return f"accepted, but a child fails the Kubernetes schemas: {children[0]}"
    if outcome.code == 2:
        message = outcome.stderr.strip()
        if not message:
            return "exit 2 with nothing on stderr"
        raw = next((r for r in RAW_PYTHON if r in message), None)
        return f"exit 2, unclear: {message[:300]}" if raw else None
    if outcome.code == 1:
        findings = _findings(outcome)
        if findings is None:  # text/yaml output: the report is there, the findings are its lines
            return None if "[error]" in outcome.stdout or "severity: error" in outcome.stdout else "exit 1 with no error finding"
        errors = [f for f in findings if f.get("severity") == "error"]
        if not errors:
            return "exit 1 with no error finding"
        for f in errors:
            if not f.get("field") and f.get("code") != "object-invalid":
                return f"finding without a field: {f}"
            raw = next((r for r in RAW_PYTHON if r in str(f.get("message"))), None)
            if raw and f.get("code") != "draft-load-fails":  # that one quotes the error vLLM's loader would raise
                return f"unclear finding {f.get('code')} {f.get('field')}: {str(f.get('message'))[:300]}"
    return None


_INDEXES = re.compile(r"\[\d+\]|\.k\d+")


def refusal(outcome: Outcome) -> str:
    """The first thing a refusal names: the error finding's code and field, or stderr's line."""
    if outcome.code == 2:
        line = outcome.stderr.strip().splitlines()[0] if outcome.stderr.strip() else ""
        line = re.sub(r"/tmp/[^ :,]+", "FILE", line)
        return "exit 2: " + re.sub(r"\d+", "N", line)[:110]
    if outcome.code == 1:
        findings = _findings(outcome)
        if findings:
            first = next((f for f in findings if f.get("severity") == "error"), findings[0])
            field_ = _INDEXES.sub("", str(first.get("field")))
            return f"exit 1: {first.get('code')} {field_}"
        return "exit 1 (text/yaml)"
    return f"exit {outcome.code}"


def _findings(outcome: Outcome) -> list[dict[str, Any]] | None:
    if "-o" not in outcome.argv or outcome.argv[outcome.argv.index("-o") + 1] != "json":
        return None
    try:
        document = json.loads(outcome.stdout)
    except ValueError:
        return []
    results = document.get("results", [document]) if isinstance(document, dict) else []
    return [f for r in results if isinstance(r, dict) for f in r.get("findings", [])]


def _judged(outcome: Outcome) -> Outcome:
    outcome.refusal, outcome.problem = refusal(outcome), problem(outcome)
    outcome.stdout = outcome.stdout[:3000] if outcome.problem else ""  # keep memory flat
    return outcome


def _warm_up() -> None:
    """Import everything a plan touches before forking, so each child starts warm."""
    from specdeploy import cli, pipeline, stream  # noqa: F401
    from specdeploy.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.yaml"
        path.write_text((ROOT / "examples" / "llama-3.1-8b-eagle3.yaml").read_text())
        out, err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115
        try:
            main(["plan", "-f", str(path), "-o", "json"])
        finally:
            sys.stdout, sys.stderr = out, err


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000, help="plan -f cases")
    parser.add_argument("--validate", type=int, default=None, help="validate cases (default count/4)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--subprocess", type=int, default=0, help="also run this many cases as real processes")
    parser.add_argument("--report", type=Path, help="write every problem (and the summary) here as JSON")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _warm_up()
    validate_count = args.validate if args.validate is not None else args.count // 4
    total = args.count + validate_count
    every = max(1, total // args.subprocess) if args.subprocess else 0
    outcomes: list[Outcome] = []
    sampled: list[Case] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        # Generated as they run (a corpus in memory would inflate every fork's RSS).
        for i, case in enumerate(itertools.chain(plan_cases(args.count, args.seed), validate_cases(validate_count, args.seed))):
            outcome = run_forked(case, Path(tmp))
            outcomes.append(_judged(outcome))
            # A NUL cannot be passed in a real process's argv (no shell can send one either).
            if every and i % every == 0 and len(sampled) < args.subprocess and not any("\x00" in a for a in case.argv):
                sampled.append(case)
            if (i + 1) % 500 == 0:
                print(f"{i + 1}/{total} in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        print(json.dumps({"forked": summarise(outcomes)}), file=sys.stderr, flush=True)
        for case in sampled:
            outcome = run_subprocess(case, Path(tmp), sys.executable)
            outcome.what = "subprocess " + outcome.what
            outcomes.append(_judged(outcome))
    summary = summarise(outcomes)
    summary["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(summary, indent=1))
    if args.report:
        args.report.write_text(json.dumps({"summary": summary, "problems": [
            asdict(o) for o in outcomes if o.problem]}, indent=1))
    return 1 if summary["problems"] else 0


def summarise(outcomes: list[Outcome]) -> dict[str, Any]:
    codes: dict[str, int] = {}
    for o in outcomes:
        codes[str(o.code)] = codes.get(str(o.code), 0) + 1
    problems = [(o, o.problem) for o in outcomes if o.problem]
    refusals: dict[str, int] = {}
    for o in outcomes:
        refusals[o.refusal] = refusals.get(o.refusal, 0) + 1
    kinds: dict[str, int] = {}
    for _, p in problems:
        kinds[p[:90]] = kinds.get(p[:90], 0) + 1
    return {
        "runs": len(outcomes), "subprocess_runs": sum(o.what.startswith("subprocess") for o in outcomes),
        "exit_codes": codes, "tracebacks": sum(bool(o.traceback) for o in outcomes),
        "over_10s": sum(o.code is None for o in outcomes), "over_1GiB": sum(o.max_rss_kib > MEMORY_LIMIT_KIB for o in outcomes),
        "slowest_s": round(max((o.seconds for o in outcomes), default=0), 2),
        "peak_rss_mib": max((o.max_rss_kib for o in outcomes), default=0) // 1024,
        "problems": len(problems), "problem_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:40]),
        "refusals": dict(sorted(refusals.items(), key=lambda kv: -kv[1])[:80]),
    }


if __name__ == "__main__":
    raise SystemExit(main())
