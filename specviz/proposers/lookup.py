"""Prompt-lookup drafting: no weights, no cache -- guess that the text repeats itself (docs/design.md §1b).

When a model rewrites, quotes, continues a list or edits code, the next tokens often appear earlier
in the context. Prompt lookup (HF `prompt_lookup_num_tokens`, vLLM's `NgramProposer`) finds the most
recent earlier occurrence of the last n committed tokens (longest n first) and proposes the tokens
that followed it. The proposal is deterministic, so each q_i is one-hot and the test is
u <= p_i(d_i); no match means a plain target step. A token tree (§1c) is a trie of several such
continuations (`find_continuations`), whose first chain is the one lookup proposes.
"""

from __future__ import annotations

import torch

from .. import tree as trees
from .base import Distribution, Drafts, Proposer, TreeDrafts


def find_continuation(tokens: list[int], k: int, max_ngram: int, min_ngram: int) -> tuple[list[int], int, int]:
    """(up to k tokens that followed, n, start): the most recent earlier occurrence, at `start`,
    of the longest suffix n-gram (max_ngram >= n >= min_ngram) of `tokens`; ([], 0, -1) if none."""
    found = find_continuations(tokens, k, max_ngram, min_ngram, max_paths=1)
    return found[0] if found else ([], 0, -1)


def find_continuations(tokens: list[int], depth: int, max_ngram: int, min_ngram: int,
                       max_paths: int) -> list[tuple[list[int], int, int]]:
    """Up to `max_paths` (continuation, n, start) triples, as `find_continuation` finds one: the
    up to `depth` tokens that followed an earlier occurrence, at `start`, of the suffix n-gram --
    longest n first, newest occurrence first, each continuation start counted once."""
    out: list[tuple[list[int], int, int]] = []
    seen: set[int] = set()
    for n in range(min(max_ngram, len(tokens) - 1), min_ngram - 1, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):  # newest first; the suffix itself is no match
            follow = start + n
            if follow not in seen and tokens[start:follow] == suffix:
                seen.add(follow)
                out.append((tokens[follow : follow + depth], n, start))
                if len(out) == max_paths:
                    return out
    return out


class LookupProposer(Proposer):
    name = "lookup"

    def __init__(self, vocab_size: int, device: torch.device, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.vocab_size, self.device = vocab_size, device
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def match(self, committed: list[int], k: int) -> tuple[int, int]:
        tokens, n, _ = find_continuation(committed, k, self.max_ngram, self.min_ngram)
        return n, len(tokens)

    def propose(self, committed: list[int], k: int, distribution: Distribution, greedy: bool,
                generator: torch.Generator, min_confidence: float = 0.0) -> Drafts:
        tokens, n, start = find_continuation(committed, k, self.max_ngram, self.min_ngram)
        probs = [torch.zeros(self.vocab_size, device=self.device) for _ in tokens]
        for q, token in zip(probs, tokens):
            q[token] = 1.0  # deterministic proposal: q is one-hot
        if tokens:
            end = len(committed) - 1
            note = (f"the last {n} token(s) (positions {end - n + 1}..{end}) also occur at positions "
                    f"{start}..{start + n - 1}; proposing the {len(tokens)} token(s) that followed there "
                    f"(positions {start + n}..{start + n + len(tokens) - 1})")
        else:
            note = self._no_match()
        return Drafts(tokens, probs, [], note)

    def propose_tree(self, committed: list[int], shape: trees.TreeShape) -> TreeDrafts:
        found = find_continuations(committed, shape.depth, self.max_ngram, self.min_ngram, shape.nodes)
        tree = trees.from_paths(committed[-1], [c for c, _, _ in found], shape, self.vocab_size, self.device)
        if found:
            note = (f"a trie of the continuations of {len(found)} earlier occurrence(s) of the last "
                    f"{found[0][1]}..{found[-1][1]} token(s), newest first: {tree.num_nodes} node(s), "
                    f"depth {tree.depth}")
        else:
            note = self._no_match()
        return TreeDrafts(tree, [], note)

    def _no_match(self) -> str:
        return (f"no earlier occurrence of the last {self.min_ngram}..{self.max_ngram} token(s): "
                "no proposal, this cycle is one plain target step")

    @classmethod
    def from_pair(cls, pair: object, config: object, max_context: int, vocab_size: int) -> LookupProposer:
        """Built by `make_proposer` (the proposer table): no weights, only the pair's vocabulary and device."""
        from ..runtime import model_device

        return cls(vocab_size, model_device(pair.target), config.lookup_max_ngram, config.lookup_min_ngram)
