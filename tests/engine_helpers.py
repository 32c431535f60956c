"""Model pairs for the engine tests, built from the tiny random models in tests/tiny_models.py."""

from __future__ import annotations

import torch
from tiny_models import tiny_model

from specviz.models import ModelPair

# Output-head scale per architecture that makes random distributions peaked rather than
# near-uniform (GPT-2 ties its head to the input embedding, so it needs far less).
SHARPNESS = {"llama": 20.0, "qwen2": 20.0, "gpt2": 3.0}


def make_pair(arch: str = "llama", vocab_size: int = 64, noise: float = 0.2, seed: int = 0) -> ModelPair:
    """A tiny random target and, as draft, a copy with every weight perturbed by `noise` x its std,
    so the two agree often but not always (accepted, corrected and bonus tokens all occur).
    Neither model has an EOS token, so every run lasts until max_new_tokens."""
    target = tiny_model(arch, vocab_size=vocab_size, seed=seed)
    draft = tiny_model(arch, vocab_size=vocab_size, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    for model in (target, draft):  # no EOS: runs end at max_new_tokens, never by chance
        model.config.eos_token_id = model.generation_config.eos_token_id = None
    with torch.no_grad():
        for model in (target, draft):
            model.get_output_embeddings().weight.mul_(SHARPNESS[arch])
        for param in draft.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * noise * param.std())
    return ModelPair(target=target.requires_grad_(False), draft=draft.requires_grad_(False), tokenizer=None)
