"""Retrieval drafting (specviz.suffix_store, specviz.proposers.retrieval): the store's lookups
against a brute-force search, the session's growing store, and exactness of the drafts it makes,
alone and merged into the feature head's tree."""

from __future__ import annotations

import collections
import dataclasses
import re

import numpy as np
import pytest
import torch
from cuda_checks import EXACT_PROMPT, VOCAB, chi_square, exact_joint, seeded_windows
from engine_helpers import assert_invariant, make_pair, path_to
from hypothesis import given, settings
from hypothesis import strategies as st

from specviz import DecodeConfig, SpeculativeDecoder
from specviz.autoregressive import AutoregressiveDecoder
from specviz.proposers.retrieval import merge, most_frequent_chain
from specviz.suffix_store import Match, SessionStore, SuffixStore, suffix_array

WINDOW = 3
RUNS = 2000


def brute_force(tokens: list[int], context: list[int], max_len: int) -> tuple[int, collections.Counter]:
    """The longest suffix of `context` found in `tokens`, and every continuation's first token."""
    for m in range(min(max_len, len(context)), 0, -1):
        pattern = context[-m:]
        starts = [s for s in range(len(tokens) - m + 1) if tokens[s:s + m] == pattern]
        if starts:
            return m, collections.Counter(tokens[s + m] for s in starts if s + m < len(tokens))
    return 0, collections.Counter()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=60), st.lists(st.integers(0, 4), min_size=1, max_size=8))
def test_lookups_agree_with_a_brute_force_search(tokens, context):
    store = SuffixStore(np.array(tokens))
    assert [int(s) for s in store.suffixes] == sorted(range(len(tokens)), key=lambda i: tokens[i:])
    length, lo, hi = store.longest_match(context, max_len=6)
    want_len, want_next = brute_force(tokens, context, 6)
    assert length == want_len
    if length:
        match = store.continuations(context, depth=1, max_len=6, max_occurrences=10_000)
        assert match.occurrences == hi - lo == sum(want_next.values()) + (tokens[-length:] == context[-length:])
        assert dict((p[0], c) for p, c in match.continuations) == dict(want_next)


def test_suffix_array_of_a_long_repetitive_text():
    tokens = np.array([1, 2, 3] * 300 + [1, 2, 4] + [5] * 200)
    assert [int(s) for s in suffix_array(tokens)] == sorted(range(len(tokens)), key=lambda i: tuple(tokens[i:]))


def test_bad_stores_and_contexts():
    with pytest.raises(ValueError, match="token ids"):
        SuffixStore(np.array([1, 70_000]))
    empty = SuffixStore(np.array([], dtype=np.int64))
    assert len(empty) == 0 and empty.continuations([1, 2], 3).length == 0
    store = SuffixStore(np.array([4, 5, 6]))
    assert store.continuations([9], 3).length == 0  # shorter than the shortest match: nothing
    assert store.continuations([], 3).length == 0
    assert store.continuations([4], 3).continuations == (((5, 6), 1),)


def test_the_chain_follows_the_most_frequent_continuation():
    match = Match(2, 5, (((7, 1, 2), 2), ((7, 3), 2), ((8, 1), 1)), "datastore")
    assert most_frequent_chain(match, 3) == [7, 1, 2]  # 7 (4 of 5), then 1 and 3 tie: the first counted


def test_the_session_store_grows_and_is_bounded():
    session = SessionStore(max_tokens=10)
    session.add([1, 2, 3, 4])
    assert session.continuations([9, 2, 3], 2).continuations == (((4,), 1),)
    session.add([5, 6, 7, 8, 9, 10, 11])  # 11 tokens in all: the oldest text goes
    assert len(session) == 7 and session.continuations([2, 3], 2).length == 0
    session.clear()
    assert len(session) == 0


@pytest.fixture(scope="module")
def pair():
    return make_pair("llama", vocab_size=VOCAB, noise=1.0, seed=3, head_vocab=(0, 1, 2, 5, 6, 7))


def greedy_text(pair, prompt: list[int], n: int) -> list[int]:
    ar = AutoregressiveDecoder(pair.target, DecodeConfig(temperature=0.0, max_new_tokens=n))
    ar.start(prompt)
    return ar.generate()


@pytest.mark.parametrize("proposer", ["retrieval", "feature+retrieval"])
@pytest.mark.parametrize("width", [1, 3])
def test_greedy_output_is_the_targets_and_a_repeated_prompt_is_drafted_whole(pair, proposer, width):
    prompt = [3, 6, 2, 7, 1]
    plain = greedy_text(pair, prompt, 20)
    cfg = DecodeConfig(proposer=proposer, k=4, tree_width=width, tree_nodes=8, temperature=0.0, max_new_tokens=20,
                       check_invariant=True)
    dec = SpeculativeDecoder(pair, cfg)
    for _ in range(2):
        dec.start(prompt)
        traces = []
        while not dec.finished:
            traces.append(dec.step())
            assert_invariant(dec)
        assert dec.committed[len(prompt):] == plain
    # The second run finds the first in the session's store: every cycle accepts drafts.
    assert sum(t.num_accepted for t in traces) >= len(plain) - len(traces)
    assert "this session's earlier texts" in traces[0].proposer_note


def test_two_sessions_never_draft_from_each_others_text(pair):
    cfg = DecodeConfig(proposer="retrieval", k=4, temperature=0.0, max_new_tokens=12)
    no_datastore = dataclasses.replace(pair, retrieval_store=None)  # only the sessions' own texts
    alice, bob = SpeculativeDecoder(no_datastore, cfg), SpeculativeDecoder(no_datastore, cfg)
    alice.start([3, 6, 2, 7, 1])
    alice.generate()
    bob.start([3, 6, 2, 7, 1])
    assert len(alice.session_texts) > 0 and len(bob.session_texts) == 0
    assert bob.step().k == 0  # nothing of Alice's text is Bob's draft


def retrieval_pair(pair):
    """The pair with a datastore in which the exactness prompt's suffix is followed by several
    continuations, the target's likely ones among them (so accepted, corrected and bonus all occur)."""
    likely = greedy_text(pair, EXACT_PROMPT, 3)
    tail = EXACT_PROMPT[-2:]
    text = [*tail, *likely] * 3 + [*tail, likely[0], (likely[1] + 1) % VOCAB, 0] + [*tail, (likely[0] + 3) % VOCAB, 1]
    return dataclasses.replace(pair, retrieval_store=SuffixStore(np.array(text)))


@pytest.mark.parametrize(("proposer", "width"), [("retrieval", 1), ("retrieval", 2), ("feature+retrieval", 2)])
def test_samples_match_the_target_distribution(pair, proposer, width):
    rpair = retrieval_pair(pair)
    cfg = DecodeConfig(proposer=proposer, k=2, tree_width=width, tree_nodes=4, instrument=False, max_new_tokens=16)
    expected = exact_joint(rpair.target, cfg, EXACT_PROMPT, WINDOW)
    counts: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    window = slice(len(EXACT_PROMPT), len(EXACT_PROMPT) + WINDOW)
    for dec, _ in seeded_windows(rpair, cfg, EXACT_PROMPT, RUNS, WINDOW):
        counts[tuple(dec.committed[window])] += 1
        kinds.update(dec.origins[window])
    stat, pvalue = chi_square(counts, expected, RUNS)
    assert min(kinds["accepted"], kinds["corrected"]) >= 50, kinds
    assert pvalue > 0.01, (stat, pvalue, kinds)


def test_merge_unions_two_trees_and_keeps_the_best_nodes():
    from specviz.tree import TokenTree

    a = TokenTree([9, 1, 2, 3], [-1, 0, 1, 0], [0, 1, 2, 1], [0.0, -0.1, -0.5, -2.0])
    b = TokenTree([9, 1, 4, 5], [-1, 0, 1, 0], [0, 1, 2, 1], [0.0, -0.3, -0.2, -1.0])
    tree = merge(a, b, 4)
    paths = {tuple(tree.tokens[n] for n in path_to(tree, i)) for i in range(1, len(tree.tokens))}
    assert paths == {(1,), (1, 4), (1, 2), (5,)}  # 1 shared (best score kept); 3 (-2.0) lost the budget
    assert tree.scores[tree.tokens.index(4)] == pytest.approx(-0.2)  # never above its parent's -0.1
    assert torch.is_tensor(tree.draft_probs) or tree.draft_probs is None


def test_the_trace_records_the_matched_suffix_and_where_it_occurs(pair):
    """A retrieval cycle's `matched` is the committed sequence's suffix, found in its store at
    `where`, followed there by the first draft; the drafts panel shows those tokens highlighted."""
    from specviz.viz.kv_html import kv_stage_html

    rpair = retrieval_pair(pair)
    store = rpair.retrieval_store
    dec = SpeculativeDecoder(rpair, DecodeConfig(proposer="retrieval", k=3, temperature=0.0, max_new_tokens=6))
    dec.start(EXACT_PROMPT)
    before = dec.committed
    tr = dec.step()
    m = tr.matched
    assert m is not None and m.source == "datastore" and tr.drafts
    assert list(m.tokens) == before[m.first:] and m.first + len(m.tokens) == len(before)
    stored = store.tokens.tolist()
    assert stored[m.where:m.where + len(m.tokens)] == list(m.tokens)
    assert m.occurrences == sum(stored[s:s + len(m.tokens)] == list(m.tokens) for s in range(len(stored)))
    html = kv_stage_html(tr.snapshot("draft"), None, str, trace=tr, phase="draft", proposer="retrieval")
    marked = re.findall(r"<mark class='svkv-mtext'>([^<]*)</mark>", html)
    assert marked == [str(t) for t in m.tokens] and "data-role='matched'" in html
    assert "datastore" in html and f"positions {m.first}–{len(before) - 1}" in html


def test_a_merged_tree_names_who_proposed_each_node(pair):
    """Each node of a feature+retrieval tree is marked by the sources whose own tree holds its path."""
    from specviz.proposers.retrieval import node_paths, sources_of
    from specviz.tree import TokenTree
    from specviz.viz.tree_view import tree_panel_html

    a = TokenTree([9, 1, 2, 3], [-1, 0, 1, 0], [0, 1, 2, 1], [0.0, -0.1, -0.5, -2.0])
    b = TokenTree([9, 1, 4, 5], [-1, 0, 1, 0], [0, 1, 2, 1], [0.0, -0.3, -0.2, -1.0])
    tree = merge(a, b, 4)
    by_path = dict(zip(node_paths(tree)[1:], sources_of(tree, a, b), strict=True))
    assert by_path == {(1,): "both", (1, 2): "feature head", (1, 4): "retrieval", (5,): "retrieval"}

    rpair = retrieval_pair(pair)
    cfg = DecodeConfig(proposer="feature+retrieval", k=2, tree_width=2, tree_nodes=6, temperature=0.0,
                       max_new_tokens=6)
    dec = SpeculativeDecoder(rpair, cfg)
    dec.start(EXACT_PROMPT)
    tr = dec.step()
    sources = [d.source for d in tr.drafts]
    assert tr.matched is not None and set(sources) <= {"feature head", "retrieval", "both"}
    assert {"retrieval", "both"} & set(sources)  # the datastore's continuation made it into the tree
    html = tree_panel_html(tr, "draft", str)
    marks = re.findall(r"data-n='(\d+)'[^>]*>(?:<span class='svtree-id'>\d+</span>)"
                       r"(?:<span class='svtree-src' data-role='tree-source'>([^<]*)</span>)?", html)
    want = {"retrieval": "R", "both": "R+F", "feature head": ""}
    assert [(int(n), mark) for n, mark in marks] == [(d.index, want[d.source]) for d in tr.drafts]
    # Width 1: one chain from one source, said on every draft card.
    from specviz.viz.kv_html import kv_stage_html

    chain = SpeculativeDecoder(rpair, cfg.replace(tree_width=1))
    chain.start(EXACT_PROMPT)
    tr = chain.step()
    assert tr.drafts and len({d.source for d in tr.drafts}) == 1
    assert tr.proposer_note.startswith(tr.drafts[0].source)
    html = kv_stage_html(tr.snapshot("draft"), None, str, trace=tr, phase="draft", proposer="feature+retrieval")
    assert html.count(f"data-role='draft-source'>from {tr.drafts[0].source}<") == len(tr.drafts)


def test_a_match_keeps_the_source_text_around_its_first_occurrence(pair):
    """The datastore's and the session's matches keep up to AROUND tokens before the matched suffix at
    its first occurrence and up to AROUND after it; the trace records them, a run file carries them
    (validated), and the drafts panel shows them, the suffix marked and what followed underlined."""
    from specviz.run_schema import ContextMatchModel
    from specviz.suffix_store import AROUND
    from specviz.viz.kv_html import kv_stage_html

    text = list(range(1, 30)) + [5, 6, 7, 40, 41]
    store = SuffixStore(np.array(text))
    m = store.continuations([90, 91, 5, 6, 7], depth=3, min_len=2)
    assert (m.length, m.example) == (3, 4)  # 5, 6, 7 first occurs at index 4
    assert m.before == tuple(text[0:4]) and m.after == tuple(text[7:7 + AROUND])
    session = SessionStore()
    session.add([50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62])
    s = session.continuations([1, 2, 60, 61], depth=2, min_len=2)
    assert s.before == (52, 53, 54, 55, 56, 57, 58, 59) and s.after == (62,)

    rpair = retrieval_pair(pair)
    dec = SpeculativeDecoder(rpair, DecodeConfig(proposer="retrieval", k=3, temperature=0.0, max_new_tokens=6))
    dec.start(EXACT_PROMPT)
    tr = dec.step()
    m = tr.matched
    stored = rpair.retrieval_store.tokens.tolist()
    assert list(m.before) == stored[max(0, m.where - AROUND):m.where]
    assert list(m.after) == stored[m.where + len(m.tokens):m.where + len(m.tokens) + AROUND]
    assert ContextMatchModel.model_validate(dataclasses.asdict(m)).after == m.after
    html = kv_stage_html(tr.snapshot("draft"), None, str, trace=tr, phase="draft", proposer="retrieval", lecture=True)
    source = re.search(r"<p class='svkv-source' data-role='retrieval-source'[^>]*>(.*?)</p>", html).group(1)
    assert f"<mark class='svkv-srcm'>{''.join(map(str, m.tokens))}</mark>" in source
    assert f"<span class='svkv-srcnext'>{''.join(map(str, m.after))}</span>" in source
    assert source.count("…") == 2 and "".join(map(str, m.before)) in source
    from specviz import narrative

    said = narrative.phase_markdown(tr, "draft")  # the note ends its own sentence: no 'token(s)..'
    assert "proposing" in said and not re.search(r"\.\.(\s|$)", said), said
    old = dataclasses.replace(tr, matched=dataclasses.replace(m, before=(), after=()))  # an older run file
    assert "retrieval-source" not in kv_stage_html(tr.snapshot("draft"), None, str, trace=old, phase="draft",
                                                   proposer="retrieval")
