"""Token trees as data and rules (specviz/tree.py), and the caches' move (the compaction), without a model.

The node arrays are checked, the additive mask lets a node see exactly the prefix, its ancestors
and itself, the EAGLE-2 growth keeps its budget with every ancestor (ties included) and orders the
best chain first, the walks follow the greedy and the deterministic-siblings rules (duplicates
skipped), the deterministic-siblings rule draws exactly from p while a wrong rule (the residual
replaced by p) fails the same chi-square test, and `SpecvizCache.move` copies K/V correctly in both
layouts -- overlapping moves, moves across blocks -- or refuses with nothing changed.
"""

from __future__ import annotations

import collections

import pytest
import torch
from cuda_checks import chi_square
from engine_helpers import path_to
from hypothesis import given, settings
from hypothesis import strategies as st

from specviz import rules, sampling
from specviz import tree as trees
from specviz.kv import ContiguousKVCache, PagedKVCache
from specviz.tree import Candidate, TokenTree, TreeShape

#        0 (root, token 9)
#       / \
#      1   4          tokens 5, 6
#     / \    \
#    2   3    5       tokens 7, 8 | 7
SMALL = TokenTree([9, 5, 7, 8, 6, 7], [-1, 0, 1, 1, 0, 4], [0, 1, 2, 2, 1, 2])


# --------------------------------------------------------------------------- the node arrays


@pytest.mark.parametrize(("parents", "depths"), [
    ([0, 0], [0, 1]),  # the root has a parent
    ([-1, 1], [0, 1]),  # a node is its own parent
    ([-1, 2, 0], [0, 2, 1]),  # a parent after its child
    ([-1, 0, 1], [0, 1, 1]),  # a depth that is not the parent's plus one
])
def test_bad_node_arrays_are_refused(parents, depths):
    with pytest.raises(ValueError):
        TokenTree([1] * len(parents), parents, depths)


def test_tree_helpers():
    assert SMALL.num_nodes == 5 and SMALL.depth == 2
    assert SMALL.children(0) == [1, 4] and SMALL.children(1) == [2, 3]
    assert path_to(SMALL, 3) == [1, 3] and path_to(SMALL, 0) == []
    assert SMALL.position_ids(10) == [10, 11, 12, 12, 11, 12]  # siblings share a position
    assert SMALL.leaves() == [2, 3, 5]
    chain = TokenTree.chain(4, [5, 6, 7])
    assert chain.parents == [-1, 0, 1, 2] and chain.depths == [0, 1, 2, 3]


# --------------------------------------------------------------------------- the mask


def test_verify_mask_sees_prefix_ancestors_and_self():
    mask = trees.verify_mask(SMALL, 3, torch.float32, "cpu")
    assert mask.shape == (1, 1, 6, 9) and mask.dtype == torch.float32
    allowed = (mask[0, 0] == 0).int()
    expected = torch.tensor([
        [1, 1, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 1, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 1, 0],
        [1, 1, 1, 1, 0, 0, 0, 1, 1],
    ])
    assert torch.equal(allowed, expected)
    assert float(mask.min()) == torch.finfo(torch.float32).min  # additive: the dtype's minimum, not -inf


def test_a_boolean_mask_is_refused():
    with pytest.raises(TypeError, match="additive float"):
        trees.attention_mask([-1, 0], 2, [0, 1], [0, 1], dtype=torch.bool)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=12), st.integers(0, 4))
def test_every_mask_row_is_the_node_and_its_ancestors(choices, prefix):
    parents = [-1] + [c % (i + 1) for i, c in enumerate(choices)]  # any tree with parents first
    depths = [0]
    for p in parents[1:]:
        depths.append(depths[p] + 1)
    tree = TokenTree([0] * len(parents), parents, depths)
    allowed = trees.verify_mask(tree, prefix, torch.float32, "cpu")[0, 0] == 0
    for i in range(len(parents)):
        seen = {j for j in range(len(parents)) if allowed[i, prefix + j]}
        assert seen == set(path_to(tree, i)) | {0, i}
        assert bool(allowed[i, :prefix].all())


# --------------------------------------------------------------------------- growth


def fake_proposer(vocab: int = 6):
    """expand() for a fake proposer whose logits depend on (token, depth); counts its calls."""
    calls = []

    def logits_for(token: int, depth: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(1000 * depth + token)
        return torch.randn(vocab, generator=g) * 2

    def expand(frontier, pool):
        calls.append([pool[c].token for c in frontier])
        return torch.stack([logits_for(pool[c].token, pool[c].depth) for c in frontier])

    return logits_for, expand, calls


@pytest.mark.parametrize(("width", "depth", "nodes"), [(2, 3, 5), (3, 4, 12), (4, 2, 16), (2, 1, 3), (3, 3, 1)])
def test_growth_keeps_the_budget_ancestors_and_best_chain_first(width, depth, nodes):
    logits_for, expand, calls = fake_proposer()
    tree, fed = trees.grow(9, logits_for(9, 0), expand, TreeShape(width, depth, nodes))
    assert len(calls) == depth - 1  # one proposer forward per depth past the first
    assert all(len(c) <= width for c in calls) and fed == [t for c in calls for t in c]
    assert 1 <= tree.num_nodes <= nodes and tree.depth <= depth
    tree.validate()  # parents before children
    for i in range(1, len(tree.tokens)):
        assert tree.scores[i] <= tree.scores[tree.parents[i]] + 1e-6  # a child never outscores its parent
        siblings = tree.children(tree.parents[i])
        assert len(siblings) <= width
        assert [tree.scores[s] for s in siblings] == sorted((tree.scores[s] for s in siblings), reverse=True)
        assert float(tree.draft_probs[i, tree.tokens[i]]) > 0
    # depth-first, best child first: node 1, 2, .. is the greedy chain of best children
    node = 0
    while tree.children(node):
        assert tree.children(node)[0] == node + 1
        node += 1


def test_growth_stops_where_the_proposer_cache_is_full():
    logits_for, expand, calls = fake_proposer()
    tree, fed = trees.grow(9, logits_for(9, 0), expand, TreeShape(3, 5, 30), max_fed=5)
    assert len(fed) <= 5 and len(calls) == 1 and tree.depth == 2


def test_selection_keeps_ancestors_on_ties():
    """A child of probability 1 ties with its parent: the parent is kept first, never the child alone."""
    pool = [Candidate(5, -1, 1, -0.5, 0.6), Candidate(6, -1, 1, -0.9, 0.4),
            Candidate(7, 0, 2, -0.5, 1.0),  # ties with its parent
            Candidate(8, 2, 3, -0.5, 1.0)]
    tree = trees.select(1, pool, 3)
    assert tree.tokens == [1, 5, 7, 8] and tree.parents == [-1, 0, 1, 2]
    tree = trees.select(1, pool, 1)
    assert tree.tokens == [1, 5]
    tree = trees.select(1, list(reversed(pool[:2])) + [Candidate(7, 1, 2, -0.5, 1.0)], 2)
    assert tree.tokens == [1, 5, 7]  # candidate order does not matter


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.floats(0.01, 1.0)), min_size=1, max_size=14), st.integers(1, 10))
def test_selection_is_closed_under_ancestors(spec, budget):
    pool: list[Candidate] = []
    for i, (pick, prob) in enumerate(spec):
        parent = -1 if i == 0 else pick % (i + 1) - 1  # any earlier candidate, or the root
        base = 0.0 if parent < 0 else pool[parent].score
        depth = 1 if parent < 0 else pool[parent].depth + 1
        pool.append(Candidate(i, parent, depth, base + float(torch.log(torch.tensor(prob))), prob))
    tree = trees.select(-1, pool, budget)
    assert tree.num_nodes == min(budget, len(pool))
    chosen = {tree.tokens[i] for i in range(1, len(tree.tokens))}
    for c in chosen:
        assert pool[c].parent < 0 or pool[c].parent in chosen
    worst_kept = min(pool[c].score for c in chosen)
    dropped = [pool[c].score for c in range(len(pool)) if c not in chosen]
    assert all(s <= worst_kept + 1e-9 for s in dropped)  # the best budget nodes (ancestors outscore)


def test_a_trie_of_paths():
    """Prompt lookup's tree: shares of paths, width per node, newer paths first on ties."""
    paths = [[5, 6, 7], [5, 6, 8], [4, 1], [5, 9]]
    tree = trees.from_paths(0, paths, TreeShape(2, 2, 10), vocab_size=12)
    assert tree.tokens == [0, 5, 6, 9, 4, 1]
    assert tree.parents == [-1, 0, 1, 1, 0, 4]
    assert float(tree.draft_probs[1, 5]) == pytest.approx(0.75)  # 3 of 4 paths start with 5
    assert float(tree.draft_probs[2, 6]) == pytest.approx(2 / 3)
    assert trees.from_paths(0, [], TreeShape(2, 2, 10), vocab_size=12).num_nodes == 0
    one = trees.from_paths(0, paths, TreeShape(1, 3, 10), vocab_size=12)
    assert one.tokens == [0, 5, 6, 7]  # width 1: the most shared, then the most recent path


# --------------------------------------------------------------------------- the walks


def one_hot(token: int, vocab: int = 10) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(token), vocab).float()


def test_greedy_walk():
    # the target wants 6 after the root, then 7 after node 4: the path 4, 5 and the bonus of node 5
    probs = torch.stack([one_hot(6), one_hot(8), one_hot(1), one_hot(1), one_hot(7), one_hot(3)])
    walk = rules.walk_greedy(SMALL, probs)
    assert walk.path == [4, 5] and walk.kind == "bonus" and walk.token == 3
    assert walk.verdicts == ["accepted", "rejected", "untested", "untested", "accepted", "accepted"]
    # the target wants 2 after the root: no child matches, 2 is the corrected token
    probs[0] = one_hot(2)
    walk = rules.walk_greedy(SMALL, probs)
    assert walk.path == [] and walk.kind == "corrected" and walk.token == 2
    assert walk.verdicts[1] == walk.verdicts[4] == "rejected"
    assert all(u is None for u in walk.u)


def test_duplicate_siblings_are_skipped():
    tree = TokenTree([0, 5, 5, 6], [-1, 0, 0, 0], [0, 1, 1, 1])
    probs = torch.stack([one_hot(6)] * 4)
    walk = rules.walk_greedy(tree, probs)
    assert walk.verdicts == ["accepted", "rejected", "untested", "accepted"] and walk.path == [3]
    p = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0])
    for seed in range(20):
        walk = rules.walk_sampled(tree, torch.stack([p] * 4), torch.Generator().manual_seed(seed))
        assert walk.verdicts[2] == "untested" and walk.u[2] is None  # asked once, never twice
        if walk.verdicts[1] == "rejected":  # then p'(6) = 1: 6 always passes
            assert walk.ratios[3] == pytest.approx(1.0) and walk.path == [3]


def wrong_walk(tree: TokenTree, probs: torch.Tensor, gen: torch.Generator) -> int:
    """A plausible bug: the same questions, but when every child says no, the token is drawn from
    the target's p instead of what is left of it (p with the rejected children zeroed)."""
    for child in tree.children(0):
        residual = probs[0].clone()
        for other in tree.children(0):
            if other == child:
                break
            residual[tree.tokens[other]] = 0
        residual /= residual.sum()
        if sampling.uniform(gen) < float(residual[tree.tokens[child]]):
            return tree.tokens[child]
    return sampling.sample(probs[0], gen)


def test_deterministic_siblings_sample_exactly_from_p():
    """The first emitted token over 6000 seeded walks follows the root's p (chi-square), whatever
    the children (a zero-probability child, a likely one, an unlikely one); the wrong rule fails."""
    vocab = 6
    p = torch.tensor([0.05, 0.3, 0.0, 0.25, 0.15, 0.25])
    tree = TokenTree([0, 2, 1, 4, 5], [-1, 0, 0, 0, 3], [0, 1, 1, 1, 2])  # p(2) = 0: always rejected
    probs = torch.stack([p] * 5)
    runs = 6000
    expected = {t: float(p[t]) for t in range(vocab)}
    right, wrong = collections.Counter(), collections.Counter()
    kinds = collections.Counter()
    for seed in range(runs):
        walk = rules.walk_sampled(tree, probs, torch.Generator().manual_seed(seed))
        first = tree.tokens[walk.path[0]] if walk.path else walk.token
        right[first] += 1
        kinds[walk.kind] += 1
        wrong[wrong_walk(tree, probs, torch.Generator().manual_seed(seed))] += 1
    assert kinds["corrected"] > 500 and kinds["bonus"] > 500
    assert right[2] == 0
    assert chi_square(right, expected, runs)[1] > 0.01
    assert chi_square(wrong, expected, runs)[1] < 1e-6


def test_compaction_moves():
    assert trees.compaction_moves([1, 2, 3], 3) == []  # already in place: no copy
    assert trees.compaction_moves([2, 5], 2) == [(2, 1), (5, 2)]  # overlapping: slot 2 is read, then written
    assert trees.compaction_moves([1, 4, 9], 2) == [(4, 2)]  # only what the committed sequence keeps
    assert trees.compaction_moves([3], 0) == []


# --------------------------------------------------------------------------- the caches' move


def filled(cache, n: int):
    """Write entries 0..n-1 through one layer with K = V = the entry index (so a move is visible)."""
    cache.reserve(list(range(100, 100 + n)), "verify")
    kv = torch.arange(n, dtype=torch.float32).reshape(1, 1, n, 1).repeat(1, 2, 1, 3)  # [1, H, n, D]
    for layer in cache.layers:
        layer.update(kv, kv)
    return cache


CACHES = {
    "contiguous": lambda: ContiguousKVCache(2, max_len=64, initial_len=16),
    "paged-1": lambda: PagedKVCache(2, max_len=64, page_size=1),
    "paged-4-free": lambda: PagedKVCache(2, max_len=64, page_size=4, policy="free"),
    "paged-4-keep": lambda: PagedKVCache(2, max_len=64, page_size=4, policy="keep"),
}


@pytest.mark.parametrize("make", CACHES.values(), ids=CACHES.keys())
def test_move_overlapping_and_across_blocks(make):
    cache = filled(make(), 11)
    # path 3, 6, 9 after a root at entry 2: entries 3 -> 3 stays; 6 -> 4 and 9 -> 5, across pages of 4
    cache.move([(6, 4), (9, 5)], "rollback")
    cache.truncate(6, "rollback")
    keys, values = cache.dense_kv(1)
    assert keys[0, 0, :, 0].tolist() == [0, 1, 2, 3, 6, 9] and torch.equal(keys, values)
    assert cache.token_ids == [100, 101, 102, 103, 106, 109]
    moves = [e for e in cache.drain_events() if e.kind == "move"]
    assert [(e.start, e.end) for e in moves] == [(6, 4), (9, 5)]
    if isinstance(cache, PagedKVCache) and cache.page_size == 4:
        assert moves[1].blocks[0] != moves[1].blocks[1]  # entry 9 (block 2) -> entry 5 (block 1)
        # 6 entries: the last block is partly filled; the third block (entries 8..10) is freed or kept
        assert len(cache.block_table) == (2 if cache.policy == "free" else 3)
    # overlapping: 2 -> 1 reads entry 2 before 3 -> 2 overwrites it
    cache = filled(make(), 6)
    cache.move([(2, 1), (3, 2), (5, 3)], "rollback")
    assert cache.dense_kv(0)[0][0, 1, :4, 2].tolist() == [0, 2, 3, 5]


@pytest.mark.parametrize("make", CACHES.values(), ids=CACHES.keys())
def test_bad_moves_change_nothing(make):
    cache = filled(make(), 6)
    before = [t.clone() for t in cache.dense_kv(0)]
    for moves in ([(2, 3)], [(6, 1)], [(3, 2), (4, 1)], [(1, -1)]):
        with pytest.raises(ValueError):
            cache.move(moves, "rollback")
    assert all(torch.equal(a, b) for a, b in zip(before, cache.dense_kv(0)))
    assert not [e for e in cache.drain_events() if e.kind == "move"]
    cache.reserve([1], "verify")
    with pytest.raises(ValueError, match="pending"):
        cache.move([(3, 2)], "rollback")


def test_growth_over_candidate_tokens_equals_growth_over_the_vocabulary():
    """A trimmed vocabulary (q = 0 outside it): searching only its columns gives the same tree,
    the same full-vocabulary q rows and the same fed tokens (no ties in these random logits)."""
    vocab, candidates = 40, torch.tensor([1, 4, 5, 9, 17, 22, 23, 30, 38])

    def logits_for(token: int, depth: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(1000 * depth + token)
        full = torch.full((vocab,), float("-inf"))
        full[candidates] = torch.randn(len(candidates), generator=g) * 2
        return full

    def expand(frontier, pool):
        return torch.stack([logits_for(pool[c].token, pool[c].depth) for c in frontier])

    for width, depth, nodes in [(2, 3, 5), (4, 4, 16), (12, 2, 30)]:  # 12 > |S|: every candidate
        shape = TreeShape(width, depth, nodes)
        whole, fed = trees.grow(9, logits_for(9, 0), expand, shape)
        trimmed, fed_trimmed = trees.grow(9, logits_for(9, 0), expand, shape, candidates=candidates)
        assert (trimmed.tokens, trimmed.parents, trimmed.scores, fed_trimmed) == (whole.tokens, whole.parents,
                                                                                 whole.scores, fed)
        assert torch.equal(trimmed.draft_probs, whole.draft_probs)
        assert set(trimmed.tokens[1:]) <= set(candidates.tolist())
