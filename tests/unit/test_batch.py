"""The batch size a plan assumes: vLLM's default for the GPU and release, or the user's flag.

Expected values are read off vLLM's code, the same in 0.32.0, 0.33.0 and 0.34.0:
engine/arg_utils.py `EngineArgs.get_batch_defaults` (OPENAI_API_SERVER: 16,384 tokens and
1,024 sequences from 160 GiB; 8,192 and 1,024 from 70 GiB unless "a100" is in the device name;
else 2,048 and 256) and `_set_default_max_num_seqs_and_batched_tokens_args` (the adjustments).
tests/parity/test_vllm_facts.py checks the release data against the live function."""

from __future__ import annotations

import pytest

from specdeploy.planning.batch import batch_limits
from specdeploy.planning.gpus import lookup_gpu
from specdeploy.vllm import SUPPORTED_VERSIONS, rule_set
from specdeploy.vllm.server_args import flag_value, positive_int
from tests.unit.test_validation import judge

L = 32768


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize(("product", "tokens", "seqs"), [
    ("B200-180GB", 16384, 1024), ("MI300X-192GB", 16384, 1024), ("MI325X-256GB", 16384, 1024),
    ("H100-80GB", 8192, 1024), ("H200-141GB", 8192, 1024), ("H20-96GB", 8192, 1024),
    ("A100-80GB", 2048, 256), ("A100-40GB", 2048, 256), ("L40S-48GB", 2048, 256),
])
def test_each_release_defaults_by_gpu_memory_and_name(version: str, product: str, tokens: int, seqs: int) -> None:
    gpu = lookup_gpu(product)
    batch = batch_limits([], rule_set(version), gpu.memory_gib, gpu, L)
    assert (batch.max_num_batched_tokens, batch.max_num_seqs) == (tokens, seqs)
    assert batch.source.startswith(f"vLLM {version}'s default for {product}: ")


def test_an_a100_is_named_as_the_reason_it_keeps_the_small_tier() -> None:
    a100, h100 = lookup_gpu("A100-80GB"), lookup_gpu("H100-80GB")
    facts = rule_set(SUPPORTED_VERSIONS[0])
    assert "'a100' in its name keeps it out of >= 70 GiB" in batch_limits([], facts, 80, a100, L).source
    assert "70-160 GiB" in batch_limits([], facts, 80, h100, L).source


def test_memory_alone_without_a_product_takes_the_larger_tier_and_says_so() -> None:
    """memoryGiB 80 could be an A100 (2,048) or an H100 (8,192): the larger never under-counts."""
    facts = rule_set(SUPPORTED_VERSIONS[0])
    batch = batch_limits([], facts, 80, None, L)
    assert batch.max_num_batched_tokens == 8192 and "memory alone decides" in batch.source
    unknown = batch_limits([], facts, None, None, L)
    assert (unknown.max_num_batched_tokens, unknown.max_num_seqs) == (2048, 256)
    assert "unknown GPU" in unknown.source


@pytest.mark.parametrize("args", [["--max-num-batched-tokens", "4096"], ["--max-num-batched-tokens=4096"],
                                  ["--max_num_batched_tokens", "4096"], ["--max-num-batched", "4096"],
                                  ["--max-num-batched-tokens", "1", "--max-num-batched-tokens", "4096"]])
def test_the_users_flag_overrides_the_default_in_every_spelling(args: list[str]) -> None:
    b200 = lookup_gpu("B200")
    batch = batch_limits(args, rule_set(SUPPORTED_VERSIONS[-1]), b200.memory_gib, b200, L)
    assert batch.max_num_batched_tokens == 4096
    assert batch.source == "--max-num-batched-tokens 4096 in spec.vllm.extraArgs"


def test_vllms_adjustments_of_the_default() -> None:
    """Throughput mode doubles unset limits; no chunked prefill raises the batch to max_model_len;
    the batch is capped at max_num_seqs x max_model_len, and unset max_num_seqs at the batch."""
    h100 = lookup_gpu("H100-80GB")
    for version, no_chunking in (("0.32.0", "--no-enable-chunked-prefill"), ("0.33.0", "--disable-chunked-prefill")):
        facts = rule_set(version)
        throughput = batch_limits(["--performance-mode", "throughput"], facts, 80, h100, L)
        assert (throughput.max_num_batched_tokens, throughput.max_num_seqs) == (16384, 2048)
        assert "doubled by --performance-mode throughput" in throughput.source
        whole = batch_limits([no_chunking], facts, 80, h100, L)
        assert whole.max_num_batched_tokens == L and "chunked prefill is off" in whole.source
        assert batch_limits(["--enable-chunked-prefill"], facts, 80, h100, L).max_num_batched_tokens == 8192
    facts = rule_set(SUPPORTED_VERSIONS[0])
    capped = batch_limits(["--max-num-seqs", "2"], facts, 80, h100, 1024)
    assert (capped.max_num_batched_tokens, capped.max_num_seqs) == (2048, 2) and "capped at" in capped.source
    small = batch_limits(["--max-num-batched-tokens", "128"], facts, 80, h100, L)
    assert small.max_num_seqs == 128  # min(1024, the batch)
    user_both = batch_limits(["--performance-mode=throughput", "--max-num-seqs=64", "--max-num-batched-tokens=512"],
                             facts, 80, h100, L)
    assert (user_both.max_num_batched_tokens, user_both.max_num_seqs) == (512, 64)


def test_flag_values_are_read_as_vllms_parser_reads_them() -> None:
    facts = rule_set(SUPPORTED_VERSIONS[0])
    assert flag_value(["--max-num-seqs"], "--max-num-seqs", facts) is None  # no value follows
    assert flag_value(["model-dir", "--unknown-flag", "3"], "--max-num-seqs", facts) is None
    assert flag_value(["--enable-chunked-prefill", "--no-enable-chunked-prefill"], "--enable-chunked-prefill", facts) is False
    assert [positive_int(v) for v in ("12", "0", "-3", "x", None, True)] == [12, None, None, None, None, None]


def test_the_plan_states_the_batch_it_assumed_and_the_memory_follows_it() -> None:
    """gpt-oss's sliding-window layers keep blocks for the tokens in flight (two batches): a B200
    plan counts 2 x 16,384, an H100 plan 2 x 8,192, and a user's flag replaces both."""
    def memory(product: str, *args: str):
        return judge("openai__gpt-oss-120b", "specforge__gpt-oss-120B-eagle3", "eagle3", k=3, tp=2,
                     resources={"gpu": {"product": product}}, serving={"maxModelLen": L},
                     vllm={"extraArgs": list(args)}).plan.memory

    b200, h100, user = memory("B200-180GB"), memory("H100-80GB"), memory("B200-180GB", "--max-num-batched-tokens", "8192")
    assert b200.to_dict()["batch"]["maxNumBatchedTokens"] == 16384 and b200.in_flight_tokens == 32768
    assert "default for B200-180GB" in b200.to_dict()["batch"]["source"]
    assert h100.in_flight_tokens == 16384 and user.in_flight_tokens == 16384
    assert user.to_dict()["batch"]["source"].startswith("--max-num-batched-tokens 8192")
    assert b200.kv_cache_bytes > h100.kv_cache_bytes == user.kv_cache_bytes
