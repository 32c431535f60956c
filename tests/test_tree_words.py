"""Token-tree cycles in words and figures: the narrative, the misconceptions, the quiz, the
statistics and the CLI, each checked against the numbers of real tiny-pair tree traces.

The narrative must quote the trace (each asked node's u and p′ at T > 0, its argmax match at
T = 0, the shared positions, the moves or the no-copy case, the freed blocks), never the chain's
words (no "min(1, p/q)", no "d5 never tested"); the quiz asks for the accepted path and scores it
from the walk; the statistics keep tree nodes out of α; the CLI prints the tree.
"""

from __future__ import annotations

import io
import re

from test_tree_view import in_place_cycle, moving_cycle, tree_run

from specviz import cli, narrative
from specviz.stats import acceptance_stats, measured_speedup
from specviz.trace import CYCLE_PHASES
from specviz.ui import quiz
from specviz.viz.style import fmt_p


def words(tr, phase: str) -> str:
    return narrative.phase_markdown(tr, phase)


# What only a tree's words say, per phase (one of them where there are alternatives).
TREE_WORDS = {
    "start": ("drafts a **token tree**",), "draft": ("grows a token tree",), "verify": ("entry ≠ position",),
    "accept": ("Greedy walk", "Deterministic siblings"), "resolve": ("from one verify pass",),
    "rollback": ("**Compaction.**", "**No copy needed.**"),
}


def test_every_phase_of_a_tree_cycle_has_tree_words_not_chain_words():
    rec = tree_run()
    for tr in rec.traces:
        for phase in CYCLE_PHASES:
            text = words(tr, phase)
            assert any(mark in text for mark in TREE_WORDS[phase]), (phase, text)
            assert "min(1, p/q)" not in text and "K−j+1" not in text and "never tested" not in text, (phase, text)


def test_verify_names_slots_positions_and_a_pair_of_siblings():
    tr = moving_cycle(tree_run())
    tree, L = tr.tree, tr.tree.root_position
    text = words(tr, "verify")
    assert f"entries {L}–{L + len(tree.nodes)}" in text and "entry ≠ position" in text
    pair = re.search(r"nodes (\d+) and (\d+) both run at position (\d+), in entries (\d+) and (\d+)", text)
    a, b, pos, ea, eb = map(int, pair.groups())
    assert tree.nodes[a - 1].position == tree.nodes[b - 1].position == pos and (ea, eb) == (L + a, L + b)
    verify = tr.snapshot("verify").target
    assert f"→ **{verify.seq_len}**" in text


def test_accept_quotes_each_asked_node_and_the_path():
    tr = moving_cycle(tree_run())
    text = words(tr, "accept")
    assert "q never enters the test" in text
    for node in tr.tree.nodes:
        line = f"{node.index} `{node.text}`: u = {fmt_p(node.u)}" if node.u is not None else None
        assert (line is not None and line in text) == (node.verdict != "untested"), node
    assert " → ".join(f"node {a}" for a in tr.tree.path) in re.sub(r" `[^`]*`", "", text)
    greedy = tree_run(temperature=0.0).traces[0]
    text0 = words(greedy, "accept")
    assert "Greedy walk" in text0 and "u =" not in text0
    asked = [n for n in greedy.tree.nodes if n.verdict != "untested"]
    assert all(("is the argmax" if n.verdict == "accepted" else "is not the argmax") in text0 for n in asked)


def test_resolve_and_rollback_tell_the_moves_and_the_blocks():
    tr = moving_cycle(tree_run())
    resolve = words(tr, "resolve")
    assert f"commits **{len(tr.emitted)}** token(s)" in resolve
    text = words(tr, "rollback")
    for src, dst in tr.tree.moves:
        assert f"entry {src} → {dst}" in text
    assert "No re-rotation" in text and "increasing order" in text
    freed = [b for e in tr.target_events if e.kind == "free" for b in e.blocks]
    if freed:
        assert str(sorted(freed)) in text or str(freed) in text
    after = tr.snapshot("rollback").target.seq_len
    assert f"→ **{after}**" in text and "the invariant is broken" not in text
    rec, still = in_place_cycle()
    assert "No copy needed" in words(still, "rollback") and "No re-rotation" not in words(still, "rollback")


def test_the_tree_misconceptions_are_listed():
    text = narrative.misconceptions_markdown()
    for needle in ("siblings share a position", "**moves** them", "No re-rotation is needed", "q never enters it"):
        assert needle in text, needle


def test_the_quiz_asks_for_the_path_and_scores_it():
    tr = moving_cycle(tree_run())
    truth = quiz.truth(tr)
    assert truth.path_end == tr.tree.path[-1] and len(truth.path_labels) == len(tr.tree.nodes) + 1
    right = quiz.answer(tr, 0, [], truth.freed, path_end=truth.path_end)
    wrong = quiz.answer(tr, 0, [], truth.freed, path_end=(truth.path_end + 1) % len(truth.path_labels))
    assert right.marks()[0][0] == "path the target accepts" and right.marks()[0][3]
    assert not wrong.marks()[0][3] and right.score[0] == wrong.score[0] + 1
    assert all(q != "positions dropped from the target cache" for q, *_ in right.marks())


def test_statistics_keep_tree_nodes_out_of_alpha():
    rec = tree_run()
    st = acceptance_stats(rec.traces)
    assert st.tree_cycles == len(rec.traces) and st.tested == 0 and st.chain_cycles == 0
    assert st.tree_nodes == sum(len(t.tree.nodes) for t in rec.traces)
    assert st.tree_path_tokens == sum(len(t.tree.path) for t in rec.traces)
    assert st.tokens_per_cycle == sum(len(t.emitted) for t in rec.traces) / len(rec.traces)
    report = measured_speedup(rec.traces, 10.0)
    assert report.theoretical_speedup is None and report.tree_cycles == len(rec.traces)
    assert "tokens per verify pass" in narrative.explain_speedup(report)


def test_the_cli_prints_the_tree_per_cycle():
    tr = moving_cycle(tree_run())
    text = cli.format_cycle(tr)
    assert f"a token tree of {tr.k} nodes" in text
    assert sum(1 for line in text.splitlines() if line.startswith("tree    ") and "pos " in line) == len(tr.tree.nodes)
    assert "compact K/V moved: " + ", ".join(f"entry {a} -> {b}" for a, b in tr.tree.moves) in text
    out = io.StringIO()
    args = cli.build_parser().parse_args(["walk", "--tiny", "--k", "2", "--tree-width", "2", "--tree-nodes", "4",
                                          "--cycles", "1", "--temperature", "0"])
    assert cli.walk(args, out) == 0 and "path tokens from" in out.getvalue() and "tree    ├─" in out.getvalue()
