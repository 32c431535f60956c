"""Tiny random-config causal LMs for tests (no downloads): Llama and Qwen2 with GQA, GPT-2.

Every builder returns a float32 model in eval mode whose weights depend only on `seed`, so two
calls with the same arguments give identical models (a draft and a target can share a vocab).
"""

from __future__ import annotations

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
)

ARCHS = ("llama", "qwen2", "gpt2")


def tiny_model(
    arch: str = "llama",
    vocab_size: int = 64,
    seed: int = 0,
    num_layers: int = 2,
    hidden_size: int = 32,
    max_positions: int = 256,
) -> PreTrainedModel:
    """A tiny random `arch` causal LM: 4 attention heads (2 KV heads for llama/qwen2), float32, eval."""
    common = dict(vocab_size=vocab_size, bos_token_id=0, eos_token_id=1, pad_token_id=None)
    # Llama and Qwen2 share the decoder shape: grouped-query attention, 4 query / 2 KV heads.
    gqa_decoder = dict(
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        **common,
    )
    if arch == "llama":
        config = LlamaConfig(**gqa_decoder)
        cls = LlamaForCausalLM
    elif arch == "qwen2":
        config = Qwen2Config(use_sliding_window=False, **gqa_decoder)
        cls = Qwen2ForCausalLM
    elif arch == "gpt2":
        config = GPT2Config(
            n_embd=hidden_size, n_layer=num_layers, n_head=4, n_positions=max_positions, **common
        )
        cls = GPT2LMHeadModel
    else:
        raise ValueError(f"unknown tiny arch {arch!r}; choose from {ARCHS}")
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(config)
    return model.to(torch.float32).eval()
