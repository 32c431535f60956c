"""The classic proposer: an independent small language model with its own full KV cache.

The draft model (Leviathan et al. 2023; Chen et al. 2023) sees only tokens. Its cache holds a
prefix x_1..x_m of the committed sequence, m <= n-1. Each cycle it is fed the tokens it lacks
("catch-up": x_n, or x_{n-1}, x_n after a fully accepted cycle, because d_K is sampled but never
fed), then samples d_1 from q_1, feeds d_1, samples d_2, ... up to d_K. Its rollback truncates it
to the new committed length minus one, exactly like the target's.
"""

from __future__ import annotations

from typing import Any

import torch

from ..config import DecodeConfig
from ..runtime import forward, max_abs_kv_diff, open_cache
from .base import Distribution, Drafts, Proposer, draft_tokens


class DraftModelProposer(Proposer):
    name = "draft"
    label = "independent draft model"

    def __init__(self, draft: Any, config: DecodeConfig, max_context: int) -> None:
        self.draft, self.config, self.max_context = draft, config, max_context

    def start(self, prompt_ids: list[int], prefill_features: torch.Tensor | None) -> None:
        self.cache = open_cache(self.draft, self.config, self.max_context, prompt_ids)

    def propose(self, committed: list[int], k: int, distribution: Distribution, greedy: bool,
                generator: torch.Generator, min_confidence: float = 0.0) -> Drafts:
        cache = self.cache
        first = cache.get_seq_length()
        logits = forward(self.draft, cache, committed[first:], "draft", last_only=True)[-1]  # [V]
        tokens, probs = draft_tokens(
            logits, k, lambda token: forward(self.draft, cache, [token], "draft", last_only=True)[-1],
            distribution, greedy, generator, min_confidence,
        )  # d_k is never fed: the draft catches up on it next cycle
        return Drafts(tokens, probs, list(range(first, len(committed))))

    def rollback(self, committed: list[int]) -> None:
        keep = len(committed) - 1
        if self.cache.get_seq_length() > keep:
            self.cache.truncate(keep, "rollback")

    def check_invariant(self, committed: list[int]) -> float | None:
        return max_abs_kv_diff(self.draft, self.cache, committed[: self.cache.get_seq_length()])
