"""What proposes the K draft tokens: one interface, several proposers (docs/design.md §1b).

The verify pass, the acceptance test, the residual or bonus token and the target's rollback never
change; *who guesses* d_1..d_K, and from which q_i, is a `Proposer` (as in vLLM v1). Exactness only
asks that each d_i was sampled from the q_i it reports. In one cycle a proposer catches up and
drafts (`propose`, or `propose_tree` for a token tree, §1c), may observe the target's features from
the verify pass (`observe_verify`), and restores its own invariant once the engine has committed
(`rollback`). The shared pieces live here: the drafting loop of the model-based proposers
(`draft_tokens`, with adaptive K) and the feeding of a tree's frontier into a proposer's own cache
under the tree mask (`TreeFeeder`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from .. import tree as trees
from ..kv import SpecvizCache
from ..trace import CacheEvent, CacheSnapshot, ContextMatch

# logits [V] -> the processed sampling distribution over the pair's vocabulary [V]
Distribution = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Drafts:
    """One cycle's proposals: d_1..d_k, the q_i they were drawn from, what catch-up fed."""

    tokens: list[int]
    probs: list[torch.Tensor]  # q_i [V], i = 1..k
    catch_up_positions: list[int]  # sequence positions of the committed tokens fed to catch up
    note: str = ""  # what the proposer did, in words (e.g. which n-gram lookup matched)
    matched: ContextMatch | None = None  # retrieval: the context suffix the drafts followed
    sources: list[str] | None = None  # a merged proposer: who proposed each draft


@dataclass
class TreeDrafts:
    """One cycle's token tree (root = the newest committed token), what catch-up fed, and the
    tokens fed past the committed prefix while growing it (in feeding order: the proposer's cache)."""

    tree: trees.TokenTree
    catch_up_positions: list[int]
    note: str = ""
    fed: list[int] = field(default_factory=list)
    matched: ContextMatch | None = None  # as in `Drafts`
    sources: list[str] | None = None  # per node 1..N


class Proposer:
    """Base class. Subclasses set `name` (their row in the proposer table, `registry.py`, which holds
    everything else said about them), implement `from_pair` and `propose` (and, when they keep
    state, `start`, `rollback`, `check_invariant`, `save`/`restore`)."""

    name: ClassVar[str] = ""
    wants_target_features: ClassVar[bool] = False
    cache: SpecvizCache | None = None
    session_texts: Any = None  # the texts this session produced before (a SessionStore, set by the engine)

    @classmethod
    def from_pair(cls, pair: Any, config: Any, max_context: int, vocab_size: int) -> Proposer:
        """The proposer for `pair` (`make_proposer` has checked that the pair has what it needs)."""
        raise NotImplementedError

    def start(self, prompt_ids: list[int], prefill_features: torch.Tensor | None) -> None:
        """Prepare for a new sequence whose prompt is `prompt_ids` (the target's prefill gave
        `prefill_features` [n-1, H] when `wants_target_features`)."""

    def match(self, committed: list[int], k: int) -> tuple[int, int] | None:
        """A keyed proposer (one that copies what followed an earlier occurrence of the context's
        last tokens): (how many tokens its next proposal's match spans, 0 = none; how many drafts of
        up to k it would propose), without proposing. None: this proposer is not keyed."""
        return None

    def propose(self, committed: list[int], k: int, distribution: Distribution, greedy: bool,
                generator: torch.Generator, min_confidence: float = 0.0) -> Drafts:
        """Up to k drafts; with min_confidence > 0, stop before a draft whose distribution's top
        probability is below it (adaptive K; at least one draft is always proposed)."""
        raise NotImplementedError

    def propose_tree(self, committed: list[int], shape: trees.TreeShape) -> TreeDrafts:
        """A token tree of at most `shape.nodes` drafts, depth `shape.depth`, `shape.width`
        children per expanded node (docs/design.md §1c)."""
        raise NotImplementedError

    def observe_verify(self, features: torch.Tensor | None) -> None:
        """The target's features [k+1, H] for the verify inputs [x_n, d_1..d_k] (after a tree
        verify: for the root and the accepted path only, in order)."""

    def rollback(self, committed: list[int]) -> None:
        """The cycle has committed its tokens (`committed` is the new sequence); restore the invariant."""

    def check_invariant(self, committed: list[int]) -> float | None:
        """Max |difference| of the proposer's cache against a fresh recomputation (None: no cache)."""
        return None

    def snapshot(self, num_committed: int) -> CacheSnapshot | None:
        return None if self.cache is None else self.cache.snapshot(num_committed)

    def drain_events(self) -> list[CacheEvent]:
        return [] if self.cache is None else self.cache.drain_events()

    def save(self) -> Any:
        """Small state to restore if a cycle fails half-way."""
        return None if self.cache is None else self.cache.get_seq_length()

    def restore(self, saved: Any) -> None:
        if self.cache is not None and self.cache.get_seq_length() > saved:
            self.cache.truncate(saved, "rollback")
        self.drain_events()

    def fork(self) -> Proposer:
        """An independent copy at the current state (caches copied, models shared)."""
        twin = copy.copy(self)
        if self.cache is not None:
            twin.cache = copy.deepcopy(self.cache)
        return twin


def confident_enough(logits: torch.Tensor, index: int, min_confidence: float) -> bool:
    """Adaptive K (docs/design.md §1): draft d_index (1-based) unless the proposer's own *unprocessed*
    softmax (so it works at T=0 too) gives its top token less than min_confidence."""
    if index == 1 or min_confidence <= 0:
        return True
    return float(torch.softmax(logits.float(), dim=-1).max()) >= min_confidence


def draft_tokens(first_logits: torch.Tensor, k: int, next_logits: Callable[[int], torch.Tensor],
                 distribution: Distribution, greedy: bool, generator: torch.Generator,
                 min_confidence: float) -> tuple[list[int], list[torch.Tensor]]:
    """The drafting loop every model-based proposer shares: sample d_i from q_i, then feed d_i
    (`next_logits`) for q_{i+1}; d_k is sampled but never fed. Adaptive K may stop it early."""
    tokens: list[int] = []
    probs: list[torch.Tensor] = []  # q_i [V]
    logits = first_logits
    for i in range(k):
        q = distribution(logits)
        if not confident_enough(logits, i + 1, min_confidence):
            break
        token = sample_from(q, greedy, generator)
        tokens.append(token)
        probs.append(q)
        if i < k - 1:
            logits = next_logits(token)
    return tokens, probs


class TreeFeeder:
    """`expand` for `specviz.tree.grow`: feeds a frontier of candidates into a proposer's cache
    past its committed prefix, each at position (prefix - 1) + depth, under the tree mask (the
    prefix, its fed ancestors, itself), and remembers the fed candidates in cache order."""

    def __init__(self, prefix_len: int, dtype: torch.dtype, device: torch.device,
                 run: Callable[[list[int], list[trees.Candidate], torch.Tensor, list[int]], torch.Tensor]) -> None:
        # run(frontier, pool, mask, positions) -> logits [F, V] of the frontier's children
        self.prefix_len, self.dtype, self.device, self.run = prefix_len, dtype, device, run
        self.fed: list[int] = []
        self.calls = 0  # forwards made (one per depth grown past the first)

    def __call__(self, frontier: list[int], pool: list[trees.Candidate]) -> torch.Tensor:
        parents = [c.parent for c in pool]
        mask = trees.attention_mask(parents, self.prefix_len, self.fed + frontier, frontier, self.dtype, self.device)
        logits = self.run(frontier, pool, mask, [self.prefix_len - 1 + pool[c].depth for c in frontier])
        self.fed.extend(frontier)
        self.calls += 1
        return logits


def tree_note(tree: trees.TokenTree, shape: trees.TreeShape, forwards: int) -> str:
    return (f"grew a tree of {tree.num_nodes} node(s), depth {tree.depth if tree.num_nodes else 0} "
            f"(width {shape.width}, budget {shape.nodes}) with {forwards} forward(s) over its frontier")


def sample_from(probs: torch.Tensor, greedy: bool, generator: torch.Generator) -> int:
    """Draw the draft token from the distribution it will be scored with."""
    from .. import sampling

    return sampling.greedy_token(probs) if greedy else sampling.sample(probs, generator)
