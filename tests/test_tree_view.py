"""The token-tree panel (specviz/viz/tree_view.py) as data and HTML, on real tiny-pair tree runs.

* **No spoilers.** The draft phase shows the tree with q only; verify adds p, the mask and the
  verify slots, but no verdict; accept shows every node's verdict exactly as recorded, the winning
  path outlined; resolve adds the corrected or bonus token; a chain cycle or the start phase draws
  no panel.
* **The mask** allows a node exactly its ancestors, itself and the prefix.
* **Slot vs position**: during verify node i's K/V cell sits in column i (entry L+i) and says its
  position L + depth; at rollback the accepted nodes' cells (the same keys) sit in the columns of
  their committed positions -- the moves of the trace, and only those, are marked -- and the other
  columns are stale or freed as the rollback's events say; the no-copy case is said in words.
* **On the stage**: the payload of a tree cycle carries the panel (and not the chain's draft
  columns), every data-key of a picture is unique, the compared layout gets its own slots; the
  standalone page holds the panel in its no-JavaScript sections and the tree script and styles.
"""

from __future__ import annotations

import functools
import re
from collections import Counter

import specviz
from specviz.config import DecodeConfig
from specviz.engine import SpeculativeDecoder
from specviz.replay import replay_run
from specviz.runfile import RunRecord, record_run
from specviz.trace import CYCLE_PHASES
from specviz.viz import stage_data, stage_js, standalone, tree_view

PROMPT_TEXT = "the sky is blue because"
PHASES = CYCLE_PHASES[1:]


@functools.cache
def pair():
    return specviz.build_tiny_pair(seed=0)


@functools.cache
def tree_run(layout: str = "paged", temperature: float = 1.0, seed: int = 0, cycles: int = 3, width: int = 3,
             nodes: int = 10, k: int = 3) -> RunRecord:
    p = pair()
    cfg = DecodeConfig(k=k, tree_width=width, tree_nodes=nodes, temperature=temperature, max_new_tokens=24,
                       seed=seed, cache_layout=layout, page_size=4)
    dec = SpeculativeDecoder(p, cfg)
    ids = p.tokenizer.encode(PROMPT_TEXT)
    dec.start(ids)
    prefill = (dec.target_cache.snapshot(len(ids)), dec.proposer.snapshot(len(ids)))
    traces = []
    while not dec.finished and len(traces) < cycles:
        traces.append(dec.step())
    return record_run("tree", "tiny", "draft", cfg, PROMPT_TEXT, False, ids, prefill, traces,
                      lambda i: p.tokenizer.decode([i]))


def moving_cycle(record: RunRecord):
    found = [t for t in record.traces if t.tree.moves]
    assert found, "the fixture run has no cycle whose K/V move: pick another seed"
    return found[0]


def in_place_cycle():
    for seed in range(12):
        for t in tree_run(seed=seed).traces:
            if t.tree.in_place and t.tree.path and len(t.emitted) > 1:
                return tree_run(seed=seed), t
    raise AssertionError("no tree cycle accepted its first chain in place")


def panel(record: RunRecord, tr, phase: str) -> str:
    return tree_view.tree_panel_html(tr, phase, record.token_text)


def keyed(html: str) -> dict[str, str]:
    """data-key -> the element's opening tag."""
    tags = re.findall(r"<[a-z]+ [^>]*data-key='([^']+)'[^>]*>", html)
    opening = re.findall(r"(<[a-z]+ [^>]*data-key='[^']+'[^>]*>)", html)
    return dict(zip(tags, opening, strict=True))


def column(tag: str) -> int:
    """The verify entry a K/V cell sits in, 1 for the root's (entries wrap into lines: `data-col`)."""
    return int(re.search(r"data-col='(\d+)'", tag).group(1)) + 1


# ---- what each phase reveals ------------------------------------------------------------------------


def test_each_phase_reveals_only_what_it_has_computed():
    rec = tree_run()
    tr = moving_cycle(rec)
    tree = tr.tree
    assert panel(rec, tr, "start") == ""
    draft = panel(rec, tr, "draft")
    assert draft.count("data-role='tree-node'") == len(tree.nodes)
    assert "tree-mask" not in draft and "tree-kv" not in draft and "p 0." not in draft
    verify = panel(rec, tr, "verify")
    assert "data-role='tree-mask'" in verify and "data-role='tree-kv'" in verify
    assert "tree-verdict" not in verify and "svtree-win" not in verify and "Accepted path" not in verify
    for node in tree.nodes:  # each node's p is on screen from verify on
        assert f"p {tree_view.fmt_p(node.target_prob)}" in verify
    accept = panel(rec, tr, "accept")
    shown = re.findall(r"svtree-node (?:svtree-kids )?svtree-v-(\w+)", accept)
    assert Counter(shown) == Counter(n.verdict for n in tree.nodes)
    wins = {int(n) for n in re.findall(r"svtree-win' style='[^']*' data-n='(\d+)'", accept)}
    assert wins == set(tree.path)
    assert "tree-tail" not in accept
    resolve = panel(rec, tr, "resolve")
    last = tr.emitted[-1]
    assert ("data-role='tree-tail'" in resolve) == (last.kind in ("corrected", "bonus"))


def test_a_chain_cycle_draws_no_tree_panel():
    p = pair()
    dec = SpeculativeDecoder(p, DecodeConfig(k=3, temperature=1.0, max_new_tokens=8))
    dec.start(p.tokenizer.encode(PROMPT_TEXT))
    tr = dec.step()
    assert tr.tree is None and tree_view.tree_panel_html(tr, "accept", str) == ""


def test_the_rule_per_node_greedy_and_sampled():
    rec = tree_run()
    tr = moving_cycle(rec)
    accept = panel(rec, tr, "accept")
    for node in tr.tree.nodes:
        if node.verdict != "untested":  # T > 0: u against p′, with the recorded numbers
            sign = "&lt;" if node.verdict == "accepted" else "≥"
            assert f"u {tree_view.fmt_p(node.u)} {sign} p′ {tree_view.fmt_p(node.accept_prob)}" in accept
    greedy = tree_run(temperature=0.0)
    tr0 = greedy.traces[0]
    text = panel(greedy, tr0, "accept")
    assert "= argmax" in text or "≠ argmax" in text
    assert "p′" not in re.sub(r"<p class='svtree-note'>.*?</p>", "", text)  # no p′ per node at T = 0


# ---- the mask ---------------------------------------------------------------------------------------


def test_the_mask_allows_exactly_the_prefix_the_ancestors_and_the_node():
    rec = tree_run()
    tr = moving_cycle(rec)
    html = panel(rec, tr, "verify")
    mask = html[html.index("class='svtree-mask'"):]
    rows = re.findall(r"svtree-mrow[^']*' data-n='(\d+)'>.*?(?=<div class='svtree-mh svtree-mrow|</div></section>)",
                      mask)
    assert [int(r) for r in rows] == list(range(len(tr.tree.nodes) + 1))
    for block in re.split(r"(?=<div class='svtree-mh svtree-mrow)", mask)[1:]:
        i = int(re.search(r"data-n='(\d+)'", block).group(1))
        seen = {int(j) for j in re.findall(r"node \d+ sees node (\d+)", block)}
        assert seen == tree_view.ancestors(tr.tree, i), (i, seen)
        assert block.count("the whole prefix: allowed") == 1


# ---- slot vs position, and the compaction -----------------------------------------------------------


def test_verify_slots_then_the_compaction_moves_the_same_keyed_cells():
    rec = tree_run()
    tr = moving_cycle(rec)
    tree, L, c = tr.tree, tr.tree.root_position, tr.cycle
    verify = keyed(panel(rec, tr, "verify"))
    for node in tree.nodes:
        tag = verify[f"tv{c}-n{node.index}"]
        assert column(tag) == node.index + 1 and f"position {node.position}" in tag
    assert len({n.position for n in tree.nodes}) < len(tree.nodes), "siblings share a position"
    html = panel(rec, tr, "rollback")
    after = keyed(html)
    kept = tree_view.kept_path(tr)
    for i, a in enumerate(kept, start=1):  # node a's K/V now in entry L+i: same key, new column
        assert column(after[f"tv{c}-n{a}"]) == i + 1
    moved = re.findall(r"data-key='tv\d+-n(\d+)' data-n='\d+' data-role='tree-move'", html)
    assert sorted((L + int(a), L + kept.index(int(a)) + 1) for a in moved) == sorted(tree.moves)
    gone = {n.index for n in tree.nodes} - set(kept)
    assert not any(f"tv{c}-n{g}" in after for g in gone)
    freed = {b for e in tr.target_events if e.kind == "free" for b in e.blocks}
    page = tr.snapshot("verify").target.page_size
    slots = [tree.root_slot] + [n.slot for n in tree.nodes]
    for col in range(len(kept) + 1, len(tree.nodes) + 1):
        state = "freed" if slots[col] // page in freed else "stale"
        assert re.search(rf"svtree-kv-{state}' style='[^']*' data-col='{col}'", html), (state, col)
    assert "No re-rotation" in html and f"entry {tree.moves[0][0]} → {tree.moves[0][1]}" in html


def test_the_no_copy_case_is_said_and_nothing_moves():
    rec, tr = in_place_cycle()
    html = panel(rec, tr, "rollback")
    assert "No copy" in html and "data-role='tree-move'" not in html
    after = keyed(html)
    for i in range(1, len(tree_view.kept_path(tr)) + 1):
        assert column(after[f"tv{tr.cycle}-n{i}"]) == i + 1


def test_contiguous_compaction_leaves_stale_entries_not_freed_blocks():
    rec = tree_run(layout="contiguous")
    for tr in rec.traces:
        html = panel(rec, tr, "rollback")
        assert "tree-freed" not in html
        assert html.count("data-role='tree-stale'") == len(tr.tree.nodes) - len(tree_view.kept_path(tr))


# ---- on the stage, the replay and the standalone page -----------------------------------------------


def test_the_stage_payload_carries_the_panel_with_unique_keys():
    rec = tree_run()
    tl = standalone.timeline(rec)
    steps = stage_data.steps_payload(tl, range(tl.last_step + 1), lecture=False, max_rows=None)
    for step, data in steps.items():
        cycle, phase = stage_data.view_of(int(step), tl)
        picture = data["kv"][0]
        has_panel = "class='svtree" in picture
        assert has_panel == (cycle is not None and phase != "start"), (step, phase)
        assert "svkv-drafts" not in picture  # a tree's cycle is not drawn as a chain's columns
        keys = re.findall(r"data-key='([^']+)'", picture)
        assert len(keys) == len(set(keys)), [k for k, n in Counter(keys).items() if n > 1]


def test_a_compared_layout_shows_its_own_verify_slots():
    rec = tree_run()
    other = replay_run(rec, cache_layout="contiguous")
    tl, tl2 = standalone.timeline(rec), standalone.timeline(other)
    verify = CYCLE_PHASES.index("verify")  # step 2: cycle 1's verify (step 0 is the prefill)
    data = stage_data.step_payload(tl, verify, lecture=False, max_rows=None, compare=tl2)
    assert len(data["kv"]) == 2
    second = data["kv"][1]
    assert "data-role='tree-kv'" in second and "data-role='tree-node'" not in second
    for node in other.traces[0].tree.nodes:
        assert f"slot {node.slot}" in second


def test_the_standalone_page_holds_the_panel_the_script_and_the_styles():
    page = standalone.run_html(tree_run())
    sections = page[page.index("<div class='steps'>"):]
    assert sections.count("data-role='tree-kv'") >= 1 and "data-role='tree-move'" in sections
    assert "svTreeLight" in page and ".svtree .svtree-kv" in page
    assert "svTreeLight" in stage_js.app_js() and ".svtree" in stage_js.stage_css()


def test_the_token_strip_shows_a_trees_first_chain_then_its_accepted_path():
    from specviz.viz import tokens

    rec = tree_run()
    tr = moving_cycle(rec)
    traces, prompt = rec.traces, list(rec.prompt_ids)
    base = len(tokens.strip_chips(prompt, traces, rec.token_text, tr.cycle, "start"))
    pending = tokens.strip_chips(prompt, traces, rec.token_text, tr.cycle, "draft")[base:]
    first_chain = [n for n in tr.tree.nodes if n.index == n.depth]  # nodes 1, 2, .. along the first branch
    assert [c.token_id for c in pending] == [n.token_id for n in first_chain]
    assert [c.position for c in pending] == [n.position for n in first_chain]  # one chip per position
    judged = tokens.strip_chips(prompt, traces, rec.token_text, tr.cycle, "accept")[base:]
    assert [c.token_id for c in judged] == [tr.tree.nodes[a - 1].token_id for a in tr.tree.path]
    assert all(c.kind == "accepted" for c in judged)


def test_a_tree_cycle_without_nodes_says_so_in_the_panel_and_the_narrative():
    from specviz import narrative

    p = pair()
    dec = SpeculativeDecoder(p, DecodeConfig(proposer="lookup", k=3, tree_width=2, tree_nodes=6, temperature=0,
                                             max_new_tokens=4))
    dec.start(p.tokenizer.encode("abc xyz qrs"))  # no repeated n-gram: prompt lookup has no continuation
    tr = dec.step()
    assert tr.tree is not None and not tr.tree.nodes and len(tr.emitted) == 1
    html = tree_view.tree_panel_html(tr, "verify", p.tokenizer.decode)
    assert "No token tree this cycle" in html and "tree-node" not in html
    assert "One generated token" in narrative.phase_markdown(tr, "resolve")
