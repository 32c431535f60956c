"""The HTML KV view (specviz/viz/kv_html.py) on real tiny-pair traces, and the colour-blind checks
of its palette (tests/cvd.py)."""

from __future__ import annotations

import functools
import itertools
import re
import struct
import zlib

import cvd
import numpy as np
import pytest
from sample_traces import demo_token_text, demo_traces

from specviz.proposers import registry
from specviz.trace import CYCLE_PHASES, CycleTrace, PhaseSnapshot
from specviz.viz.cache_words import memory_text, no_cache_html, panel_title
from specviz.viz.kv_html import FREE_LIST_SHOWN, FREE_LIST_TAIL
from specviz.viz.kv_html import kv_stage_html as _kv_stage_html
from specviz.viz.markup import esc as esc_attr
from specviz.viz.style import KIND_COLORS, PHASE_TITLES, SLOT_COLORS, show_token

CELL = re.compile(r"<div class='svkv-cell ([^']*)'([^>]*) title='slot (\d+)")
ROW = (r"<div class='svkv-row(?: svkv-ctx)?' data-row='(\d+)'[^>]*>(.*?)</div>"
       r"(?=<div class='svkv-(?:row|gap)[ ']|</div></section>)")


GLOSS = re.compile(r"<abbr class='svs-gloss'[^>]*>([^<]*)</abbr>")


def kv_stage_html(*args, **kwargs) -> str:
    """The picture with the glossary's marks taken out (tests/test_glossary.py checks them): the words
    as the view built them."""
    return GLOSS.sub(r"\1", _kv_stage_html(*args, **kwargs))


@functools.cache
def _pair():
    import specviz

    return specviz.build_tiny_pair(seed=0)


@functools.cache
def run(proposer: str = "draft", prompt: str = "hello world, how are you", cycles: int = 3, **config):
    """(token_text, traces) of real cycles of the tiny pair."""
    import specviz

    cfg = specviz.DecodeConfig(proposer=proposer, max_new_tokens=64, **{"k": 4, "page_size": 4, **config})
    dec = specviz.SpeculativeDecoder(_pair(), cfg)
    dec.start(_pair().tokenizer.encode(prompt))
    return dec.token_text, tuple(dec.step() for _ in range(cycles))


def rejected_trace(**config) -> tuple:
    token_text, traces = run(**config)
    return token_text, next(t for t in traces if t.rejected_at is not None and t.rejected_at < t.k)


def stage(tr: CycleTrace, token_text, phase: str, animate: bool = True, **kw) -> str:
    i = CYCLE_PHASES.index(phase)
    before = tr.snapshot(CYCLE_PHASES[i - 1]) if animate and i else None
    return kv_stage_html(tr.snapshot(phase), before, token_text, trace=tr, phase=phase, proposer=tr.proposer, **kw)


def sections(html: str) -> list[str]:
    """The HTML of each cache's <section>, target first."""
    return re.findall(r"<section class='svkv-cache'.*?</section>", html, flags=re.S)


def cells(section: str) -> dict[int, tuple[set[str], str]]:
    """slot -> (classes, other attributes) of every drawn cell."""
    return {int(slot): (set(cls.split()), attrs) for cls, attrs, slot in CELL.findall(section)}


def states(section: str) -> list[str]:
    """The state of every drawn cell of one cache, in slot order."""
    drawn = cells(section)
    return [next(c[len("svkv-s-"):] for c in drawn[slot][0] if c.startswith("svkv-s-")) for slot in sorted(drawn)]


ROW_OPEN = re.compile(r"<div class='svkv-row(?: svkv-ctx)?' data-row='(\d+)' data-key='[^']*'( data-role='action')?>")


def action_rows(section: str) -> set[int]:
    """The rows of one cache marked as changed by the phase (data-role="action")."""
    return {int(row) for row, action in ROW_OPEN.findall(section) if action}


def row_html(section: str) -> dict[int, str]:
    """row -> its HTML (tag, cells, pointer) up to the next row, gap line or the grid's end."""
    parts = ROW_OPEN.split(section)  # [before, row, action, html, row, action, html, ...]
    return {int(parts[i]): re.split(r"<div class='svkv-gap'|</section>", parts[i + 2])[0]
            for i in range(1, len(parts), 3)}


def without_style(html: str) -> str:
    return re.sub(r"<style>.*?</style>", "", html, flags=re.S)


def cycle_panel(html: str) -> str:
    opening = "<div class='svkv-cycle' data-key='cyc' data-role='drafts'>"
    return html.split(opening, 1)[1] if opening in html else ""


def test_one_row_per_physical_block_with_page_size_cells():
    token_text, tr = rejected_trace()
    html = stage(tr, token_text, "verify", max_rows=100)
    target = tr.snapshot("verify").target
    blocks = max(-(-len(target.slot_positions) // 4), max(target.block_table) + 1)
    sec = sections(html)[0]
    rows = re.findall(ROW, sec, flags=re.S)
    assert [int(r) for r, _ in rows] == list(range(blocks))
    assert all(len(CELL.findall(body)) == 4 for _, body in rows)
    for block in range(blocks):
        tag = f"block {block}<br>logical {target.block_table.index(block)}" if block in target.block_table else \
            f"block {block}<br>free"
        assert tag in sec
    # A block's cells sit in one wrapping line beside its tag: they size to their text, never cut.
    assert ".svkv-cells{display:flex;flex-wrap:wrap" in html and "--cols:4" in sec


def test_every_cell_shows_its_token_by_the_six_character_rule_and_the_whole_text_in_data_token():
    _, tr = rejected_trace()
    long_text = lambda i: f" extraordinarily_long_token_{i}\n<script>alert(1)</script>"  # noqa: E731
    html = stage(tr, long_text, "verify", max_rows=100)
    snap = tr.snapshot("verify").target
    for slot, tok in enumerate(snap.slot_tokens):
        if snap.slot_state(slot) != "free":
            assert f"data-token='␣extraordinarily_long_token_{tok}↵&lt;script&gt;alert(1)&lt;/script&gt;'" in html
    assert "<script" not in html
    shown = re.findall(r"<span class='svkv-tok' data-role='token-text'>([^<]*)</span>", html)
    assert shown and set(shown) - {""} == {"␣extr…"}  # the first 5 characters and "…"
    short = stage(tr, lambda i: " ab\n", "verify", max_rows=100)
    assert "data-role='token-text'>␣ab↵</span>" in short and "…" not in short.replace("⋯", "")


def test_css_font_sizes_are_at_least_14px_and_18px_in_lecture_mode():
    token_text, tr = rejected_trace()
    for lecture in (False, True):
        html = stage(tr, token_text, "accept", lecture=lecture)
        css = re.search(r"<style>(.*?)</style>", html, flags=re.S).group(1)
        sizes = re.findall(r"font-size:([^;}]+)", css)
        assert "font-size:16px" in css and "font-size:clamp(16px,2.05vh,22px)" in css  # lecture: by screen height
        for size in sizes:
            if size.startswith("var("):
                continue  # --svkv-small, checked below
            if size.startswith("clamp("):  # the position number in a cell may be smaller, not under 12 px
                assert int(re.match(r"clamp\((\d+)px", size).group(1)) >= (12 if "1.3vh" in size else 14), size
            elif size.startswith("max("):
                assert int(re.match(r"max\((\d+)px", size).group(1)) >= 14, size
            elif size.endswith("em"):
                assert float(size[:-2]) >= 1.0, size  # of a 16 px (22 px) base
            else:
                assert int(size.rstrip("px")) >= 14, size
        if lecture:  # every max(14px, …) is raised to 18 px in lecture mode, and secondary lines go
            # secondary lines 14-18 px by screen height, token text 15-20 px (≥ 18 px at 1080 px)
            assert "svkv-lecture" in html and "--svkv-small:clamp(14px,1.67vh,18px)" in css
            assert ".svkv-tok{font-size:clamp(15px,1.85vh,20px)" in css
            assert "<p class='svkv-sub'>" not in html
        else:
            assert "<p class='svkv-sub'>" in html


@pytest.mark.parametrize("policy", ["free", "keep"])
def test_rollback_cells_carry_the_stale_and_free_cues_of_the_snapshot(policy):
    token_text, tr = rejected_trace(free_policy=policy, page_size=2, k=5)
    html = stage(tr, token_text, "rollback", max_rows=100)
    for sec, snap in zip(sections(html), (tr.snapshot("rollback").target, tr.snapshot("rollback").draft)):
        drawn = cells(sec)
        for slot, (classes, _) in drawn.items():
            state = snap.slot_state(slot) if slot < snap.capacity else "free"
            assert f"svkv-s-{state}" in classes, (slot, state, classes)
        stale = [s for s in drawn if snap.slot_state(s) == "stale"]
        for slot in stale:  # the struck-through token and the ✕ glyph go with it
            pos = snap.slot_positions[slot]
            assert re.search(rf"title='slot {slot} · position {pos} [^']*'>(<span class='svkv-ptr[^>]*></span>)?"
                             rf"<span class='svkv-meta'><span class='svkv-pos'>{pos}</span>"
                             "<span class='svkv-glyph'>✕", sec)
    target_before, target = tr.snapshot("resolve").target, tr.snapshot("rollback").target
    freed = set(target_before.block_table) - set(target.block_table)
    if policy == "keep":
        assert not freed
    for block in freed:  # a freed block's row says so (an action row), and its chip is in the free list
        sec = sections(html)[0]
        assert f"svkv-tag svkv-tag-free'>block {block}<br>free" in sec and block in action_rows(sec)
        assert f"<span class='svkv-fb' data-key='t-fb{block}'>{block}</span>" in sec


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_action_rows_are_the_rows_the_phase_changed(layout):
    """Motion is the stage's (keyed nodes patched in the browser); the HTML marks the rows a phase
    changed (`data-role="action"`, what the one-screen layout and the tests look for): every row with
    a slot whose state or token changed, and no row drawn exactly as in the phase before."""
    token_text, tr = rejected_trace(cache_layout=layout)
    width = 4 if layout == "paged" else 16
    for i, phase in enumerate(CYCLE_PHASES[1:], start=1):
        now, was = tr.snapshot(phase), tr.snapshot(CYCLE_PHASES[i - 1])
        html, plain_was = stage(tr, token_text, phase, max_rows=100), stage(tr, token_text, CYCLE_PHASES[i - 1],
                                                                              animate=False, max_rows=100)
        plain_now = stage(tr, token_text, phase, animate=False, max_rows=100)
        for sec, a, b, sec_now, sec_was in zip(sections(html), (now.target, now.draft), (was.target, was.draft),
                                                 sections(plain_now), sections(plain_was), strict=True):
            def look(s, slot):
                state = s.slot_state(slot) if slot < s.capacity or layout == "contiguous" else "free"
                return state, (s.slot_tokens[slot] if state != "free" else -1)
            changed = {slot // width for slot in cells(sec) if look(a, slot) != look(b, slot)}
            assert changed <= action_rows(sec), (phase, changed, action_rows(sec))
            same = {r for r, row in row_html(sec_now).items() if row_html(sec_was).get(r) == row}
            assert not same & action_rows(sec), (phase, same & action_rows(sec))
        assert not action_rows(without_style(plain_now))  # nothing to compare with: no action rows
    assert "data-role='action'" not in stage(tr, token_text, "start")  # the cycle's first phase


def test_contiguous_write_pointer_sits_at_the_valid_length():
    token_text, tr = rejected_trace(cache_layout="contiguous")
    html = stage(tr, token_text, "rollback", max_rows=100)
    slot = tr.snapshot("rollback").target.seq_len  # the next write goes there
    assert re.search(rf"data-key='t-s{slot}'[^>]*><span class='svkv-ptr' data-key='t-ptr'", sections(html)[0])
    assert sections(html)[0].count("svkv-ptr") == 1
    assert "rows of 16" not in html and "--cols:16" in html


def test_no_spoilers_in_the_cycle_panel():
    token_text, tr = rejected_trace()
    panel = {phase: cycle_panel(stage(tr, token_text, phase)) for phase in CYCLE_PHASES}
    assert panel["start"] == ""
    for phase in ("draft", "verify"):
        assert "q(d) = " in panel[phase]
        assert "svkv-verdict" not in panel[phase] and "u = " not in panel[phase] and "min(1, p/q)" not in panel[phase]
    assert "p(d) = " not in panel["draft"] and "p(d) = " in panel["verify"]
    for phase in ("accept", "resolve", "rollback"):
        assert "svkv-v-rejected" in panel[phase] and "✗" in panel[phase] and "min(1, p/q)" in panel[phase]
    assert "svkv-k-corrected" in panel["resolve"] and "svkv-k-corrected" not in panel["accept"]


def test_greedy_says_q_is_one_hot():
    token_text, (tr, *_) = run(temperature=0.0, cycles=1)
    panel = cycle_panel(stage(tr, token_text, "accept"))
    assert "q(d) = 1 (one-hot)" in panel and "svkv-bar-q" not in panel and "svkv-verdict" in panel


@pytest.mark.parametrize("proposer", ["draft", "feature"])
def test_slots_at_draft_positions_are_linked_to_the_draft_columns(proposer):
    token_text, tr = rejected_trace(proposer=proposer, prompt="abcabcabcab")
    html = stage(tr, token_text, "verify", max_rows=100)
    shift = 1 if proposer == "feature" else 0  # a head's entry p holds the token at p+1
    for sec, snap, s in zip(sections(html), (tr.snapshot("verify").target, tr.snapshot("verify").draft), (0, shift)):
        for slot, (classes, attrs) in cells(sec).items():
            pos, tok = snap.slot_positions[slot] if slot < len(snap.slot_positions) else -1, -1
            tok = snap.slot_tokens[slot] if slot < len(snap.slot_tokens) else -1
            d = next((d.index for d in tr.drafts if pos + s == d.position and tok == d.token_id), None)
            if "svkv-s-free" in classes:
                d = None
            assert (f"data-d='{d}' tabindex='0'" in attrs) if d else ("data-d" not in attrs), (slot, attrs)
    target_d = {int(x) for x in re.findall(r"data-d='(\d+)'", sections(html)[0])}
    assert target_d == {d.index for d in tr.drafts}  # the verify pass wrote every draft's K/V
    for d in tr.drafts:
        assert f"<div class='svkv-draft' data-d='{d.index}' data-key='d{d.index}' tabindex='0'>" in html
        for state, kind in itertools.product(("hover", "focus"), (".svkv-cell", ".svkv-draft")):
            assert f'.svkv:has([data-d="{d.index}"]:{state}) {kind}[data-d="{d.index}"]' in html


def test_long_context_windows_around_the_action():
    token_text, (_, tr) = run(prompt="the quick brown fox jumps over the lazy dog. " * 3, cycles=2, k=5)
    html = stage(tr, token_text, "verify", max_rows=5)
    sec = sections(html)[0]
    snap = tr.snapshot("verify").target
    provisional_blocks = {s // 4 for s in range(len(snap.slot_positions)) if snap.slot_state(s) == "provisional"}
    shown = {int(r) for r in re.findall(r"data-row='(\d+)'", sec)}
    assert provisional_blocks and provisional_blocks <= shown and len(shown) <= max(5, len(provisional_blocks) + 1)
    hidden = re.findall(r"⋯ blocks? (\d+)(?:–(\d+))? hidden: (\d+) committed positions?", sec)
    assert hidden
    for start, end, count in hidden:
        rows = range(int(start), int(end or start) + 1)
        assert not set(rows) & shown
        assert int(count) == sum(snap.slot_state(b * 4 + o) == "committed" for b in rows for o in range(4))
    overview = re.search(r"<div class='svkv-ov'.*?</div>", sec).group(0)
    n_rows = max(-(-len(snap.slot_positions) // 4), max(snap.block_table) + 1)
    assert overview.count("svkv-ovc") == n_rows and overview.count("svkv-ov-shown") == len(shown)
    assert "svkv-ov" not in without_style(stage(tr, token_text, "verify", max_rows=1000))


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_prompt_lookup_draws_the_target_alone(layout):
    token_text, (tr, *_) = run(proposer="lookup", prompt="abcabcabcab", cycles=1, k=3, cache_layout=layout)
    assert tr.k == 3 and all(s.draft is None for s in tr.snapshots)
    start = tr.snapshot("start")
    prefill = kv_stage_html(PhaseSnapshot("prefill", start.target, None), None, token_text, trace=None,
                            phase="prefill", proposer="lookup")
    for html in [stage(tr, token_text, phase) for phase in CYCLE_PHASES] + [prefill]:
        # one cache (the target's), the words saying why there is no second one, no proposer title
        opening = "<section class='svkv-cache' data-key='t-cache' aria-label='Target cache'>"
        assert len(sections(html)) == 1 and sections(html)[0].startswith(opening)
        assert f"<div class='svkv-nocache'>{no_cache_html('lookup')}</div>" in html
        assert "Prompt lookup keeps no draft cache" in html
        assert not any(e.cache_title in html for e in registry.entries() if e.has_cache)
        assert "target only" in html and "Prompt lookup keeps no draft cache." in html  # aria-label, description


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
@pytest.mark.parametrize("phase", CYCLE_PHASES)
def test_the_view_shows_its_phase_and_has_no_timeline_of_its_own(layout, phase):
    """The page picks the phase; the picture draws exactly that phase's snapshots under its title,
    with no play button, slider or script of its own that could drift from the page."""
    _, (tr, *_) = demo_traces(layout=layout)
    html = stage(tr, demo_token_text, phase, max_rows=100)
    title = f"Cycle {tr.cycle + 1} · {PHASE_TITLES[phase]}"
    assert re.findall(r"<div class='svkv-phase'>(.*?)</div>", html) == [esc_attr(title)]
    assert f"aria-label='KV caches, {esc_attr(title)}: target and proposer'" in html
    snap = tr.snapshot(phase)
    for sec, cache in zip(sections(html), (snap.target, snap.draft), strict=True):
        drawn = cells(sec)
        assert drawn and all(f"svkv-s-{cache.slot_state(slot)}" in cls for slot, (cls, _) in drawn.items())
    assert not re.search(r"<(button|input|select|script)\b|svkv-slider|onclick", without_style(html))


def test_provisional_append_and_rollback_on_the_demo_cycle():
    """K = 5 drafts, 3 accepted, page size 4, a 10-token prompt (the demo's exact bookkeeping)."""
    _, (tr,) = demo_traces(accepted_counts=(3,), k=5, prompt_len=10, page_size=4)
    drawn = {phase: [states(sec) for sec in sections(stage(tr, demo_token_text, phase, max_rows=100))]
             for phase in CYCLE_PHASES}
    target = {phase: two[0] for phase, two in drawn.items()}
    # verify appends K+1 = 6 entries (positions 9..14): x_n's is committed (x_n is), the 5 drafts' provisional
    assert target["start"].count("provisional") == 0
    assert target["verify"].count("provisional") == 5
    assert target["verify"].count("committed") == target["start"].count("committed") + 1
    # rollback: rejection at d4 drops d4, d5; nothing provisional remains, and positions 13, 14 stay
    # in their (still used) block as stale slots
    after = target["rollback"]
    assert (after.count("provisional"), after.count("committed"), after.count("stale")) == (0, 13, 2)
    # the draft cache: catch-up x_n + d1..d4 fed, d5 never fed -> 4 provisional
    assert drawn["draft"][1].count("provisional") == 4
    # what the verify pass wrote is what the action rows hold: x_n's K/V and the 5 drafts'
    sec = sections(stage(tr, demo_token_text, "verify", max_rows=100))[0]
    snap = tr.snapshot("verify").target
    wrote = {slot for slot, pos in enumerate(snap.slot_positions) if snap.slot_state(slot) != "free" and pos >= 9}
    new = [next(c for c in cls if c.startswith("svkv-s-")) for slot, (cls, _) in cells(sec).items() if slot in wrote]
    assert sorted(new) == ["svkv-s-committed"] + ["svkv-s-provisional"] * 5


@pytest.mark.parametrize("policy", ["free", "keep"])
def test_block_table_tags_and_free_list_on_the_demo_cycle(policy):
    """Everything drafted is rejected (K = 5): verify took a 4th block (logical 3), rollback gives it
    back to the pool with policy "free" and keeps it reserved with "keep"."""
    _, (tr,) = demo_traces(accepted_counts=(0,), k=5, prompt_len=10, page_size=4, policy=policy)
    tag = re.compile(r"<div class='svkv-tag[^']*'>block (\d+)<br>(logical \d+|free)</div>")
    for phase in ("verify", "rollback"):
        sec, snap = sections(stage(tr, demo_token_text, phase, max_rows=100))[0], tr.snapshot(phase).target
        tags = dict(tag.findall(sec))
        assert {int(b): t for b, t in tags.items() if t != "free"} == {
            b: f"logical {i}" for i, b in enumerate(snap.block_table)}
        assert ("logical 3" in tags.values()) == (phase == "verify" or policy == "keep")
        assert f"block_table [{', '.join(map(str, snap.block_table))}]" in sec and f"policy {policy}" in sec
        free = re.search(r"<div class='svkv-free' data-key='t-free'>(.*?)</div>", sec).group(1)
        assert f"free list ({snap.num_free_blocks} of {snap.num_blocks} blocks)" in free
        # a long free list keeps its head (handed out next) and its tail (where freed blocks return)
        shown = [int(b) for b in re.findall(r"<span class='svkv-fb'[^>]*>(\d+)</span>", free)]
        head, tail = list(snap.free_blocks[:FREE_LIST_SHOWN]), list(snap.free_blocks[-FREE_LIST_TAIL:])
        assert len(snap.free_blocks) > FREE_LIST_SHOWN + FREE_LIST_TAIL and shown == head + tail
        assert f"… {len(snap.free_blocks) - len(shown)} more …" in free
    freed = "<span class='svkv-fb' data-key='t-fb3'>3</span>"
    assert (freed in stage(tr, demo_token_text, "rollback")) == (policy == "free")


def test_proposer_panel_is_captioned_by_proposer():
    token_text, (tr, *_) = run(cycles=1)
    sec = sections(stage(tr, token_text, "draft"))[1]
    assert sec.startswith(f"<section class='svkv-cache' data-key='p-cache' aria-label='{panel_title('draft')}'>")
    assert f"<h3 class='svkv-title'>{panel_title('draft')} <span" in sec
    token_text, (tr, *_) = run(proposer="feature", prompt="abcabcabcab", cycles=1)
    head = tr.snapshot("draft").draft
    # d2..dK were fed the head's PREDICTED features: K-1 entries, drawn provisional
    assert head.seq_len - head.num_committed == tr.k - 1 == 3
    sec = sections(stage(tr, token_text, "draft", max_rows=100))[1]
    assert f"<h3 class='svkv-title'>{esc_attr(panel_title('feature'))} <span" in sec
    assert f"({head.num_committed} from real features + 3 from predicted features)" in sec
    assert states(sec).count("provisional") == 3
    # each entry says what it pairs: the feature at p and the token at p+1
    tips = re.findall(r"title='slot \d+ · entry (\d+): feature at (\d+) \+ token at (\d+) ·", sec)
    assert len(tips) == head.seq_len and all(int(a) == int(b) == int(c) - 1 for a, b, c in tips)
    assert "· position " not in sec
    after = sections(stage(tr, token_text, "rollback", max_rows=100))[1]
    assert states(after).count("provisional") == 0 and "(all from real features)" in after


def test_each_cache_heading_reports_allocated_held_and_valid_memory():
    """Each cache's heading states its KV memory from the snapshot: allocated >= held >= valid,
    valid = positions ever read x bytes per position (issue 10: memory that fits the run)."""
    token_text, (tr, *_) = run(cycles=1)
    snap = tr.snapshot("rollback")
    html = stage(tr, token_text, "rollback")
    for sec, cache in zip(sections(html), (snap.target, snap.draft), strict=True):
        assert cache.bytes_per_slot > 0
        assert cache.allocated_bytes >= cache.held_bytes >= cache.valid_bytes == cache.seq_len * cache.bytes_per_slot
        want = memory_text(cache)
        assert want.startswith("KV ") and "allocated" in want and "held" in want and "valid" in want
        assert want in re.search(r"<p class='svkv-sub'>(.*?)</p>", sec).group(1)
    assert "MiB allocated" not in stage(tr, token_text, "rollback", lecture=True)  # secondary lines go


def test_prefill_view_and_text_alternative():
    token_text, (tr, *_) = run(cycles=1)
    start = tr.snapshot("start")
    html = kv_stage_html(PhaseSnapshot("prefill", start.target, start.draft), None, token_text, trace=None,
                         phase="prefill", proposer="draft")
    assert re.findall(r"<div class='svkv-phase'>(.*?)</div>", html) == ["Prefill"]
    assert all("<p class='svkv-ev'>prefill of the prompt</p>" in sec for sec in sections(html))
    body = without_style(html)
    assert len(sections(html)) == 2 and "svkv-cycle" not in body and "data-role='action'" not in body
    assert html.startswith("<div class='svkv' role='figure' aria-label='KV caches")
    assert "<style>" in html and "Describe this picture" in html and "<p class='svkv-sr'>" in html
    t = start.target
    committed = sum(t.slot_state(s) == "committed" for s in range(len(t.slot_positions)))
    assert f"Target cache (paged): length {t.seq_len}; {committed} committed, 0 provisional" in html
    assert f"free list [{', '.join(map(str, t.free_blocks))}]" in html
    css = re.search(r"<style>(.*?)</style>", html, flags=re.S).group(1)
    selectors = [rule.split("{")[0] for rule in re.findall(r"[^{}]+\{[^{}]*\}", css.replace("\n", ""))]
    assert all(s.strip().startswith((".svkv", "from", "to", "70%")) for s in selectors), selectors


# ---- colour-blind safety ----------------------------------------------------------------------------

# ΔE76 ≥ 20: about ten just-noticeable differences — a difference people name ("blue" vs "orange")
# on small patches across a room, not one they find side by side on a good monitor.
MIN_DELTA_E = 20
VERDICTS = ("accepted", "rejected", "corrected", "bonus")
OLD_KIND_COLORS = {"accepted": "#54a24b", "rejected": "#e45756", "corrected": "#f58518", "bonus": "#b279a2"}


def _palettes(slots: dict[str, str], kinds: dict[str, str]) -> list[dict[str, str]]:
    return [slots, {k: kinds[k] for k in VERDICTS}]


def _worst(palettes: list[dict[str, str]]) -> float:
    return min(cvd.worst_pair(p, d)[0] for p in palettes for d in (None, *cvd.DEFICIENCIES))


def test_palette_stays_distinguishable_under_deuteranopia_and_protanopia():
    for palette in _palettes(SLOT_COLORS, KIND_COLORS):
        for deficiency in (None, *cvd.DEFICIENCIES):
            for a, b in itertools.combinations(palette, 2):
                seen = [cvd.simulate(palette[x], deficiency) if deficiency else palette[x] for x in (a, b)]
                assert cvd.delta_e(*seen) >= MIN_DELTA_E, (deficiency, a, b)
    old_slots = {"free": "#eef0f4", "committed": "#4c78a8", "provisional": "#f2b134", "stale": "#d9a3a3"}
    assert _worst(_palettes(old_slots, OLD_KIND_COLORS)) < MIN_DELTA_E  # the test can fail: the old one did
    assert cvd.worst_pair(OLD_KIND_COLORS, "deuteranopia")[1:] == ("accepted", "rejected")


def test_machado_simulation_known_values():
    # Pure red and green collapse towards the same olive for a deuteranope; white and grey stay.
    assert cvd.delta_e(cvd.simulate("#ff0000", "deuteranopia"), cvd.simulate("#00ff00", "deuteranopia")) < \
        cvd.delta_e("#ff0000", "#00ff00") / 3
    for d in cvd.DEFICIENCIES:
        assert cvd.simulate("#ffffff", d) == "#ffffff" and cvd.simulate("#000000", d) == "#000000"
    assert cvd.delta_e("#ffffff", "#000000") == pytest.approx(100, abs=0.01)
    image = np.array([[[255, 0, 0, 255], [0, 0, 255, 128]]], dtype=np.uint8)
    sim = cvd.simulate_image(image, "protanopia")
    assert sim[0, 0, :3].tolist() == [int(cvd.simulate("#ff0000", "protanopia")[i : i + 2], 16) for i in (1, 3, 5)]
    assert sim[..., 3].tolist() == [[255, 128]]


def _png_with_filters(pixels: np.ndarray) -> bytes:
    """An RGB PNG whose scanlines use filters 0..4 in turn (as a browser's encoder may)."""
    h, w, c = pixels.shape
    rows, prev = [], np.zeros(w * c, dtype=np.int64)
    for y in range(h):
        line, kind = pixels[y].reshape(-1).astype(np.int64), y % 5
        left = np.concatenate([np.zeros(c, np.int64), line[:-c]])
        up_left = np.concatenate([np.zeros(c, np.int64), prev[:-c]])
        if kind == 1:
            pred = left
        elif kind == 2:
            pred = prev
        elif kind == 3:
            pred = (left + prev) // 2
        elif kind == 4:
            p = left + prev - up_left
            pa, pb, pc = abs(p - left), abs(p - prev), abs(p - up_left)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, up_left))
        else:
            pred = np.zeros_like(line)
        rows.append(bytes([kind]) + ((line - pred) % 256).astype(np.uint8).tobytes())
        prev = line

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))


def test_png_round_trip_and_every_filter(tmp_path):
    rng = np.random.default_rng(0)
    for channels in (3, 4):
        pixels = rng.integers(0, 256, size=(9, 7, channels), dtype=np.uint8)
        cvd.write_png(tmp_path / "a.png", pixels)
        assert np.array_equal(cvd.read_png(tmp_path / "a.png"), pixels)
    pixels = rng.integers(0, 256, size=(10, 6, 3), dtype=np.uint8)
    (tmp_path / "f.png").write_bytes(_png_with_filters(pixels))
    assert np.array_equal(cvd.read_png(tmp_path / "f.png"), pixels)
    (tmp_path / "bad.png").write_bytes(b"GIF89a")
    with pytest.raises(ValueError):
        cvd.read_png(tmp_path / "bad.png")


def test_lecture_mode_shows_p_against_q_at_accept_and_the_residual_at_resolve():
    """Lecture mode has no Distributions tab: at the acceptance tests a sixth card sets p against q at
    the first rejection, and at resolve the corrected token's card shows the top of the residual it was
    drawn from (the token itself always among them, in bold)."""
    token_text, tr = rejected_trace()
    d = tr.drafts[tr.rejected_at - 1]
    accept = cycle_panel(stage(tr, token_text, "accept", lecture=True))
    assert "svkv-pq" in accept and f"at d{d.index}" in accept and accept.count("svkv-mbar-q'") >= 1
    assert "svkv-pq" not in cycle_panel(stage(tr, token_text, "accept"))  # the tab has the charts
    resolve = cycle_panel(stage(tr, token_text, "resolve", lecture=True))
    chosen = re.findall(r"<span class='svkv-mtok svkv-mchosen'[^>]*>([^<]*)</span>", resolve)
    assert "svkv-pq" not in resolve and chosen == [esc_attr(show_token(tr.corrected_token.text, 6))]
    assert "svkv-mbar-r" in resolve
