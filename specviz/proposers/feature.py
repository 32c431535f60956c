"""The feature-head proposer (EAGLE-style): draft from the target's own hidden states (docs/design.md §1b).

F[p] is the target's feature at (0-based) position p; the head's cache entry p holds the pair
(F[p], x[p+1]), and its output G[p+1] gives the logits of the token at p+2. Catch-up feeds the pairs
it lacks from *real* features, the last of which yields d_1; d_2..d_K come from the head's own
predicted features, so those entries are always rolled back, even when their drafts are accepted.
The verify pass hands back the real features, and the next catch-up rebuilds the committed pairs
from them. A one-token prompt has no feature yet: its first cycle is a plain target step. A token
tree (§1c) feeds each frontier node's pair (G of its parent's entry, its token) the same way.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import tree as trees
from ..config import DecodeConfig
from ..feature_head import FeatureHead
from ..kv import num_attention_layers
from ..runtime import expected_reach, model_device, output_head_inputs, sized_cache, tree_inputs
from .base import Distribution, Drafts, Proposer, TreeDrafts, TreeFeeder, draft_tokens, tree_note

NO_FEATURE_YET = "no target feature yet (one-token context): a plain target step"


class FeatureProposer(Proposer):
    name = "feature"
    wants_target_features = True

    def __init__(self, head: FeatureHead, target: Any, config: DecodeConfig, max_context: int) -> None:
        self.head, self.target, self.config, self.max_context = head, target, config, max_context
        self.features: torch.Tensor | None = None  # real F[0..L-1], L = the target cache's length
        self.verify_features: torch.Tensor | None = None
        self.num_real = 0  # head entries built from real features (the rest are provisional)

    def start(self, prompt_ids: list[int], prefill_features: torch.Tensor | None) -> None:
        cfg = self.config
        self.cache = sized_cache(num_attention_layers(self.head.decoder), cfg, self.max_context,
                                 expected_reach(cfg, len(prompt_ids), self.max_context))
        hidden = self.head.layer_config.hidden_size
        empty = torch.zeros(0, hidden, device=model_device(self.target), dtype=self.head.fuse.weight.dtype)
        self.features = empty if prefill_features is None else prefill_features.to(empty.dtype)
        # Prefill the pairs (F[p], x[p+1]) for p = 0..n-3: the last real pair is left for the
        # first cycle's catch-up, whose output gives q_1 (as the draft model's catch-up does).
        num_prefill = max(0, len(prompt_ids) - 2)
        if num_prefill:
            self._feed(self.features[:num_prefill], prompt_ids[1 : num_prefill + 1], "prefill")
        self.num_real = num_prefill
        self.cache.drain_events()

    @torch.inference_mode()
    def _feed(self, features: torch.Tensor, tokens: list[int], phase: str,
              tree: tuple[torch.Tensor, list[int]] | None = None) -> torch.Tensor:
        """Append the pairs (features[i], tokens[i]) to the head's cache; predicted features [T, H].
        `tree` = (mask, positions) for token-tree nodes."""
        cache = self.cache
        extra = {} if tree is None else tree_inputs(self.head.decoder, *tree, num_tokens=len(tokens))
        start = cache.get_seq_length()
        cache.reserve(tokens, phase)
        try:
            ids = torch.tensor([tokens], dtype=torch.long, device=features.device)
            return self.head(features[None], ids, cache=cache, **extra)[0]
        except BaseException:
            cache.truncate(start, phase)
            raise

    def _catch_up(self, committed: list[int]) -> tuple[torch.Tensor, int]:
        """Feed the real pairs (F[p], x[p+1]) for p = m..n-2 (the entry that yields q_1 is always
        recomputed); the head's last output [1, H] and m, the cache's length before."""
        n = len(committed)
        m = min(self.cache.get_seq_length(), n - 2)
        if self.cache.get_seq_length() > m:
            self.cache.truncate(m, "draft")
        predicted = self._feed(self.features[m : n - 1], committed[m + 1 : n], "draft")[-1:]
        self.num_real = n - 1
        return predicted, m

    @torch.inference_mode()
    def propose(self, committed: list[int], k: int, distribution: Distribution, greedy: bool,
                generator: torch.Generator, min_confidence: float = 0.0) -> Drafts:
        n = len(committed)
        if n < 2:  # no target feature exists yet: nothing to draft from
            return Drafts([], [], [], NO_FEATURE_YET)
        predicted, m = self._catch_up(committed)

        def next_logits(token: int) -> torch.Tensor:
            nonlocal predicted  # the next pair rests on the head's own prediction, not on the target
            predicted = self._feed(predicted, [token], "draft")
            return self.head.full_logits(predicted)[0]  # [V], -inf outside a trimmed vocabulary

        tokens, probs = draft_tokens(self.head.full_logits(predicted)[0], k, next_logits, distribution, greedy,
                                     generator, min_confidence)
        note = f"caught up on {n - 1 - m} pair(s) from the target's real features"
        if len(tokens) > 1:
            note += f"; drafts 2..{len(tokens)} were drafted from the head's own predicted features"
        if len(tokens) < k:
            note += f"; stopped after {len(tokens)} of {k} drafts (next top probability below {min_confidence:g})"
        return Drafts(tokens, probs, list(range(m + 1, n)), note)

    @torch.inference_mode()
    def propose_tree(self, committed: list[int], shape: trees.TreeShape) -> TreeDrafts:
        n = len(committed)
        if n < 2:
            return TreeDrafts(trees.TokenTree([committed[-1]], [-1], [0]), [], NO_FEATURE_YET)
        root, m = self._catch_up(committed)
        root, prefix = root[0], n - 1  # [H]: G[n-1]
        predicted: dict[int, torch.Tensor] = {}  # candidate -> the head's output at its entry

        def run(frontier: list[int], pool: list[trees.Candidate], mask: torch.Tensor,
                positions: list[int]) -> torch.Tensor:
            parents = [pool[c].parent for c in frontier]
            inputs = torch.stack([root if p < 0 else predicted[p] for p in parents])  # [F, H]: the parents' G
            out = self._feed(inputs, [pool[c].token for c in frontier], "draft", (mask, positions))  # [F, H]
            predicted.update(zip(frontier, out))
            return self.head.full_logits(out)  # [F, V]

        feeder = TreeFeeder(prefix, self.head.fuse.weight.dtype, model_device(self.target), run)
        # q rows over the whole vocabulary (the trace's), searched over the head's candidates only
        tree, fed = trees.grow(committed[-1], self.head.full_logits(root), feeder, shape,
                               max_fed=self.cache.max_len - prefix, candidates=self.head.vocab)
        note = (f"caught up on {n - 1 - m} pair(s) from the target's real features; "
                + tree_note(tree, shape, feeder.calls) + " on the head's own predicted features")
        return TreeDrafts(tree, list(range(m + 1, n)), note, fed)

    def observe_verify(self, features: torch.Tensor | None) -> None:
        self.verify_features = features

    def rollback(self, committed: list[int]) -> None:  # keep the real features of 0..n'-2, as the target
        known = self.features if self.verify_features is None else torch.cat([self.features, self.verify_features])
        self.features = known[: len(committed) - 1]
        self.verify_features = None
        keep = min(self.num_real, len(committed) - 1)  # entries built from real features only
        if self.cache.get_seq_length() > keep:
            self.cache.truncate(keep, "rollback")
        self.num_real = self.cache.get_seq_length()

    def snapshot(self, num_committed: int):
        # "Committed" for the head means built from real features, whatever the drafts' fate.
        return self.cache.snapshot(min(self.num_real, self.cache.get_seq_length()))

    def save(self) -> Any:
        return (self.cache.get_seq_length(), self.features, self.num_real)

    def restore(self, saved: Any) -> None:
        length, self.features, self.num_real = saved
        self.verify_features = None
        super().restore(length)

    @torch.inference_mode()
    def check_invariant(self, committed: list[int]) -> float | None:
        """Max |difference| between the head's cache and a fresh head prefill over pairs whose
        features come from a fresh target prefill of the committed sequence."""
        from transformers import DynamicCache

        m = self.cache.get_seq_length()
        if m == 0:
            return 0.0
        ids = torch.tensor([committed[: m + 1]], dtype=torch.long, device=model_device(self.target))
        with output_head_inputs(self.target) as caught:  # this thread's pass only (shared models)
            self.target(input_ids=ids[:, :m])
        fresh_features = caught[0][0].to(self.head.fuse.weight.dtype)  # [m, H]
        reference = DynamicCache()
        self.head(fresh_features[None], ids[:, 1 : m + 1], cache=reference)
        keys, values = self.cache.dense_kv(0)
        ref = reference.layers[0]
        return max((keys - ref.keys).abs().max().item(), (values - ref.values).abs().max().item())

    @classmethod
    def from_pair(cls, pair: Any, config: DecodeConfig, max_context: int, vocab_size: int) -> FeatureProposer:
        """Built by `make_proposer` (the proposer table) once it knows the pair carries a head."""
        return cls(pair.feature_head, pair.target, config, max_context)

