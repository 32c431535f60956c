"""The merged proposer feature+lookup (specviz/proposers/feature_lookup.py): who drafts, and the marks.

Which source drafts a chain is decided before anything is drafted, by the match length `match`
reports: a copy after 2 or more matching tokens, the feature head otherwise (a 1-token match
included). Exactness for it is tested with every proposer (greedy equality, the cache invariant,
trees: test_proposers.py, test_tree_engine.py, test_kv_growth.py) and by chi-square
(test_exactness.py); here: the rule, the sources each draft and tree node carries, and what the
views draw of them.
"""

from __future__ import annotations

import re

import pytest
from engine_helpers import assert_invariant, make_pair

from specviz import DecodeConfig, SpeculativeDecoder
from specviz.narrative import phase_markdown
from specviz.proposers.feature_lookup import MIN_COPY_MATCH, copy_trust
from specviz.viz.kv_html import kv_stage_html
from specviz.viz.tree_view import tree_panel_html

COPYING = [5, 6, 7, 8, 9, 5, 6, 7]  # its last 3 tokens occurred before: lookup copies [8, 9, 5]
GUESSING = [9, 1, 2, 3, 4, 5, 6, 7, 8, 9]  # only its last token occurred before: the head drafts


@pytest.fixture(scope="module")
def pair():
    return make_pair("llama")


def first_cycle(pair, prompt: list[int], **shape):
    cfg = DecodeConfig(proposer="feature+lookup", temperature=0.0, max_new_tokens=8, check_invariant=True,
                       **({"k": 3} | shape))
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(prompt)
    return dec, dec.step()


def test_a_long_match_is_copied_and_a_short_one_left_to_the_head(pair):
    assert MIN_COPY_MATCH == 2
    dec, copied = first_cycle(pair, COPYING)
    assert [d.token_id for d in copied.drafts] == [8, 9, 5]
    assert {d.source for d in copied.drafts} == {"prompt lookup"}
    assert all(d.draft_prob == 1.0 for d in copied.drafts)  # a copy is one-hot
    assert copied.proposer_note.startswith("prompt lookup: the last 3 token(s)")
    assert dec.proposer.match(COPYING, 3) == (3, 3)
    told = phase_markdown(copied, "draft")  # the narrative tells the copy, not the head's mechanism
    assert told.startswith("**Prompt lookup proposes.** No model runs") and "feature head is not run" in told
    assert "catch-up" not in told
    assert_invariant(dec)

    dec, guessed = first_cycle(pair, GUESSING)
    assert guessed.drafts and {d.source for d in guessed.drafts} == {"feature head"}
    assert guessed.proposer_note.startswith("feature head (the last 2+ tokens occur nowhere earlier)")
    assert dec.proposer.match(GUESSING, 3) == (0, 3)  # class 0: the head drafts (lookup alone: a 1-token match)
    assert guessed.catch_up  # the head caught up on the pairs it lacked
    assert "catch-up" in phase_markdown(guessed, "draft")
    html = kv_stage_html(guessed.snapshot("draft"), None, str, trace=guessed, phase="draft", proposer="feature+lookup")
    assert html.count("data-role='draft-source'>from feature head<") == len(guessed.drafts)
    assert_invariant(dec)


def test_a_copied_cycle_leaves_the_heads_cache_to_catch_up_later(pair):
    """A copy feeds the head nothing; the next cycle the head drafts in, it catches up on every pair
    it missed, from the verify passes' real features, and its cache equals a fresh prefill."""
    cfg = DecodeConfig(proposer="feature+lookup", k=3, temperature=1.0, seed=4, max_new_tokens=40)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(COPYING + [1, 2, 3, 4, 5, 6, 7])
    seen = []
    while not dec.finished:
        trace = dec.step()
        seen.append({d.source for d in trace.drafts})
        assert_invariant(dec)  # after every cycle, whoever drafted
    copied = [i for i, s in enumerate(seen) if s == {"prompt lookup"}]
    assert copied and any(seen[j] == {"feature head"} for i in copied for j in range(i + 1, len(seen))), seen


def test_a_merged_tree_marks_the_copied_branches(pair):
    dec, tr = first_cycle(pair, COPYING, k=3, tree_width=2, tree_nodes=8)
    sources = [d.source for d in tr.drafts]
    assert set(sources) <= {"feature head", "prompt lookup", "feature head + prompt lookup"}
    assert {"prompt lookup", "feature head + prompt lookup"} & set(sources)  # the copy made it into the tree
    assert "merged with prompt lookup's trie" in tr.proposer_note
    html = tree_panel_html(tr, "draft", str)
    marks = re.findall(r"data-n='(\d+)'[^>]*>(?:<span class='svtree-id'>\d+</span>)"
                       r"(?:<span class='svtree-src' data-role='tree-source'>([^<]*)</span>)?", html)
    want = {"prompt lookup": "L", "feature head + prompt lookup": "L+F", "feature head": ""}
    assert [(int(n), mark) for n, mark in marks] == [(d.index, want[d.source]) for d in tr.drafts]
    assert "L: a branch prompt lookup copied" in html
    assert_invariant(dec)


def test_a_copy_is_trusted_as_its_match_length_measured():
    assert copy_trust(2) == pytest.approx(0.55) and copy_trust(3) == copy_trust(8) == pytest.approx(0.85)
