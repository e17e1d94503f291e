"""Tiny random-weight Llama target and draft, and a tokenizer trained here: everything vLLM
needs to serve speculative decoding on CPU in about a minute, with no download.

head_dim is 64: vLLM's CPU attention refuses 16 (32 is the documented minimum)."""

from __future__ import annotations

from pathlib import Path

VOCAB_SIZE = 512
AUX_LAYERS = (0, 1)  # target layers whose hidden states feed the EAGLE3 head
HEAD_DIM = 64
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "speculative decoding proposes tokens with a draft model and verifies them with the target",
    "kubernetes operators reconcile custom resources into pods services and deployments",
    "one two three four five six seven eight nine ten eleven twelve",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
] * 50


def build_tokenizer(out: Path) -> None:
    """A byte-level BPE trained on a fixed corpus, saved as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out)


def build_llama(out: Path, layers: int, heads: int = 2, kv_heads: int = 2, seed: int = 0,
                vocab_size: int = VOCAB_SIZE) -> None:
    """A Llama-shaped causal LM with random weights, plus the shared tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=heads * HEAD_DIM, intermediate_size=256,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=HEAD_DIM, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False,
    )
    config.torch_dtype = torch.bfloat16
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    build_tokenizer(out)


def build_pair(root: Path) -> tuple[Path, Path]:
    """(target, draft): the draft has one layer, the target two; same vocabulary."""
    target, draft = root / "tiny-target", root / "tiny-draft"
    if not (target / "config.json").exists():
        build_llama(target, layers=2, seed=0)
    if not (draft / "config.json").exists():
        build_llama(draft, layers=1, seed=1)
    return target, draft


def build_eagle3_head(out: Path, target_hidden: int = 2 * HEAD_DIM, heads: int = 2, seed: int = 3) -> None:
    """A one-layer EAGLE3 head in the published checkpoint layout (yuhuili/EAGLE3-*):
    `midlayer.*` (attention input is [embeds, hidden] = 2 x hidden), `fc` over three target
    hidden states, `norm`, `lm_head`, random weights. Architecture `LlamaForCausalLMEagle3`."""
    import json

    import torch
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    hidden = heads * HEAD_DIM
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": 256, "num_hidden_layers": 1,
        "num_attention_heads": heads, "num_key_value_heads": heads, "head_dim": HEAD_DIM,
        "vocab_size": VOCAB_SIZE, "draft_vocab_size": VOCAB_SIZE, "target_hidden_size": target_hidden,
        "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
        "dtype": "bfloat16",
        # The tiny target has 2 layers; tap both (vLLM's default picks layers 2, L/2, L-3).
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(AUX_LAYERS)},
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape) * 0.02).to(torch.bfloat16)

    qkv_in = 2 * hidden
    tensors = {
        "midlayer.self_attn.q_proj.weight": w(heads * HEAD_DIM, qkv_in),
        "midlayer.self_attn.k_proj.weight": w(heads * HEAD_DIM, qkv_in),
        "midlayer.self_attn.v_proj.weight": w(heads * HEAD_DIM, qkv_in),
        "midlayer.self_attn.o_proj.weight": w(hidden, heads * HEAD_DIM),
        "midlayer.mlp.gate_proj.weight": w(256, hidden),
        "midlayer.mlp.up_proj.weight": w(256, hidden),
        "midlayer.mlp.down_proj.weight": w(hidden, 256),
        "midlayer.input_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
        "midlayer.hidden_norm.weight": torch.ones(hidden, dtype=torch.bfloat16),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
        "fc.weight": w(hidden, len(AUX_LAYERS) * target_hidden),
        "norm.weight": torch.ones(hidden, dtype=torch.bfloat16),
        "lm_head.weight": w(VOCAB_SIZE, hidden),
    }
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
