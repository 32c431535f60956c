"""A tiny random model pair with a real (character-level) tokenizer, built in code.

For smoke runs (`python -m specviz walk --tiny`), fast tests and development: no download, built
in well under a second. The target is a small random Llama (peaked distributions); the draft is a
noisy copy, so the two agree often but not always and every outcome of a cycle shows up. The
tokenizer is a real `PreTrainedTokenizerFast` with one token per character, so texts behave as usual.
"""

from __future__ import annotations

import string

import torch

CHARS = string.ascii_lowercase + string.ascii_uppercase + string.digits + " .,!?'-\n"
SPECIAL = ["<unk>", "<eos>"]


def build_char_tokenizer() -> object:
    """A real fast tokenizer: one token per character of CHARS, plus <unk> and <eos>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + list(CHARS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")


def _tiny_llama(vocab_size: int, seed: int, layers: int, hidden: int, eos_id: int | None) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        initializer_range=0.4,  # peaked distributions instead of near-uniform ones
        bos_token_id=None, eos_token_id=eos_id, pad_token_id=None, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = eos_id
    return model


def build_tiny_pair(seed: int = 0, noise: float = 0.04, with_eos: bool = False, dtype: object = "float32") -> object:
    """ModelPair of a 2-layer random target and a perturbed copy as draft, on the CPU. `noise` scales the
    perturbation (0: draft = target, every draft accepted); `with_eos` lets the models emit <eos>; a
    bfloat16 `dtype` gives the float32 pair rounded."""
    from .models import ModelPair, as_dtype

    torch_dtype = as_dtype(dtype)  # before any work: a bad name fails fast
    tokenizer = build_char_tokenizer()
    vocab_size = len(tokenizer)
    eos_id = tokenizer.eos_token_id if with_eos else None
    target = _tiny_llama(vocab_size, seed, layers=2, hidden=64, eos_id=eos_id)
    draft = _tiny_llama(vocab_size, seed, layers=2, hidden=64, eos_id=eos_id)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * noise * param.std())
    for model in (target, draft):
        model.requires_grad_(False).to(torch_dtype)
    from .feature_head import FeatureHead

    return ModelPair(
        target=target, draft=draft, tokenizer=tokenizer, target_name="tiny-target", draft_name="tiny-draft",
        feature_head=FeatureHead.random(target, seed=seed), retrieval_store=own_text_store(target),
    )


@torch.inference_mode()
def own_text_store(target: torch.nn.Module, length: int = 24) -> object:
    """A retrieval datastore made as the default pair's is, at toy scale: the target's own greedy
    answers, here to every one-token prompt."""
    from .suffix_store import SuffixStore

    prompts = torch.arange(target.config.vocab_size, device=next(target.parameters()).device)[:, None]
    out = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=length,
                          do_sample=False, pad_token_id=0, eos_token_id=None)
    return SuffixStore(out.flatten().cpu().numpy())
