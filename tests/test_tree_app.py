"""The app with a token tree (AppTest, tiny pair): the sidebar's tree setting is live like K, the
cycles it runs are trees, the stage's payload carries the tree panel phase by phase, the quiz asks
for the accepted path, and what-if forcing is withdrawn while the width is above 1.
"""

from __future__ import annotations

from test_app import assert_clean, click, kv_views, open_app, open_tab, shown, stage_step


def test_a_tree_setting_runs_tree_cycles_and_the_stage_draws_them():
    at = open_app(tab=None)
    click(at, "next_cycle")
    assert shown(at).traces[-1].tree is None  # the default is the chain
    at.number_input(key="tree_width").set_value(2).run()
    at.number_input(key="tree_nodes").set_value(6).run()
    assert_clean(at)
    assert len(shown(at).traces) == 1  # live, like K: the same run goes on
    click(at, "next_phase")  # the next cycle's draft phase
    tr = shown(at).traces[-1]
    assert tr.tree is not None and tr.tree.width == 2 and len(tr.tree.nodes) <= 6
    picture = kv_views(at)[0]
    assert "data-role='tree'" in picture and "data-role='tree-node'" in picture
    assert "tree-verdict" not in picture and "svkv-drafts" not in picture
    assert "token tree" in stage_step(at)["story"]
    click(at, "next_phase")  # verify: the mask and the verify slots, still no verdict
    picture = kv_views(at)[0]
    assert "data-role='tree-mask'" in picture and "data-role='tree-kv'" in picture and "tree-verdict" not in picture
    click(at, "next_phase", times=3)  # accept, resolve, rollback: the compaction
    picture = kv_views(at)[0]
    assert "Target cache: the compaction" in picture
    assert ("data-role='tree-move'" in picture) == bool(tr.tree.moves)


def test_the_quiz_asks_which_path_and_forcing_is_withdrawn_for_trees():
    at = open_app(tab=None, quiz=True, tree_width=3, tree_nodes=8)
    assert at.toggle(key="whatif").disabled
    assert at.button(key="scenario").disabled
    click(at, "next_phase", times=2)  # draft, verify: the question
    box = at.selectbox(key="quiz_path")
    tr = shown(at).traces[-1]
    assert box.label == "Which path will the target accept?" and len(box.options) == len(tr.tree.nodes) + 1
    assert box.value is None and at.button(key="quiz_submit").disabled  # nothing chosen beforehand
    box.set_value(tr.tree.path[-1] if tr.tree.path else 0).run()
    click(at, "quiz_submit")
    result = shown(at).quiz[-1]
    assert result.marks()[0][0] == "path the target accepts" and result.marks()[0][3]


def test_the_tabs_draw_a_tree_run_and_the_stats_count_tokens_per_verify_pass():
    at = open_app(tab="charts", tree_width=3, tree_nodes=8)
    click(at, "next_cycle", times=2)
    assert all(t.tree is not None for t in shown(at).traces)
    open_tab(at, "stats")
    labels = [m.label for m in at.metric]
    assert "Tokens per verify pass" in labels and "Acceptance rate α" not in labels
    done = shown(at).traces
    value = next(m.value for m in at.metric if m.label == "Tokens per verify pass")
    assert value == f"{sum(len(t.emitted) for t in done) / len(done):.2f}"
    for tab in ("lab", "export", "myths"):
        open_tab(at, tab)
    assert any("siblings share a position" in m.value for m in at.markdown)  # the myths tab lists trees
