"""KV cache and state per layer type on real configs, against figures computed by hand from
vLLM 0.32.0's rules (the same figures vLLM's own get_kv_cache_configs gives: tests/parity)."""

from __future__ import annotations

from specdeploy.geometry import read_geometry
from specdeploy.planning.kv_cache import cache_need, layer_caches, model_layer_caches
from specdeploy.vllm import DEFAULT_VERSION, rule_set
from tests.conftest import load_config

DEFAULT_FACTS = rule_set(DEFAULT_VERSION)
L = 32768


def geometry(name: str):
    return read_geometry(load_config(name), "t", DEFAULT_FACTS)[0]


def kinds(caches) -> dict[str, tuple[int, int]]:
    return {c.kind: (c.layers, c.bytes_per_token or c.state_bytes) for c in caches}


def test_full_attention_is_every_block_of_max_model_len_plus_the_null_block() -> None:
    caches = model_layer_caches(geometry("meta-llama__Llama-3.1-8B-Instruct"), 2, 1, "auto")
    assert kinds(caches) == {"full": (32, 4 * 256 * 2)}  # 4 KV heads per rank x (K + V of 128) x bf16
    need = cache_need(caches, max_model_len=L, block_size=128, in_flight_tokens=2048)
    assert need.bytes == (L // 128 + 1) * 32 * 128 * 2048 == 2_155_872_256


def test_gpt_oss_sliding_layers_hold_the_window_plus_the_tokens_in_flight() -> None:
    caches = model_layer_caches(geometry("openai__gpt-oss-120b"), 2, 1, "auto")
    assert kinds(caches) == {"sliding_window": (18, 1024), "full": (18, 1024)}
    need = cache_need(caches, max_model_len=L, block_size=128, in_flight_tokens=2048)
    sliding_blocks = -(-(128 - 1 + 2048) // 128) + 1  # 18
    assert need.blocks_per_sequence == sliding_blocks + L // 128 == 274
    assert need.bytes == (274 + 1) * 18 * 128 * 1024 == 648_806_400  # the plan used to say 1.13 GiB, +86 %


def test_sparse_mla_adds_the_indexer_cache_on_every_layer() -> None:
    caches = model_layer_caches(geometry("zai-org__GLM-5"), 2, 1, "auto")
    assert kinds(caches) == {"mla": (78, 576 * 2), "indexer": (78, 128 + 4)}
    need = cache_need(caches, max_model_len=L, block_size=16, in_flight_tokens=2048)
    assert need.bytes == (L // 16 + 1) * 78 * 16 * (1152 + 132) == 3_283_383_168
    fp8 = model_layer_caches(geometry("zai-org__GLM-5"), 2, 1, "fp8")
    assert kinds(fp8)["mla"] == (78, 656)  # the sparse backend canonicalizes fp8 to fp8_ds_mla


def test_kimi_k3_kda_state_pads_to_an_mla_page_of_768_tokens_at_tp8() -> None:
    caches = model_layer_caches(geometry("moonshotai__Kimi-K3"), 8, 1, "auto")
    conv = 3 * (3 * 96 * 128 // 8) * 2  # (kernel 4 - 1) columns of q, k, v channels, bf16
    recurrent = 96 // 8 * 128 * 128 * 4  # fp32
    assert kinds(caches) == {"state": (69, conv + recurrent), "mla": (24, 1152)}
    need = cache_need(caches, max_model_len=L, block_size=128, in_flight_tokens=2048)
    assert need.block_size == 128 * -(-(conv + recurrent) // (128 * 1152)) == 768
    # 69 KDA layers in 3 groups of 23, 24 MLA layers in one: a block holds 24 pages of 768 x 1152 B.
    assert need.bytes_per_block == 24 * 768 * 1152
    assert need.bytes == (3 * 1 + -(-L // 768) + 1) * 24 * 768 * 1152 == 997_982_208


def test_kimi_k3_state_is_kept_per_speculative_token_and_the_draft_layers_join_the_mla_group() -> None:
    target, draft = geometry("moonshotai__Kimi-K3"), geometry("k3-dspark-released")
    caches = layer_caches("dspark", target, draft, 8, 8, 1, "auto", 3)
    state = next(c for c in caches if c.kind == "state")
    assert state.state_bytes == 6 * 4608 * 2 + 12 * 128 * 128 * 4  # conv grows by k columns
    need = cache_need(caches, max_model_len=L, block_size=128, num_speculative_tokens=3, in_flight_tokens=2048)
    # 24 + 5 MLA layers set the group size; each KDA group keeps 1 + k state pages.
    assert need.bytes == (3 * 4 + 43 + 1) * 29 * 768 * 1152 == 1_436_811_264


def test_mtp_layers_are_of_the_targets_kind_and_eagle_heads_at_the_targets_tp() -> None:
    glm = geometry("zai-org__GLM-5")
    mtp = [c for c in layer_caches("mtp", glm, glm, 2, 2, 1, "auto", 1) if c.model == "draft"]
    assert kinds(mtp) == {"mla": (1, 1152), "indexer": (1, 132)}
    llama, head = geometry("meta-llama__Llama-3.1-8B-Instruct"), geometry("specforge__llama3-8B-eagle3")
    eagle = [c for c in layer_caches("eagle3", llama, head, 8, 1, 1, "auto", 3) if c.model == "draft"]
    assert kinds(eagle) == {"full": (1, 1 * 256 * 2)}  # built at TP 8 (one KV head), not at draft TP 1


def test_align_mode_keeps_two_state_pages_and_a_prefill_checkpoint() -> None:
    caches = model_layer_caches(geometry("moonshotai__Kimi-K3"), 8, 1, "auto")
    none = cache_need(caches, max_model_len=L, block_size=64, in_flight_tokens=2048)
    align = cache_need(caches, max_model_len=L, block_size=64, mamba_align_mode=True, in_flight_tokens=2048)
    assert align.blocks_per_sequence - none.blocks_per_sequence == 3 * 2  # 3 KDA groups x (2 + 1 - 1)


def test_llama4_chunked_layers_hold_one_chunk_plus_the_tokens_in_flight() -> None:
    caches = model_layer_caches(geometry("layout-llama4-scout-text"), 2, 1, "auto")
    assert kinds(caches) == {"chunked_local": (36, 4 * 256 * 2), "full": (12, 4 * 256 * 2)}
    need = cache_need(caches, max_model_len=L, block_size=128, in_flight_tokens=2048)
    # 36 chunked layers in 3 groups of 12 beside the 12 global ones: a block is 12 pages.
    assert need.blocks_per_sequence == 3 * ((8192 + 2048) // 128) + L // 128 == 496
    assert need.bytes == 497 * 12 * 128 * 2048 == 1_563_426_816  # full attention everywhere: 3.0 GiB


def test_qwen3_next_counts_12_attention_layers_not_48_and_a_gated_delta_net_state() -> None:
    caches = model_layer_caches(geometry("layout-qwen3-next-80b"), 2, 1, "auto")
    conv = 3 * (128 * 16 * 2 + 128 * 32) // 2 * 2  # (kernel - 1) x conv channels per rank, bf16
    recurrent = 32 // 2 * 128 * 128 * 2  # v heads per rank x 128 x 128, model dtype under auto
    assert kinds(caches) == {"state": (36, conv + recurrent), "full": (12, 1 * 512 * 2)}
    need = cache_need(caches, max_model_len=L, block_size=128, mamba_align_mode=True, in_flight_tokens=2048)
    assert need.block_size == 128 * -(-(conv + recurrent) // (128 * 1024)) == 640
    # fp32 recurrent state, as the CPU platform stores it: vLLM's own figure on CPU.
    cpu = model_layer_caches(geometry("layout-qwen3-next-80b"), 2, 1, "auto", mamba_ssm_cache_dtype="float32")
    assert cache_need(cpu, max_model_len=L, block_size=128, in_flight_tokens=2048, mamba_align_mode=True).bytes == 509_607_936


def test_deepseek_v4_keeps_five_caches_in_its_own_block_sizes_the_same_on_every_rank() -> None:
    caches = model_layer_caches(geometry("deepseek-ai__DeepSeek-V4-Flash"), 8, 1, "auto")
    pages = {(c.kind, c.block_size, c.page_bytes, c.window): c.layers for c in caches}
    assert pages == {
        ("sliding_window_mla", 64, 37_440, 128): 43,  # every layer: 64 x 584 B, padded to a multiple of 576
        ("indexer", 256, 8_640, 0): 21,  # the 21 ratio-4 layers: 64 rows of 132 B
        ("compressor_state", 4, 8_640, 8): 21,  # the indexer's compressor: 4 x 2*2*128 fp32
        ("compressed_mla_4", 256, 37_440, 0): 21,  # 256 / 4 rows of 584 B
        ("compressor_state", 4, 32_832, 8): 21,  # 4 x 2*2*512 fp32
        ("compressed_mla_128", 256, 1_728, 0): 20,  # 2 rows of 584 B
        ("compressor_state", 8, 32_832, 128): 20,  # 8 x 2*1*512 fp32
    }
    assert caches == model_layer_caches(geometry("deepseek-ai__DeepSeek-V4-Flash"), 1, 1, "auto")


def test_deepseek_v4_packs_its_caches_into_groups_of_equal_repeats() -> None:
    """_get_packed_kv_cache_groups: the 43 sliding-window layers split in two groups (22 repeats
    per group: the least padding over 43, 21 and 20, at least 21); the block is the widest group,
    the 62 full-attention caches of the 256-token buckets."""
    caches = model_layer_caches(geometry("deepseek-ai__DeepSeek-V4-Flash"), 1, 1, "auto")
    need = cache_need(caches, max_model_len=L, in_flight_tokens=L)
    assert need.groups == 5 and need.bytes_per_block == 21 * 8_640 + 21 * 37_440 + 20 * 1_728 == 1_002_240
    window = lambda w, block: -(-min(w - 1 + L, L) // block) + 1  # noqa: E731
    blocks = 2 * window(128, 64) + L // 256 + window(8, 4) + window(128, 8)
    assert need.blocks_per_sequence == blocks == 13_444
    assert need.bytes == (blocks + 1) * 1_002_240 == 13_475_116_800  # the flat MLA figure said 2.95 GB


def test_chunked_layers_are_allocated_as_full_attention_beside_an_eagle_drafter() -> None:
    """config/vllm.py turns the hybrid KV cache manager off for chunked local attention + EAGLE."""
    target = geometry("meta-llama__Llama-4-Scout-17B-16E-Instruct")
    draft = read_geometry(load_config("specforge__llama4-scout-17B-16E-eagle3"), "d", DEFAULT_FACTS)[0]
    alone = layer_caches("ngram", target, None, 2, 2, 1, "auto", 0)
    with_eagle = layer_caches("eagle3", target, draft, 2, 2, 1, "auto", 3)
    assert {c.kind for c in alone} == {"full", "chunked_local"}
    assert {c.kind for c in with_eagle} == {"full"} and sum(c.layers for c in with_eagle) == 49


def test_a_model_wide_sliding_window_without_layer_types_makes_every_layer_sliding() -> None:
    # Mistral-7B-v0.1: vLLM 0.32/0.33 build 32 SlidingWindowSpec layers (docs/memory-parity-*.md).
    caches = model_layer_caches(geometry("mistralai__Mistral-7B-v0.1"), 1, 1, "auto")
    assert kinds(caches) == {"sliding_window": (32, 8 * 256 * 2)}
    need = cache_need(caches, max_model_len=L, block_size=128, in_flight_tokens=2048)
    blocks = -(-(4096 - 1 + 2048) // 128) + 1  # 49, not the 256 of max_model_len
    assert need.bytes == (blocks + 1) * 32 * 128 * 4096 == 838_860_800


def test_qwen2_use_sliding_window_false_and_gemma3_pattern_follow_transformers_layer_types() -> None:
    # DeepSeek-R1-Distill-Qwen-7B names sliding_window 4096 with use_sliding_window false: full.
    assert kinds(model_layer_caches(geometry("deepseek-ai__DeepSeek-R1-Distill-Qwen-7B"), 1, 1, "auto")) == {"full": (28, 4 * 256 * 2)}
    # gemma-3-1b: sliding_window_pattern 6 -> 22 sliding layers of 512, 4 global; one KV head of 256.
    caches = model_layer_caches(geometry("google__gemma-3-1b-it"), 4, 1, "auto")
    assert kinds(caches) == {"sliding_window": (22, 1024), "full": (4, 1024)}
    assert {c.window for c in caches} == {512, 0}


def test_granite_4_h_holds_mamba2_state_on_36_layers_and_kv_on_4_whatever_the_names() -> None:
    caches = model_layer_caches(geometry("layout-granite-4.0-h"), 2, 1, "auto")
    # mamba2_state_shape at TP 2: 1 group padded to 2; conv ((8192 + 2 x 2 x 128) / 2, 3) + ssm (64, 64, 128), bf16
    assert kinds(caches) == {"state": (36, (8192 + 512) // 2 * 3 * 2 + 64 * 64 * 128 * 2), "full": (4, 4 * 2 * 128 * 2)}
    assert next(c for c in caches if c.kind == "state").checkpoint_blocks == 1  # MambaMixer2's prefill checkpoint
    normalized = dict(load_config("layout-granite-4.0-h"))
    normalized["layer_types"] = ["full_attention" if t == "attention" else "linear_attention" for t in normalized["layer_types"]]
    assert model_layer_caches(read_geometry(normalized, "t", DEFAULT_FACTS)[0], 2, 1, "auto") == caches


def test_nemotron_h_state_is_fp32_by_default_and_mlp_layers_hold_no_cache() -> None:
    model = geometry("layout-nemotron-h-8b")
    caches = model_layer_caches(model, 1, 1, "auto")
    conv = (128 * 64 + 2 * 8 * 128) * 3 * 2
    assert kinds(caches) == {"state": (25, conv + 128 * 64 * 128 * 4), "full": (4, 8 * 2 * 128 * 2)}
    assert kinds(model_layer_caches(model, 1, 1, "auto", mamba_ssm_cache_dtype="bfloat16"))["state"] == (25, conv + 128 * 64 * 128 * 2)


def test_mamba1_state_takes_no_speculative_columns_and_mamba2_takes_k() -> None:
    jamba = kinds(model_layer_caches(geometry("layout-jamba-v0.1"), 1, 1, "auto", k=3))
    assert jamba == {"state": (28, 8192 * 3 * 2 + 8192 * 16 * 2), "full": (4, 8 * 2 * 128 * 2)}
    falcon = kinds(model_layer_caches(geometry("layout-falcon-h1"), 1, 1, "auto", k=3))
    assert falcon["state"] == (32, (1024 + 2 * 256) * (3 + 3) * 2 + 128 * 8 * 256 * 2)
    assert falcon["full"][0] == 32  # Falcon-H1: attention beside the Mamba mixer in every layer


def test_a_state_layer_of_an_unknown_family_counts_as_full_attention_never_as_nothing() -> None:
    import dataclasses

    model = geometry("Qwen__Qwen3-8B")
    unknown = dataclasses.replace(model, text_config={"model_type": "qwen3", "layer_types": ["linear_attention"] * 36})
    assert kinds(model_layer_caches(unknown, 1, 1, "auto")) == kinds(model_layer_caches(model, 1, 1, "auto"))
