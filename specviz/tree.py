"""Token trees: several guesses per position, verified in one target pass (docs/design.md §1c).

A *token tree* keeps the few best guesses per depth: its root is the newest committed token x_n,
every other node a draft whose parent is the token before it, each root-to-node path a candidate
continuation (SpecInfer, Medusa, EAGLE-2). This module is the tree as plain data and its pure
functions (no model, no cache):

* `TokenTree`, the node arrays, depth-first with each node's children by score, so the most likely
  chain is nodes 1, 2, .., D (already in place in the cache when the target accepts it);
* `grow` / `select` / `from_paths`: EAGLE-2's dynamic tree, and a trie of copied continuations;
* `attention_mask` / `verify_mask` / `TokenTree.position_ids`: node i in cache slot L+i at
  position L + depth(i), attending to the prefix, its ancestors and itself -- an *additive* float
  mask, since eager attention adds it to the scores;
* `compaction_moves`: after the path a_1 < .. < a_j is accepted, slot L+a_i is copied to L+i.

The exact rules that walk a tree are in `specviz.rules`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class TreeShape:
    """What a proposer may grow: `width` children per expanded node, `depth` levels, `nodes` drafts."""

    width: int
    depth: int
    nodes: int

    def __post_init__(self) -> None:
        if min(self.width, self.depth, self.nodes) < 1:
            raise ValueError(f"a tree needs width, depth and nodes >= 1, got {self}")


@dataclass
class TokenTree:
    """Node 0 is the root (the newest committed token), nodes 1..N the drafts, depth-first."""

    tokens: list[int]
    parents: list[int]  # parents[0] = -1; parents[i] < i
    depths: list[int]  # depths[0] = 0; depths[i] = depths[parents[i]] + 1
    scores: list[float] = field(default_factory=list)  # cumulative log q (root 0.0); ranks siblings
    draft_probs: torch.Tensor | None = None  # [N+1, V]: row i = the distribution node i was picked from

    def __post_init__(self) -> None:
        if not self.scores:
            self.scores = [0.0] * len(self.tokens)
        self.validate()

    def validate(self) -> None:
        """ValueError unless the arrays form a tree rooted at node 0 with parents before children."""
        n = len(self.tokens)
        if n < 1 or not (len(self.parents) == len(self.depths) == len(self.scores) == n):
            raise ValueError("a token tree needs a root and arrays of one length (tokens, parents, depths, scores)")
        if self.parents[0] != -1 or self.depths[0] != 0:
            raise ValueError("node 0 must be the root: parent -1, depth 0")
        for i in range(1, n):
            parent = self.parents[i]
            if not 0 <= parent < i:
                raise ValueError(f"node {i}'s parent {parent} must be an earlier node (0..{i - 1})")
            if self.depths[i] != self.depths[parent] + 1:
                raise ValueError(f"node {i} has depth {self.depths[i]}, its parent {parent} depth "
                                 f"{self.depths[parent]}")
        if self.draft_probs is not None and self.draft_probs.shape[0] != n:
            raise ValueError(f"draft_probs has {self.draft_probs.shape[0]} rows for {n} nodes")

    @classmethod
    def chain(cls, root: int, tokens: Sequence[int]) -> TokenTree:
        """A chain as a tree: node i is the i-th draft, each the child of the one before."""
        return cls([root, *tokens], list(range(-1, len(tokens))), list(range(len(tokens) + 1)))

    @property
    def num_nodes(self) -> int:
        """Draft nodes (the root excluded)."""
        return len(self.tokens) - 1

    @property
    def depth(self) -> int:
        return max(self.depths)

    def children(self, node: int) -> list[int]:
        return [i for i in range(node + 1, len(self.tokens)) if self.parents[i] == node]

    def position_ids(self, root_position: int) -> list[int]:
        """RoPE position of every node: the root's plus its depth (siblings share a position)."""
        return [root_position + d for d in self.depths]

    def leaves(self) -> list[int]:
        has_child = set(self.parents)
        return [i for i in range(len(self.tokens)) if i not in has_child]


# ---------------------------------------------------------------- the mask


def attention_mask(parents: Sequence[int], prefix_len: int, keys: Sequence[int], queries: Sequence[int],
                   dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """Additive float mask [1, 1, len(queries), prefix_len + len(keys)] for a tree forward.

    The key axis is the cached prefix (every query sees all of it) followed by the tree nodes
    `keys` in cache order (the queries are the newest of them); query q may see key k iff k is
    q or one of its ancestors (`parents`, with a negative parent ending the walk). 0 = allowed,
    the dtype's minimum = masked: eager attention adds it to the scores, sdpa accepts it too."""
    if not dtype.is_floating_point:
        raise TypeError("a tree mask must be an additive float mask: eager attention adds it to the scores")
    # The tree part as plain lists, turned into a tensor once (one element-wise tensor write per
    # ancestor cost more than the rest of the mask).
    column = {k: j for j, k in enumerate(keys)}
    rows = []
    for q in queries:
        row = [False] * len(keys)
        node = q
        while node >= 0:  # q, then its ancestors up to the root
            j = column.get(node)
            if j is not None:
                row[j] = True
            node = parents[node]
        rows.append(row)
    mask = torch.zeros(len(queries), prefix_len + len(keys), dtype=dtype)  # the prefix: all allowed
    if rows and keys:
        mask[:, prefix_len:].masked_fill_(~torch.tensor(rows, dtype=torch.bool), torch.finfo(dtype).min)
    return mask[None, None].to(device)  # [1, 1, Q, prefix + keys]


def verify_mask(tree: TokenTree, prefix_len: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """The target's verify mask: all N+1 nodes (root included) over the prefix and the tree."""
    nodes = list(range(len(tree.tokens)))
    return attention_mask(tree.parents, prefix_len, nodes, nodes, dtype, device)


# ---------------------------------------------------------------- growth


@dataclass
class Candidate:
    """A node considered while growing: `parent` is a candidate index (-1 = the root)."""

    token: int
    parent: int
    depth: int
    score: float  # cumulative log-probability of the path root..this node
    prob: float  # the proposer's probability of `token` given the parent
    dist: int = -1  # row of the distribution it was picked from (in the grower's list), -1: none


def top_children_rows(probs: torch.Tensor, width: int, candidates: torch.Tensor | None = None
                      ) -> list[list[tuple[int, float, float]]]:
    """(token, log-probability, probability) of the `width` most likely tokens of every row of
    `probs` [F, V], impossible ones dropped, in one top-k. `candidates` (ascending token
    ids) are the only tokens the proposer can propose -- a trimmed vocabulary, q = 0 elsewhere --
    so the top-k runs over q[:, candidates] (8,192 columns instead of 49,152 for the default
    feature head) and maps the winners back to vocabulary ids: the same children, the same
    probabilities (the values are q's own entries). None: the whole vocabulary."""
    pool = probs if candidates is None else probs[:, candidates]
    values, ids = torch.topk(pool, min(width, pool.shape[-1]), dim=-1)
    if candidates is not None:
        ids = candidates[ids]
    return [[(int(t), math.log(v), v) for t, v in zip(row_ids, row_values) if v > 0]
            for row_ids, row_values in zip(ids.tolist(), values.tolist())]


def grow(root_token: int, root_logits: torch.Tensor, expand: Callable[[list[int], list[Candidate]], torch.Tensor],
         shape: TreeShape, max_fed: int | None = None, candidates: torch.Tensor | None = None
         ) -> tuple[TokenTree, list[int]]:
    """EAGLE-2's dynamic tree. `root_logits` [V] score the root's children; `expand(frontier,
    pool)` feeds the candidates `frontier` (indices into `pool`) to the proposer in one forward
    and returns the logits [len(frontier), V] of their children. At most `max_fed` candidates are
    fed in all (the proposer's cache room). `candidates` (ascending token ids, or None: all) are
    the only tokens the proposer can propose (q = 0 elsewhere, e.g. a feature head's trimmed
    vocabulary): the top-`width` search looks at those columns only. Each frontier's logits get one
    softmax and one top-k, not one per row (the same values: softmax and top-k work row by row).
    Returns the tree and the fed candidates' tokens in feeding order (what the proposer's cache
    holds past the prefix). The tree's `draft_probs` rows are the full-vocabulary softmaxes the
    children were picked from."""
    dists = [torch.softmax(root_logits.float(), dim=-1)]
    pool: list[Candidate] = []
    for token, logp, prob in top_children_rows(dists[0][None], shape.width, candidates)[0]:
        pool.append(Candidate(token, -1, 1, logp, prob, 0))
    frontier = list(range(len(pool)))
    fed: list[int] = []
    for depth in range(2, shape.depth + 1):
        if not frontier or (max_fed is not None and len(fed) + len(frontier) > max_fed):
            break
        logits = expand(frontier, pool)  # [F, V]: one proposer forward over the frontier
        fed.extend(frontier)
        rows = torch.softmax(logits.float(), dim=-1)  # [F, V]
        newest = []
        for parent, row, children in zip(frontier, rows, top_children_rows(rows, shape.width, candidates)):
            dists.append(row)
            for token, logp, prob in children:
                newest.append(len(pool))
                pool.append(Candidate(token, parent, depth, pool[parent].score + logp, prob, len(dists) - 1))
        frontier = sorted(newest, key=lambda c: -pool[c].score)[: shape.width]
    return select(root_token, pool, shape.nodes, dists), [pool[c].token for c in fed]


def select(root_token: int, pool: Sequence[Candidate], budget: int,
           dists: Sequence[torch.Tensor] | None = None) -> TokenTree:
    """The best `budget` candidates, every kept node's ancestors with it, ordered depth-first
    with each node's children by score (so the most likely chain is nodes 1, 2, ..)."""
    ranked = sorted((c for c in range(len(pool)) if pool[c].score > float("-inf")),
                    key=lambda c: (-pool[c].score, pool[c].depth, c))
    kept: set[int] = set()
    for c in ranked:  # a parent ranks before its children (ties: by depth), so it is kept first
        if len(kept) == budget:
            break
        if pool[c].parent < 0 or pool[c].parent in kept:
            kept.add(c)
    children: dict[int, list[int]] = {}
    for c in sorted(kept, key=lambda c: (-pool[c].score, c)):
        children.setdefault(pool[c].parent, []).append(c)
    tokens, parents, depths, scores, rows = [root_token], [-1], [0], [0.0], [-1]
    stack = [(c, 0) for c in reversed(children.get(-1, []))]
    while stack:  # depth-first, best child first
        c, parent = stack.pop()
        node = len(tokens)
        tokens.append(pool[c].token)
        parents.append(parent)
        depths.append(pool[c].depth)
        scores.append(pool[c].score)
        rows.append(pool[c].dist)
        stack.extend((child, node) for child in reversed(children.get(c, [])))
    probs = None
    if dists:
        probs = torch.stack([torch.zeros_like(dists[0]) if r < 0 else dists[r] for r in rows])  # [N+1, V]
    return TokenTree(tokens, parents, depths, scores, probs)


def from_paths(root_token: int, paths: Sequence[Sequence[int]], shape: TreeShape, vocab_size: int,
               device: torch.device | str = "cpu") -> TokenTree:
    """A trie of token sequences (the most important first), cut to `shape`: each node's score
    is the log of the share of paths through it; a node keeps its `width` most shared children
    (ties: the earlier path first). Prompt lookup builds its tree this way."""
    pool: list[Candidate] = []
    first_seen: list[int] = []
    counts: list[int] = []
    index: dict[tuple[int, int], int] = {}  # (parent, token) -> candidate
    for order, path in enumerate(paths):
        parent = -1
        for depth, token in enumerate(path[: shape.depth], start=1):
            key = (parent, int(token))
            if key not in index:
                index[key] = len(pool)
                pool.append(Candidate(int(token), parent, depth, 0.0, 0.0))
                first_seen.append(order)
                counts.append(0)
            counts[index[key]] += 1
            parent = index[key]
    # Keep each node's `width` most shared children (ties: most important path first).
    by_parent: dict[int, list[int]] = {}
    for c, cand in enumerate(pool):
        by_parent.setdefault(cand.parent, []).append(c)
    alive = [False] * len(pool)
    dists: list[torch.Tensor] = []
    stack = [-1]
    while stack:
        parent = stack.pop()
        kids = sorted(by_parent.get(parent, []), key=lambda c: (-counts[c], first_seen[c]))[: shape.width]
        if not kids:
            continue
        total = sum(counts[c] for c in kids)
        dist = torch.zeros(vocab_size, device=device)  # the shares as a distribution over the vocabulary
        for c in kids:
            alive[c] = True
            pool[c].prob = counts[c] / total
            dist[pool[c].token] = pool[c].prob
            pool[c].score = (0.0 if parent < 0 else pool[parent].score) + math.log(pool[c].prob)
            pool[c].dist = len(dists)
            stack.append(c)
        dists.append(dist)
    for c in range(len(pool)):
        if not alive[c]:
            pool[c].score = float("-inf")
    # Equal shares rank by candidate index, i.e. the order the paths came in: the more important first.
    return select(root_token, pool, shape.nodes, dists)


# ---------------------------------------------------------------- the KV update


def compaction_moves(path: Sequence[int], keep: int) -> list[tuple[int, int]]:
    """(from, to) offsets past the root's slot that bring the first `keep` accepted nodes of
    `path` into place: node a_i goes to offset i, in increasing i. Empty when already in place."""
    return [(a, i) for i, a in enumerate(path[:keep], start=1) if a != i]
