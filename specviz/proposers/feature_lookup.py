"""Feature head + prompt lookup: copy where the text repeats itself, guess from the target's features elsewhere.

Prompt lookup costs nothing and, after a long match, is nearly always right: the first copied
draft passes after 80-86 % of matches of 3 or more tokens and 55 % of 2-token ones, but only after
16-22 % of 1-token ones (`python -m bench.match_acceptance`). Where nothing matches it proposes
nothing and the cycle is a plain target step -- on most of an answer that paraphrases its input.
The feature head (`feature.py`) costs a little per draft and is right ~40 % per depth anywhere.

This proposer takes the better of the two *before anything is drafted*, by one rule the engine can
read ahead (`match`): lookup's chain when the context's last `MIN_COPY_MATCH` or more tokens occur
earlier, the head's chain otherwise. Each q_i is the distribution its d_i was drawn from (one-hot
for a copy, the head's q for a guess), so the target's test keeps the output exact whichever source
proposed. For `k="auto"` the proposer is keyed: a cycle is counted by its match length (0 = the
head, 2, 3 or more = a copy), each class with its own prior and its own draft cost
(`costlaw.MATCH_PRIORS`, `costlaw.COPYING`). The head's cache is not fed on a copied cycle; its next
catch-up feeds the pairs it missed from the verify passes' real features, as after a plain step.

A token tree merges lookup's trie into the head's tree (as `feature+retrieval` merges retrieval's),
a copied path scored by its match length's measured first-draft pass rate.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import costlaw
from .. import tree as trees
from ..config import DecodeConfig
from ..runtime import model_device
from . import registry
from .base import Distribution, Drafts, TreeDrafts
from .feature import FeatureProposer
from .lookup import LookupProposer, find_continuations
from .retrieval import merge, sources_of

MIN_COPY_MATCH = 2  # a 1-token match ("the", a comma) copies the wrong continuation ~80 % of the time
COPIER = registry.get("lookup").words.noun  # the copies' source, as the views and the narrative name it


class FeatureLookupProposer(FeatureProposer):
    name = "feature+lookup"

    def __init__(self, head: Any, target: Any, config: DecodeConfig, max_context: int, vocab_size: int) -> None:
        super().__init__(head, target, config, max_context)
        self.lookup = LookupProposer(vocab_size, model_device(target), config.lookup_max_ngram,
                                     max(config.lookup_min_ngram, MIN_COPY_MATCH))

    def match(self, committed: list[int], k: int) -> tuple[int, int]:
        """(lookup's match length, its drafts) when lookup will copy; (0, k) when the head will draft."""
        matched, drafts = self.lookup.match(committed, k)
        return (matched, drafts) if drafts else (0, k)

    def propose(self, committed: list[int], k: int, distribution: Distribution, greedy: bool,
                generator: torch.Generator, min_confidence: float = 0.0) -> Drafts:
        copied = self.lookup.propose(committed, k, distribution, greedy, generator)
        if copied.tokens:
            return Drafts(copied.tokens, copied.probs, [], f"prompt lookup: {copied.note}",
                          sources=[COPIER] * len(copied.tokens))
        got = super().propose(committed, k, distribution, greedy, generator, min_confidence)
        return Drafts(got.tokens, got.probs, got.catch_up_positions,
                      f"feature head (the last {MIN_COPY_MATCH}+ tokens occur nowhere earlier): {got.note}",
                      sources=["feature head"] * len(got.tokens))

    def propose_tree(self, committed: list[int], shape: trees.TreeShape) -> TreeDrafts:
        grown = super().propose_tree(committed, shape)
        lookup = self.lookup
        found = find_continuations(committed, shape.depth, lookup.max_ngram, lookup.min_ngram, shape.nodes)
        if not found:
            grown.sources = ["feature head"] * grown.tree.num_nodes
            return grown
        copied = trees.from_paths(committed[-1], [c for c, _, _ in found], shape, lookup.vocab_size, lookup.device)
        trust = math.log(copy_trust(found[0][1]))
        copied.scores = [s + trust if i else 0.0 for i, s in enumerate(copied.scores)]
        tree = merge(grown.tree, copied, shape.nodes)
        note = (f"{grown.note}; merged with prompt lookup's trie of {len(found)} earlier occurrence(s) of the last "
                f"{found[0][1]}..{found[-1][1]} token(s): {tree.num_nodes} node(s) in all")
        return TreeDrafts(tree, grown.catch_up_positions, note, grown.fed,
                          sources=sources_of(tree, grown.tree, copied, COPIER))

    @classmethod
    def from_pair(cls, pair: Any, config: DecodeConfig, max_context: int, vocab_size: int) -> FeatureLookupProposer:
        """Built by `make_proposer` once it knows the pair carries a feature head."""
        return cls(pair.feature_head, pair.target, config, max_context, vocab_size)


def copy_trust(matched: int) -> float:
    """How far a copy after a `matched`-token match can be trusted beside the head's probabilities:
    the measured first-draft pass rate for that match length (`costlaw.MATCH_PRIORS`)."""
    priors = costlaw.MATCH_PRIORS["lookup"]
    return priors[min(matched, max(priors))]
