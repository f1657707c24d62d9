"""A tiny Llama with SmolLM2's tokenizer and chat template, made by the test (2 layers, width 64:
~3.3M parameters, most of them the tied embedding): what the multi-process training proofs train."""

from __future__ import annotations

from pathlib import Path


def make_tiny_model(folder: Path, tokenizer_dir: Path, *, seed: int = 0, layers: int = 2,
                    init_std: float = 0.02) -> Path:
    """Write the model (fp32 safetensors) and SmolLM2's tokenizer to `folder`; returns it. A larger
    `init_std` gives token losses that differ widely from token to token (a loss that tells which
    tokens were trained on)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, initializer_range=init_std)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).float()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
