"""The classic proposer: an independent small LM with its own full KV cache (docs/design.md §1, §1b).

Its cache holds a prefix x_1..x_m, m <= n-1. Each cycle it catches up on the tokens it lacks (x_n,
or x_{n-1}, x_n after full acceptance: d_K is never fed), then samples d_1, feeds it, samples d_2, …
Rollback truncates it to n'-1, like the target. A token tree (§1c) grows past x_1..x_n after the same
catch-up, and rollback cuts the cache back to that prefix.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import tree as trees
from ..config import DecodeConfig
from ..runtime import forward, max_abs_kv_diff, model_device, open_cache
from .base import Distribution, Drafts, Proposer, TreeDrafts, TreeFeeder, draft_tokens, tree_note


class DraftModelProposer(Proposer):
    name = "draft"

    def __init__(self, draft: Any, config: DecodeConfig, max_context: int) -> None:
        self.draft, self.config, self.max_context = draft, config, max_context
        self.tree_base: int | None = None  # the committed prefix a tree was grown from (until rollback)

    def start(self, prompt_ids: list[int], prefill_features: torch.Tensor | None) -> None:
        self.cache = open_cache(self.draft, self.config, self.max_context, prompt_ids)

    def _catch_up(self, committed: list[int]) -> tuple[torch.Tensor, list[int]]:
        """Feed the committed tokens the cache lacks: the logits after x_n [V], and their positions."""
        first = self.cache.get_seq_length()
        logits = forward(self.draft, self.cache, committed[first:], "draft", last_only=True)[-1]
        return logits, list(range(first, len(committed)))

    def propose(self, committed: list[int], k: int, distribution: Distribution, greedy: bool,
                generator: torch.Generator, min_confidence: float = 0.0) -> Drafts:
        cache = self.cache
        logits, caught_up = self._catch_up(committed)
        tokens, probs = draft_tokens(
            logits, k, lambda token: forward(self.draft, cache, [token], "draft", last_only=True)[-1],
            distribution, greedy, generator, min_confidence,
        )  # d_k is never fed: the draft catches up on it next cycle
        return Drafts(tokens, probs, caught_up)

    def propose_tree(self, committed: list[int], shape: trees.TreeShape) -> TreeDrafts:
        cache = self.cache
        root_logits, caught_up = self._catch_up(committed)
        self.tree_base = prefix = cache.get_seq_length()  # x_1..x_n

        def run(frontier: list[int], pool: list[trees.Candidate], mask: torch.Tensor,
                positions: list[int]) -> torch.Tensor:
            return forward(self.draft, cache, [pool[c].token for c in frontier], "draft", tree=(mask, positions))

        feeder = TreeFeeder(prefix, next(self.draft.parameters()).dtype, model_device(self.draft), run)
        tree, fed = trees.grow(committed[-1], root_logits, feeder, shape, max_fed=cache.max_len - prefix)
        return TreeDrafts(tree, caught_up, tree_note(tree, shape, feeder.calls), fed)

    def rollback(self, committed: list[int]) -> None:
        keep = len(committed) - 1
        if self.tree_base is not None:  # the entries past the prefix hold tree nodes, not the sequence
            keep, self.tree_base = min(keep, self.tree_base), None
        if self.cache.get_seq_length() > keep:
            self.cache.truncate(keep, "rollback")

    def restore(self, saved) -> None:
        self.tree_base = None
        super().restore(saved)

    def check_invariant(self, committed: list[int]) -> float | None:
        return max_abs_kv_diff(self.draft, self.cache, committed[: self.cache.get_seq_length()])

    @classmethod
    def from_pair(cls, pair: Any, config: DecodeConfig, max_context: int, vocab_size: int) -> DraftModelProposer:
        """Built by `make_proposer` (the proposer table) once it knows the pair has a draft model."""
        return cls(pair.draft, config, max_context)
