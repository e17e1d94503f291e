"""Tiny random-weight Llama target and draft, and a tokenizer trained here: everything vLLM
needs to serve speculative decoding on CPU in about a minute, with no download.

head_dim is 64: vLLM's CPU attention refuses 16 (32 is the documented minimum)."""

from __future__ import annotations

from pathlib import Path

VOCAB_SIZE = 512
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
