"""Token trees through the real engine (docs/design.md §1c), on the tiny random pairs.

One tree pass gives every node the logits a chain pass over its path gives (eager and sdpa); a
boolean mask is refused and flat position ids would be wrong; the emitted tokens at T > 0 follow
the target's exact law (chi-square) while the draft's law is rejected; greedy trees reproduce the
target's greedy text; after every cycle both caches equal a fresh prefill, for every proposer,
layout, page size, policy and several tree shapes; and the edge cases -- K/V that must move,
already in place, an end-of-text token inside the accepted path, the context limit and a full
block pool inside a tree, duplicate siblings, a failure after the compaction, live switches
between chain and tree, bad shapes -- are each caught with a clear error and nothing changed, or
handled exactly.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import pytest
import torch
from cuda_checks import EXACT_PROMPT, VOCAB, chi_square, exact_joint, seeded_windows
from engine_helpers import assert_invariant, make_pair, path_to
from tiny_models import tiny_model
from transformers import DynamicCache

from specviz import DecodeConfig, FeatureHead, SpeculativeDecoder
from specviz import tree as trees
from specviz.errors import ConfigError, PoolExhaustedError
from specviz.kv import create_cache
from specviz.models import attach_feature_head
from specviz.proposers import TreeDrafts, registry
from specviz.runtime import forward, forward_with_features
from specviz.tree import TokenTree

PROMPT = [3, 17, 42, 5, 9, 28, 11, 3, 17]  # ends on an earlier 2-gram: prompt lookup proposes too
PROPOSERS = registry.names()  # every proposer in the table
NEW = 16


@functools.cache
def pair(noise: float = 0.2):
    return make_pair("llama", noise=noise)


@functools.cache
def greedy_reference() -> tuple[int, ...]:
    out = pair().target.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW)
    return tuple(out[0].tolist())


@functools.cache
def greedy_pair():
    """The pair with its feature head trimmed to the greedy continuation's tokens, so that even an
    untrained head proposes the target's choice now and then (accepted paths occur)."""
    base = make_pair("llama", noise=0.2)
    vocab = sorted(set(greedy_reference()[len(PROMPT):]))
    return attach_feature_head(base, FeatureHead.random(base.target, vocab=vocab))


def run(cfg: DecodeConfig, the_pair=None, prompt=PROMPT, check: bool = True, cycles: int | None = None):
    dec = SpeculativeDecoder(the_pair or pair(), cfg)
    dec.start(prompt)
    traces = []
    while not dec.finished and (cycles is None or len(traces) < cycles):
        traces.append(dec.step())
        if check:
            assert_invariant(dec)
    return dec, traces


def state(dec: SpeculativeDecoder) -> tuple:
    caches = [c for c in (dec.target_cache, dec.draft_cache) if c is not None]
    return (dec.committed, [c.get_seq_length() for c in caches], [getattr(c, "block_table", None) for c in caches],
            [g.get_state().tolist() for g in dec._session.generators.values()])


# --------------------------------------------------------------------------- one pass = a chain per node

HAND_TREE = TokenTree([17, 5, 8, 8, 30, 2, 9, 5], [-1, 0, 1, 1, 0, 4, 5, 2], [0, 1, 2, 2, 1, 2, 3, 3])


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_node_logits_equal_a_chain_pass_over_the_path(arch, attn, layout):
    model = tiny_model(arch, seed=1)
    model.config._attn_implementation = attn
    prefix = PROMPT[:-1]
    cache = create_cache(model, layout, page_size=3, max_len=64)
    forward(model, cache, prefix, "prefill")
    mask = trees.verify_mask(HAND_TREE, len(prefix), torch.float32, "cpu")
    tree_logits = forward(model, cache, HAND_TREE.tokens, "verify", tree=(mask, HAND_TREE.position_ids(len(prefix))))
    assert cache.get_seq_length() == len(prefix) + len(HAND_TREE.tokens)
    for node in range(len(HAND_TREE.tokens)):
        path = [HAND_TREE.tokens[0]] + [HAND_TREE.tokens[i] for i in path_to(HAND_TREE, node)]
        with torch.inference_mode():
            chain = model(torch.tensor([prefix + path]), past_key_values=DynamicCache()).logits[0, -1]
        assert (tree_logits[node] - chain).abs().max().item() <= 1e-4, (arch, attn, node)


def test_a_boolean_mask_is_caught_and_flat_positions_would_be_wrong():
    model = tiny_model("llama", seed=1)
    prefix = PROMPT[:-1]
    cache = create_cache(model, "contiguous", max_len=64)
    forward(model, cache, prefix, "prefill")
    float_mask = trees.verify_mask(HAND_TREE, len(prefix), torch.float32, "cpu")
    positions = HAND_TREE.position_ids(len(prefix))
    with pytest.raises(TypeError, match="additive float"):
        forward_with_features(model, cache, HAND_TREE.tokens, "verify", tree=(float_mask == 0, positions))
    assert cache.get_seq_length() == len(prefix)  # refused before anything was reserved
    right = forward(model, cache, HAND_TREE.tokens, "verify", tree=(float_mask, positions))
    ids = torch.tensor([HAND_TREE.tokens])

    def raw(mask, pos):  # straight into the eager model, past the check: what each mistake would give
        cache.truncate(len(prefix), "rollback")
        cache.reserve(HAND_TREE.tokens, "verify")
        with torch.inference_mode():
            return model(ids, past_key_values=cache, attention_mask=mask,
                         position_ids=torch.tensor([pos])).logits[0]

    assert (raw(float_mask, positions) - right).abs().max() < 1e-5
    assert (raw(float_mask == 0, positions) - right).abs().max() > 1e-2  # eager adds True as 1.0: wrong
    flat = list(range(len(prefix), len(prefix) + len(HAND_TREE.tokens)))
    # node 4 sits at depth 1, not at slot 4: flat positions give other logits (far above the 1e-5 noise)
    assert (raw(float_mask, flat) - right).abs().max() > 5e-4


# --------------------------------------------------------------------------- exactness


def test_tree_samples_match_the_target_distribution():
    """The first two generated tokens of 1000 seeded tree runs (width 3, depth 2, 6 nodes, T = 1)
    follow the target's exact joint law; the same samples reject the draft's law (the control)."""
    the_pair = make_pair("llama", vocab_size=VOCAB, noise=1.0, seed=3)
    cfg = DecodeConfig(k=2, tree_width=3, tree_nodes=6, temperature=1.0, page_size=2, instrument=False,
                       max_new_tokens=16)
    runs = 1000
    counts: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    moved = 0
    for dec, traces in seeded_windows(the_pair, cfg, EXACT_PROMPT, runs):
        kinds.update(t.kind for tr in traces for t in tr.emitted)
        moved += any(tr.tree.moves for tr in traces)
        counts[tuple(dec.committed[len(EXACT_PROMPT): len(EXACT_PROMPT) + 2])] += 1
    stat, pvalue = chi_square(counts, exact_joint(the_pair.target, cfg), runs)
    _, draft_p = chi_square(counts, exact_joint(the_pair.draft, cfg), runs)
    print(f"\ntree T=1: chi2={stat:.2f} p={pvalue:.4f} vs draft p={draft_p:.2e} kinds={dict(kinds)} moved={moved}")
    assert min(kinds["accepted"], kinds["corrected"], kinds["bonus"]) >= 100, kinds
    assert moved >= 50  # non-first siblings win: the compaction moves K/V
    assert pvalue > 0.01, (stat, pvalue)
    assert draft_p < 1e-4


@pytest.mark.parametrize("proposer", PROPOSERS)
@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_greedy_trees_equal_target_generate(proposer, layout):
    cfg = DecodeConfig(k=3, tree_width=3, tree_nodes=10, proposer=proposer, temperature=0.0, cache_layout=layout,
                       page_size=4, max_new_tokens=NEW)
    dec, traces = run(cfg, greedy_pair(), check=False)
    assert tuple(dec.committed) == greedy_reference()
    if proposer != "lookup":
        assert any(t.num_accepted for t in traces)


# --------------------------------------------------------------------------- the invariant


LAYOUTS = [("contiguous", 16, "free")] + [("paged", p, pol) for p in (1, 4, 16) for pol in ("free", "keep")]
SHAPES = [(2, 3, 4), (3, 4, 12), (4, 2, 16)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: "-".join(map(str, lay)))
@pytest.mark.parametrize("proposer", PROPOSERS)
def test_invariant_after_every_tree_cycle(proposer, layout):
    """Every shape of SHAPES, at T = 1 then T = 0 (6 tokens each), with the invariant after each cycle;
    the trace's tree agrees with the cache: nodes in their verify slots, moves as events."""
    cache_layout, page, policy = layout
    for i, (width, depth, nodes) in enumerate(SHAPES):
        temperature = 1.0 if i % 2 == 0 else 0.0
        cfg = DecodeConfig(k=depth, tree_width=width, tree_nodes=nodes, proposer=proposer, temperature=temperature,
                           cache_layout=cache_layout, page_size=page, free_policy=policy, max_new_tokens=6, seed=i)
        dec, traces = run(cfg)
        for t in traces:
            assert t.tree is not None and t.k == len(t.tree.nodes) <= nodes
            assert all(n.depth <= depth for n in t.tree.nodes)
            verify = t.snapshot("verify").target
            for node in t.tree.nodes:
                assert verify.slot_tokens[node.slot] == node.token_id
                assert node.position == t.context_len - 1 + node.depth
            moves = [(e.start, e.end) for e in t.target_events if e.kind == "move"]
            assert moves == list(t.tree.moves) and t.tree.in_place == (not moves)


@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])
def test_other_architectures(arch):
    """Qwen2 (GQA, biases) and GPT-2 (learned absolute positions): the invariant after every tree
    cycle for both model proposers at T = 1, and the target's greedy text at T = 0."""
    the_pair = make_pair(arch)
    for proposer in ("draft", "feature"):
        cfg = DecodeConfig(k=3, tree_width=3, tree_nodes=8, proposer=proposer, page_size=4, max_new_tokens=10)
        run(cfg, the_pair)
    reference = the_pair.target.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=10,
                                         min_new_tokens=10)[0].tolist()
    dec, _ = run(DecodeConfig(k=3, tree_width=3, tree_nodes=8, temperature=0.0, max_new_tokens=10), the_pair)
    assert dec.committed == reference


def test_kv_moves_and_the_no_copy_case():
    """A draft equal to the target (noise 0): the most likely chain always wins and is already in
    place (no copy). A noisy draft at T = 1: non-first siblings win, K/V move, across blocks too."""
    cfg = DecodeConfig(k=3, tree_width=2, tree_nodes=6, temperature=0.0, page_size=4, max_new_tokens=12)
    _, traces = run(cfg, make_pair("llama", noise=0.0))
    assert all(t.tree.in_place and not t.tree.moves and t.num_accepted == len(t.tree.path) for t in traces)
    assert any(t.num_accepted == 3 for t in traces)
    _, traces = run(cfg.replace(temperature=1.0, max_new_tokens=40), make_pair("llama", noise=0.6))
    moves = [e for t in traces for e in t.target_events if e.kind == "move"]
    assert moves and any(e.blocks[0] != e.blocks[1] for e in moves)
    assert any(t.tree.path and t.tree.path[0] != 1 for t in traces)


# --------------------------------------------------------------------------- edge cases


def test_end_of_text_inside_the_accepted_path():
    """The target's second accepted token is made an end-of-text token: the cycle commits up to it,
    drops the rest of the path and the bonus, compacts only what it keeps and ends the text."""
    cfg = DecodeConfig(k=4, tree_width=2, tree_nodes=8, temperature=0.0, page_size=4, max_new_tokens=20)
    the_pair = make_pair("llama", noise=0.05)
    _, traces = run(cfg, the_pair, cycles=1)
    path = traces[0].tree.path
    assert len(path) >= 3, path
    eos = traces[0].drafts[path[1] - 1].token_id
    dec = SpeculativeDecoder(the_pair, cfg)
    dec.start(PROMPT)
    dec.eos_ids = frozenset({eos})
    trace = dec.step()
    assert [e.token_id for e in trace.emitted][-1] == eos and len(trace.emitted) == 2
    assert trace.finish_reason == "eos" and dec.finished
    assert all(to <= len(PROMPT) + 1 for _, to in trace.tree.moves)  # nothing past what is kept
    assert_invariant(dec)


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_the_context_limit_inside_a_tree(proposer):
    """max_context 15 with a 9-token prompt: the node budget is clipped to the room left, the text
    ends with context_full, and every cycle keeps the invariant."""
    cfg = DecodeConfig(k=4, tree_width=3, tree_nodes=12, proposer=proposer, max_context=15, page_size=4,
                       max_new_tokens=50)
    dec, traces = run(cfg)
    assert traces[-1].finish_reason == "context_full" and len(dec.committed) == 15
    for t in traces:
        assert t.tree.budget <= 15 - t.context_len and t.k <= t.tree.budget


@pytest.mark.parametrize("proposer", ["draft", "feature"])
def test_a_full_block_pool_inside_a_tree_changes_nothing(proposer):
    """Pages of 4 and a cap of 5 blocks: a 16-node tree does not fit (in the proposer's cache while
    growing, or in the target's verify): a clear error, every state as it was; a smaller tree then
    runs exactly as in a decoder that never failed."""
    cfg = DecodeConfig(k=4, tree_width=4, tree_nodes=16, proposer=proposer, page_size=4, num_blocks=5)
    dec = SpeculativeDecoder(pair(), cfg)
    dec.start(PROMPT)
    before = state(dec)
    with pytest.raises(PoolExhaustedError, match="block"):
        dec.step()
    assert state(dec) == before
    small = cfg.replace(tree_width=2, tree_nodes=3, k=2)
    dec.update_config(small)
    twin = SpeculativeDecoder(pair(), small)
    twin.start(PROMPT)
    assert dec.step().emitted == twin.step().emitted
    assert_invariant(dec)


def test_duplicate_siblings_in_a_hand_made_tree():
    """A proposer that returns the same token twice under one parent: the copy is never asked
    (untested), the walk and the compaction are as without it."""
    cfg = DecodeConfig(k=2, tree_width=3, tree_nodes=6, proposer="lookup", temperature=0.0, max_new_tokens=8)
    dec = SpeculativeDecoder(pair(), cfg)
    dec.start(PROMPT)
    want = greedy_reference()[len(PROMPT)]
    other = (want + 1) % 64
    hand = TokenTree([PROMPT[-1], other, other, want], [-1, 0, 0, 0], [0, 1, 1, 1])
    dec.proposer.propose_tree = lambda committed, shape: TreeDrafts(hand, [], "hand-made")
    trace = dec.step()
    assert [n.verdict for n in trace.tree.nodes] == ["rejected", "untested", "accepted"]
    assert trace.tree.path == (3,) and trace.tree.moves == ((len(PROMPT) + 2, len(PROMPT)),)
    assert_invariant(dec)


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_a_failure_after_the_compaction_changes_nothing(proposer, monkeypatch):
    cfg = DecodeConfig(k=3, tree_width=3, tree_nodes=8, proposer=proposer, page_size=3, max_new_tokens=30)
    dec, twin = SpeculativeDecoder(pair(), cfg), SpeculativeDecoder(pair(), cfg)
    for d in (dec, twin):
        d.start(PROMPT)
        d.step()
    before = state(dec)
    real = dec._rollback  # the compaction, then the truncation

    def compact_then_fail(*args):
        real(*args)
        raise RuntimeError("injected failure after the compaction")

    monkeypatch.setattr(dec, "_rollback", compact_then_fail)
    with pytest.raises(RuntimeError, match="injected"):
        dec.step()
    assert state(dec) == before
    monkeypatch.undo()
    assert [dec.step().emitted for _ in range(2)] == [twin.step().emitted for _ in range(2)]
    assert_invariant(dec)


def test_live_switches_between_chain_and_tree():
    """tree_width, tree_nodes and K change between cycles; greedy output stays the target's."""
    cfg = DecodeConfig(k=3, temperature=0.0, proposer="feature", page_size=4, max_new_tokens=NEW)
    dec = SpeculativeDecoder(greedy_pair(), cfg)
    dec.start(PROMPT)
    shapes = [(1, 16, 3), (3, 5, 2), (1, 16, 4), (2, 12, 4), (4, 2, 1)]
    i = 0
    while not dec.finished:
        width, nodes, k = shapes[i % len(shapes)]
        dec.update_config(dec.config.replace(tree_width=width, tree_nodes=nodes, k=k))
        trace = dec.step()
        assert (trace.tree is None) == (width == 1)
        assert_invariant(dec)
        i += 1
    assert tuple(dec.committed) == greedy_reference()


def test_width_one_is_the_chain_exactly():
    """tree_width 1 ignores tree_nodes: the same random draws and traces as a config without trees."""
    base = DecodeConfig(k=3, temperature=1.0, page_size=4, max_new_tokens=12)
    strip = {"timings_ms": {}, "total_ms": None}
    a = [dataclasses.replace(t, **strip) for t in run(base, check=False)[1]]
    b = [dataclasses.replace(t, **strip) for t in run(base.replace(tree_nodes=7), check=False)[1]]
    assert a == b and all(t.tree is None for t in a)


@pytest.mark.parametrize("changes", [
    {"tree_width": 0}, {"tree_width": 17}, {"tree_width": True}, {"tree_width": 2.0},
    {"tree_nodes": 0}, {"tree_nodes": 129}, {"tree_nodes": "8"},
    {"tree_width": 2, "forced_outcomes": ((1, True),)},
])
def test_bad_tree_shapes_are_clear_errors_and_change_nothing(changes):
    with pytest.raises(ConfigError, match="tree|forc"):
        DecodeConfig(**changes)
    cfg = DecodeConfig(k=2, tree_width=2, tree_nodes=4, max_new_tokens=8)
    dec = SpeculativeDecoder(pair(), cfg)
    dec.start(PROMPT)
    dec.step()
    before = state(dec)
    with pytest.raises(ConfigError):
        dec.update_config(_unchecked(cfg, changes))
    assert dec.config == cfg and state(dec) == before
    dec.step()
    assert_invariant(dec)


def _unchecked(cfg: DecodeConfig, changes: dict) -> DecodeConfig:
    """A config carrying bad values (built past validation, as a caller mutating fields would)."""
    bad = DecodeConfig.__new__(DecodeConfig)
    for f in dataclasses.fields(DecodeConfig):
        object.__setattr__(bad, f.name, changes.get(f.name, getattr(cfg, f.name)))
    return bad
