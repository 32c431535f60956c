"""Model pairs for the engine tests, built from the tiny random models in tests/tiny_models.py,
and the cache-invariant assertion every decoder test shares."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tiny_models import tiny_model

from specviz import FeatureHead
from specviz.models import ModelPair
from specviz.tiny import own_text_store


def path_to(tree, node: int) -> list[int]:
    """A token tree's nodes from the root's child down to `node` (empty for the root)."""
    path = []
    while node > 0:
        path.append(node)
        node = tree.parents[node]
    return path[::-1]


# Output-head scale per architecture that makes random distributions peaked rather than
# near-uniform (GPT-2 ties its head to the input embedding, so it needs far less).
SHARPNESS = {"llama": 20.0, "qwen2": 20.0, "gpt2": 3.0}

TOL = 1e-4  # float32 noise between incremental and one-shot attention

# (layout, page size, free policy): contiguous, and paged with tiny to roomy pages under both policies.
LAYOUT_CASES = [("contiguous", 16, "free")] + [
    ("paged", page, policy) for page in (1, 3, 16) for policy in ("free", "keep")
]


def make_pair(
    arch: str = "llama", vocab_size: int = 64, noise: float = 0.2, seed: int = 0,
    head_vocab: Sequence[int] | None = None,
) -> ModelPair:
    """A tiny random target and, as draft, a copy with every weight perturbed by `noise` x its std,
    so the two agree often but not always (accepted, corrected and bonus tokens all occur).
    Neither model has an EOS token, so every run lasts until max_new_tokens. The pair also carries
    an untrained feature head (`FeatureHead.random(target, seed)`, trimmed to `head_vocab` if
    given), and a retrieval datastore of the target's own greedy text, so every proposer runs on it."""
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
    target, draft = target.requires_grad_(False), draft.requires_grad_(False)
    head = FeatureHead.random(target, seed=seed, vocab=head_vocab)
    return ModelPair(target=target, draft=draft, tokenizer=None, feature_head=head,
                     retrieval_store=own_text_store(target))


def assert_invariant(decoder, tol: float = TOL) -> None:
    """docs/design.md §1/§1b after a cycle: the target cache holds the committed sequence minus its newest
    token, the proposer's cache (if it has one) holds a prefix of it, and both equal a fresh
    prefill (for a feature head: over features from a fresh target prefill)."""
    n = len(decoder.committed)
    assert decoder.target_cache.get_seq_length() == n - 1, "target cache must hold committed minus newest"
    diffs = decoder.check_invariant()
    if decoder.draft_cache is None:  # prompt lookup keeps no cache
        assert set(diffs) == {"target"}, diffs
    else:
        assert decoder.draft_cache.get_seq_length() <= n - 1
        assert set(diffs) == {"target", "draft"}, diffs
    assert max(diffs.values()) < tol, diffs
