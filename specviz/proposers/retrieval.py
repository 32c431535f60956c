"""Retrieval drafting: no model at all -- guess from text the target wrote before (docs/design.md §1b).

REST (He et al. 2023) and SuffixDecoding (Oliaro et al. 2024): take the longest suffix of the
context that also occurs in a store of earlier text, and propose what followed it there
(`specviz.suffix_store`). Two stores are searched: the datastore shipped with the pair (the
target's own answers to training prompts, `pair.retrieval_store`) and the texts this session
produced before (`Proposer.session_texts`, SuffixDecoding's growing store; the engine adds each
finished text). The longer match wins; on a tie the session's, which is about this very class.

* a chain: the most frequent continuation, token by token (at each step the most frequent next
  token among the occurrences still following the chosen path);
* a tree: the continuations' trie, a node's score its share of the occurrences (`tree.from_paths`).

The proposal is deterministic given the stores and the context, so q is one-hot, as for prompt
lookup: d_i passes with probability p_i(d_i), and a rejection's residual is p without d_j.
Exactness never depends on where guesses come from. `RetrievalFeatureProposer` merges these
branches into the feature head's tree, so the target picks whichever source is right.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from .. import tree as trees
from ..suffix_store import Match, SessionStore, SuffixStore
from ..trace import ContextMatch
from .base import Distribution, Drafts, Proposer, TreeDrafts
from .feature import FeatureProposer

MAX_MATCH = 16  # longest context suffix searched
MIN_MATCH = 2  # a one-token match (a "the", a newline) predicts little, and a draft costs verify work
MAX_PATHS = 256  # occurrences whose continuations are counted per lookup


def best_match(store: SuffixStore | None, session: SessionStore | None, context: Sequence[int], depth: int) -> Match:
    """The longer of the datastore's and the session's matches (a tie: the session's)."""
    found = [m for m in (session.continuations(context, depth, MAX_MATCH, MIN_MATCH) if session else None,
                         store.continuations(context, depth, MAX_MATCH, MIN_MATCH, max_occurrences=MAX_PATHS)
                         if store is not None and len(store) else None) if m is not None and m.continuations]
    return max(found, key=lambda m: m.length, default=Match(0, 0, (), "none"))


def most_frequent_chain(match: Match, k: int) -> list[int]:
    """Token by token, the most frequent next token among the continuations that follow the
    chain so far (ties: the continuation counted first)."""
    chain: list[int] = []
    paths = list(match.continuations)
    for depth in range(k):
        votes: Counter[int] = Counter()
        for path, count in paths:
            if len(path) > depth:
                votes[path[depth]] += count
        if not votes:
            break
        token = votes.most_common(1)[0][0]
        chain.append(token)
        paths = [(p, c) for p, c in paths if len(p) > depth and p[depth] == token]
    return chain


def describe(match: Match, context: Sequence[int], proposed: int) -> str:
    """Where the drafts came from, in words (the drafts panel and the narrative)."""
    if not match.length:
        return "no suffix of the context occurs in the datastore or this session's earlier texts: no proposal"
    where = "the datastore" if match.source == "datastore" else "this session's earlier texts"
    first = len(context) - match.length
    return (f"the last {match.length} token(s) (positions {first}..{len(context) - 1}) occur {match.occurrences} "
            f"time(s) in {where} (first at {match.source} position {match.example}); "
            f"{len(match.continuations)} distinct continuation(s), proposing {proposed} token(s)")


def context_match(match: Match, context: Sequence[int]) -> ContextMatch | None:
    """The matched suffix as the trace records it (None: no match)."""
    if not match.length:
        return None
    return ContextMatch(len(context) - match.length, tuple(context[-match.length:]), match.source, match.example,
                        match.occurrences, match.before, match.after)


def node_paths(tree: trees.TokenTree) -> list[tuple[int, ...]]:
    """Each node's tokens from the root's child down to it (the root's own: empty)."""
    paths: list[tuple[int, ...]] = [()]
    for i in range(1, len(tree.tokens)):
        paths.append((*paths[tree.parents[i]], tree.tokens[i]))
    return paths


def sources_of(merged: trees.TokenTree, head: trees.TokenTree, found: trees.TokenTree,
               copier: str = "retrieval") -> list[str]:
    """Who proposed each node of a merged tree: "feature head", the copier, or both ("both" for
    retrieval, as run files have always said; "feature head + prompt lookup" for lookup)."""
    from_head, copied = set(node_paths(head)), set(node_paths(found))
    both = "both" if copier == "retrieval" else f"feature head + {copier}"
    names = {(True, False): "feature head", (False, True): copier, (True, True): both}
    return [names[path in from_head, path in copied] for path in node_paths(merged)[1:]]


def confidence(match: Match) -> float:
    """How far a match's shares can be trusted beside a model's probabilities: a longer matched
    suffix predicts better (L / (L + 3): 0.4 for 2 tokens, 0.73 for 8)."""
    return match.length / (match.length + 3)


def paths_of(match: Match) -> list[tuple[int, ...]]:
    """Each continuation repeated by its count, most frequent first (what `from_paths` counts)."""
    return [path for path, count in match.continuations for _ in range(count)]


class RetrievalProposer(Proposer):
    name = "retrieval"

    def __init__(self, store: SuffixStore | None, vocab_size: int, device: torch.device) -> None:
        self.store, self.vocab_size, self.device = store, vocab_size, device

    def propose(self, committed: list[int], k: int, distribution: Distribution, greedy: bool,
                generator: torch.Generator, min_confidence: float = 0.0) -> Drafts:
        match = best_match(self.store, self.session_texts, committed, k)
        tokens = most_frequent_chain(match, k)
        probs = [torch.zeros(self.vocab_size, device=self.device).index_fill_(0, torch.tensor([t]), 1.0)
                 for t in tokens]  # deterministic: q one-hot on d_i
        return Drafts(tokens, probs, [], describe(match, committed, len(tokens)), context_match(match, committed))

    def propose_tree(self, committed: list[int], shape: trees.TreeShape) -> TreeDrafts:
        match = best_match(self.store, self.session_texts, committed, shape.depth)
        tree = trees.from_paths(committed[-1], paths_of(match), shape, self.vocab_size, self.device)
        return TreeDrafts(tree, [], describe(match, committed, tree.num_nodes), matched=context_match(match, committed))

    @classmethod
    def from_pair(cls, pair: Any, config: Any, max_context: int, vocab_size: int) -> RetrievalProposer:
        """Built by `make_proposer`: the pair's datastore (none: only the session's texts)."""
        from ..runtime import model_device

        return cls(getattr(pair, "retrieval_store", None), vocab_size, model_device(pair.target))


class RetrievalFeatureProposer(FeatureProposer):
    """The feature head's tree with retrieval's branches merged in: one verify pass, both sources.

    Scores are made comparable as probabilities of a path: the head's cumulative q, retrieval's
    cumulative share of the occurrences times its match's `confidence`. A node both propose keeps the
    larger score; the budget goes to the best nodes of the union (`tree.select`). With width 1 (a
    chain) the source is chosen *before* anything is sampled -- retrieval if its most frequent first
    token's share beats the head's top probability for d_1 -- so the reported q stays the one d_i came from."""

    name = "feature+retrieval"

    def __init__(self, head: Any, target: Any, config: Any, max_context: int, store: SuffixStore | None,
                 vocab_size: int) -> None:
        super().__init__(head, target, config, max_context)
        self.retrieval = RetrievalProposer(store, vocab_size, next(target.parameters()).device)

    def propose(self, committed: list[int], k: int, distribution: Distribution, greedy: bool,
                generator: torch.Generator, min_confidence: float = 0.0) -> Drafts:
        self.retrieval.session_texts = self.session_texts
        match = best_match(self.retrieval.store, self.session_texts, committed, k)
        share = match.continuations[0][1] / sum(c for _, c in match.continuations) if match.length else 0.0
        share *= confidence(match) if match.length else 0.0
        if len(committed) >= 2 and share > 0:
            predicted, m = self._catch_up(committed)
            head_top = float(torch.softmax(self.head.full_logits(predicted)[0].float(), dim=-1).max())
            self._rewind(committed, m)
            if share > head_top:  # retrieval's chain, chosen before any draw
                got = self.retrieval.propose(committed, k, distribution, greedy, generator)
                return Drafts(got.tokens, got.probs, [], f"retrieval ({share:.2f} > head {head_top:.2f}): {got.note}",
                              got.matched, ["retrieval"] * len(got.tokens))
        got = super().propose(committed, k, distribution, greedy, generator, min_confidence)
        return Drafts(got.tokens, got.probs, got.catch_up_positions, f"feature head: {got.note}",
                      sources=["feature head"] * len(got.tokens))

    def _rewind(self, committed: list[int], m: int) -> None:
        """Undo a catch-up made only to read the head's d_1 distribution (the chain re-feeds it)."""
        if self.cache.get_seq_length() > m:
            self.cache.truncate(m, "draft")
        self.num_real = m

    def propose_tree(self, committed: list[int], shape: trees.TreeShape) -> TreeDrafts:
        grown = super().propose_tree(committed, shape)
        self.retrieval.session_texts = self.session_texts
        match = best_match(self.retrieval.store, self.session_texts, committed, shape.depth)
        if not match.length:
            grown.sources = ["feature head"] * grown.tree.num_nodes
            return grown
        found = trees.from_paths(committed[-1], paths_of(match), shape, self.retrieval.vocab_size,
                                 self.retrieval.device)
        found.scores = [s + math.log(confidence(match)) if i else 0.0 for i, s in enumerate(found.scores)]
        tree = merge(grown.tree, found, shape.nodes)
        note = f"{grown.note}; merged with retrieval: {describe(match, committed, tree.num_nodes)}"
        return TreeDrafts(tree, grown.catch_up_positions, note, grown.fed, context_match(match, committed),
                          sources_of(tree, grown.tree, found))

    @classmethod
    def from_pair(cls, pair: Any, config: Any, max_context: int, vocab_size: int) -> RetrievalFeatureProposer:
        return cls(pair.feature_head, pair.target, config, max_context, getattr(pair, "retrieval_store", None),
                   vocab_size)


def merge(a: trees.TokenTree, b: trees.TokenTree, budget: int) -> trees.TokenTree:
    """The union of two trees over the same root, deduplicated by path, each node scored by the
    larger of its two cumulative log-probabilities, cut to the best `budget` nodes."""
    pool: list[trees.Candidate] = []
    index: dict[tuple[int, int], int] = {}  # (parent candidate, token) -> candidate
    rows: list[torch.Tensor] = []
    for tree in (a, b):
        mapped = {0: -1}
        for i in range(1, len(tree.tokens)):
            key = (mapped[tree.parents[i]], tree.tokens[i])
            score = tree.scores[i]
            if key in index:
                pool[index[key]].score = max(pool[index[key]].score, score)
            else:
                index[key] = len(pool)
                row = -1
                if tree.draft_probs is not None:
                    rows.append(tree.draft_probs[i])
                    row = len(rows) - 1
                pool.append(trees.Candidate(tree.tokens[i], key[0], tree.depths[i], score, math.exp(score), row))
            mapped[i] = index[key]
    vocab = max((len(r) for r in rows), default=0)
    dists = [torch.nn.functional.pad(r, (0, vocab - len(r))) for r in rows]
    for cand in pool:  # a child never outscores its parent (select keeps ancestors first)
        if cand.parent >= 0:
            cand.score = min(cand.score, pool[cand.parent].score)
    return trees.select(a.tokens[0], pool, budget, dists or None)


