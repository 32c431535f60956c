"""The KV caches as lecture-grade HTML: one block per row, each token readable, keyed for motion.

The paged layout is drawn as its pool (each row a physical block tagged with its logical index in
the `block_table`, or "free", under the free list); the contiguous layout as one buffer in rows of
16 slots with the write pointer. A slot is committed, provisional, stale or free, each with a
pattern and a glyph besides its colour. Below the caches a chain's cycle panel shows each draft's
q, p, min(1, p/q), u and verdict as its phase reveals them. Every persisting node carries a stable
`data-key` for the stage's motion; `before` only marks the rows this phase changed
(`data-role="action"`). Why it looks this way (text not a chart, side by side or stacked, linked
hover without script, long contexts, the text alternative): docs/design.md §3, "The KV picture".
Its words are viz/cache_words.py, its palette viz/style.py, its stylesheet static/kv.css.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from ..proposers import registry
from ..timeline import VERDICT_GLYPHS
from ..timeline import phase_index as _step
from ..trace import CacheSnapshot, ContextMatch, CycleTrace, DraftStep, PhaseSnapshot, TokenProb
from .cache_words import events_text, memory_text, no_cache_html, panel_title
from .glossary import explain
from .markup import esc
from .static_files import read_static
from .style import KIND_COLORS, PHASE_TITLES, SLOT_COLORS, SLOT_TEXT_COLORS, fmt_p, show_token

TokenText = Callable[[int], str]
CONTIGUOUS_ROW = 16  # slots per drawn row of a contiguous buffer
MAX_ROWS, MAX_ROWS_LECTURE = 20, 12  # rows per cache before the view windows around the action
# A lecture stage draws the action rows and at most two rows of context (the rest in the overview strip):
# the app's lecture mode and the standalone page's lecture layout (docs/design.md §3, "One screen").
LECTURE_ROWS = 3
# Drawing is bounded by what is shown, not by what a snapshot claims: at most this many rows where
# something happens (a 128-node tree at page size 1 changes 129), and an overview of at most this many cells.
HOT_ROWS_MAX, OVERVIEW_MAX = 160, 256
FREE_LIST_SHOWN, FREE_LIST_TAIL = 16, 6  # free-list entries drawn from its head and its tail; the rest are counted
MIN_CELL_EM = 3.0  # the narrowest legible cell (in em of the cell text) for the side-by-side decision
TAG_EM = 6.5
CELL_CHARS = 6  # a cell shows a token whole up to this many characters (display form), else 5 and '…'
GLYPHS = {"provisional": "P", "stale": "✕", "committed": "", "free": ""}
STATE_ORDER = ("committed", "provisional", "stale", "free")


def kv_stage_html(now: PhaseSnapshot, before: PhaseSnapshot | None, token_text: TokenText, *, trace: CycleTrace | None,
                  phase: str, proposer: str, lecture: bool = False, max_rows: int | None = None,
                  inline_css: bool = True) -> str:
    """Both caches at `now`, the cycle panel for `trace` at `phase`, a legend and a text
    description, as one HTML fragment (with its stylesheet unless `inline_css=False`). `before`,
    the step shown before, marks the rows this phase changed (`data-role="action"`)."""
    rows_cap = max_rows or (MAX_ROWS_LECTURE if lecture else MAX_ROWS)
    entries = registry.get(proposer).cache_token_offset == 1  # entry p pairs F[p] with x[p+1]
    drafted = trace is not None and _step(phase) >= _step("draft")
    drafts = trace.drafts if drafted else ()
    panels = [
        _Cache("Target cache", now.target, _same_shape(before and before.target, now.target),
               _events(trace, "target", phase, now.target), drafts, entries=False, cid="t")
    ]
    if now.draft is not None:
        panels.append(_Cache(panel_title(proposer), now.draft,
                             _same_shape(before and before.draft, now.draft),
                             _events(trace, "draft", phase, now.draft), drafts, entries=entries, cid="p"))
    title = PHASE_TITLES.get(phase, phase)
    cycle = f"Cycle {trace.cycle + 1} · " if trace is not None else ""
    min_w = max(TAG_EM + p.width * MIN_CELL_EM for p in panels)
    body = [f"<div class='svkv-caches' style='--minw:{esc(f'{min_w:.1f}')}em'>"]
    body += [_cache_html(p, token_text, rows_cap, lecture) for p in panels]
    if now.draft is None:
        body.append(f"<div class='svkv-nocache'>{no_cache_html(proposer)}</div>")
    body.append("</div>")
    described = _describe(panels, now.draft is None)
    label = f"KV caches, {cycle}{title}: " + ("target and proposer" if now.draft is not None else "target only")
    # In lecture mode a token tree's draft to resolve are the tree's (its panel shows the target's entries):
    # the caches give the screen to it, and come back for the rollback's compaction.
    tree_phase = trace is not None and trace.tree is not None and _step("draft") <= _step(phase) < _step("rollback")
    mode = (" svkv-lecture" + (" svkv-fold" if tree_phase else "")) if lecture else ""
    return "".join([
        f"<div class='svkv{mode}' role='figure' aria-label='{esc(label)}' data-phase='{esc(phase)}'>",
        f"<style>{_css(len(drafts))}</style>" if inline_css else "",
        f"<div class='svkv-phase'>{esc(cycle + title)}</div>",
        *body,
        _legend_html(),
        # A token tree's cycle is drawn by its own panel (viz/tree_view.py), not as a chain's columns.
        _cycle_html(trace, phase, token_text, lecture) if drafted and trace.tree is None else "",
        f"<p class='svkv-sr'>{esc(described)}</p>",
        "<details class='svkv-describe'><summary>Describe this picture</summary>"
        f"<p>{esc(described)}</p></details>",
        "</div>",
    ])


def _same_shape(before: CacheSnapshot | None, now: CacheSnapshot) -> CacheSnapshot | None:
    """`before` if it is comparable slot for slot with `now` (same layout and page size), else None."""
    same = before is not None and (before.layout, before.page_size) == (now.layout, now.page_size)
    return before if same else None


def _events(trace: CycleTrace | None, which: str, phase: str, snap: CacheSnapshot) -> str:
    if trace is None:
        return "prefill of the prompt"
    events = trace.target_events if which == "target" else trace.draft_events
    return events_text(events, phase, committed=snap.num_committed)


# ---- one cache --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cache:
    title: str
    snap: CacheSnapshot
    before: CacheSnapshot | None
    events: str
    drafts: Sequence[DraftStep]
    entries: bool  # a feature head's cache: entry p pairs the feature at p with the token at p+1
    cid: str = "t"  # the cache's key prefix: every node's data-key starts with it

    @property
    def width(self) -> int:
        return self.snap.page_size if self.snap.layout == "paged" else CONTIGUOUS_ROW


@dataclass(frozen=True)
class _Slot:
    state: str
    pos: int
    tok: int

    @property
    def key(self) -> tuple[str, int]:
        """What the eye sees: a free slot looks the same whatever it last held."""
        return (self.state, -1 if self.state == "free" else self.tok)


def _slot(snap: CacheSnapshot, slot: int) -> _Slot:
    state = snap.slot_state(slot) if snap.layout == "contiguous" or slot < snap.capacity else "free"
    pos = snap.slot_positions[slot] if slot < len(snap.slot_positions) else -1
    tok = snap.slot_tokens[slot] if slot < len(snap.slot_tokens) else -1
    return _Slot(state, pos, tok)


class _Cells:
    """A snapshot's cells, row by row, computed when a row is asked for. A row past the slots the
    snapshot lists is free whatever it claims (its length, its capacity): it costs nothing."""

    def __init__(self, snap: CacheSnapshot, width: int) -> None:
        self.snap, self.width, self.memo = snap, width, {}
        self.listed = -(-len(snap.slot_positions) // width)  # rows that may hold a written slot
        self.free = [_Slot("free", -1, -1)] * width

    def __getitem__(self, row: int) -> list[_Slot]:
        if row >= self.listed:
            return self.free
        if row not in self.memo:
            self.memo[row] = [_slot(self.snap, row * self.width + c) for c in range(self.width)]
        return self.memo[row]

    def rows_of_note(self) -> set[int]:
        """The rows that may differ from a free row: those holding listed slots, and the blocks of a table."""
        return set(range(self.listed)) | set(self.snap.block_table if self.snap.layout == "paged" else ())


def _n_rows(snaps: Sequence[CacheSnapshot], width: int) -> int:
    """Rows worth drawing: every block (row) ever touched, and every block in a table."""
    if snaps[0].layout == "paged":
        touched = max(-(-len(s.slot_positions) // width) for s in snaps)
        in_use = max(max(s.block_table, default=-1) for s in snaps) + 1
        return max(touched, in_use, 1)
    return max(-(-max(len(s.slot_positions), s.seq_len + 1) // width) for s in snaps)


def _tag(snap: CacheSnapshot, row: int, width: int) -> tuple[str, str]:
    """The row's two-line tag: physical block and its logical index, or the buffer's slot range."""
    if snap.layout == "paged":
        index = snap.logical_blocks.get(row)
        logical = "free" if index is None else f"logical {index}"
        return f"block {row}", logical
    return "slots", f"{row * width}–{row * width + width - 1}"


def _pointer(snap: CacheSnapshot, width: int) -> tuple[int, int] | None:
    """(row, column) of the slot position `seq_len` goes to next; None when that needs a new block."""
    logical, col = divmod(snap.seq_len, width)
    if snap.layout == "paged":
        if logical >= len(snap.block_table):
            return None
        return snap.block_table[logical], col
    return logical, col


def _draft_index(cache: _Cache, cell: _Slot) -> int | None:
    """The draft d_i this slot holds (by position and token), if any. A feature head's entry p
    carries the token at p+1."""
    if cell.state == "free":
        return None
    shift = 1 if cache.entries else 0
    for d in cache.drafts:
        if cell.pos + shift == d.position and cell.tok == d.token_id:
            return d.index
    return None


def _recency(snap: CacheSnapshot, row: int) -> int:
    """How late in the sequence a row's positions come (a block outside the table: never)."""
    if snap.layout != "paged":
        return row
    return snap.logical_blocks.get(row, -1)


def _window(cache: _Cache, n_rows: int, hot: set[int], cap: int, first: set[int]) -> list[int]:
    """The rows to draw: all of them if they fit, else the rows where something happens (`hot`)
    plus the newest committed ones, in physical order. Never more than HOT_ROWS_MAX + `cap` rows,
    whatever a snapshot holds: `first` (the pointer's rows, the rows this phase changed) and then
    the newest hot rows are kept."""
    if n_rows <= cap:
        return list(range(n_rows))
    snap = cache.snap
    if len(hot) > HOT_ROWS_MAX:
        rest = sorted(hot - first, key=lambda r: _recency(snap, r), reverse=True)
        hot = set(sorted(first & hot, key=lambda r: _recency(snap, r), reverse=True)[:HOT_ROWS_MAX])
        hot |= set(rest[: HOT_ROWS_MAX - len(hot)])
    newest = reversed(snap.block_table) if snap.layout == "paged" else range(n_rows - 1, -1, -1)
    shown = set(hot)
    for row in newest:
        if len(shown) >= cap:
            break
        shown.add(row)
    return sorted(r for r in shown if r < n_rows)


def _cache_html(cache: _Cache, token_text: TokenText, cap: int, lecture: bool) -> str:
    snap, before, width = cache.snap, cache.before, cache.width
    n_rows = _n_rows([snap] + ([before] if before else []), width)
    now_cells = _Cells(snap, width)
    was_cells = _Cells(before, width) if before else None
    ptr, was_ptr = _pointer(snap, width), (_pointer(before, width) if before else None)
    pointers = {p[0] for p in (ptr, was_ptr) if p is not None and p[0] < n_rows}
    # Only rows that hold something, or whose tag a block table sets, can differ from a free row:
    # the work is bounded by what the snapshots list, not by the sizes they claim.
    rows_of_note = sorted({r for c in (now_cells, was_cells) if c for r in c.rows_of_note() if r < n_rows} | pointers)
    hot = {r for r in rows_of_note if any(s.state in ("provisional", "stale") for s in now_cells[r])}
    changed: set[int] = set()  # rows this phase changed: data-role="action" (what a test looks for)
    if was_cells is not None:
        changed |= {r for r in rows_of_note if _row_changed(now_cells[r], was_cells[r])}
        changed |= {r for r in rows_of_note if _tag(snap, r, width) != _tag(before, r, width)}
        if ptr != was_ptr:
            changed |= pointers
    hot |= changed | pointers
    rows = _window(cache, n_rows, hot, cap, first=changed | pointers)
    # A short lecture screen keeps two rows: the rows where something happens, topped up with the
    # newest row of context (a block of 16 readable tokens may take two lines at 1280x720).
    context = sorted((r for r in rows if r not in hot), key=lambda r: _recency(snap, r))
    context = context[:-1] if len(rows) - len(context) < 2 else context

    # The cache, its free list and its grid are keyed too: when one of them moves as a whole (the
    # cache above grew a row), it glides as one node and carries its rows and chips (stage_motion.js `flip`).
    parts = [f"<section class='svkv-cache' data-key='{esc(cache.cid)}-cache' aria-label='{esc(cache.title)}'>",
             _heading(cache, lecture)]
    if snap.layout == "paged":
        parts.append(_free_list_html(cache))
    if len(rows) < n_rows:
        parts.append(_overview_html(now_cells, n_rows, rows_of_note, rows))
    parts.append(f"<div class='svkv-grid' data-key='{esc(cache.cid)}-grid' style='--cols:{esc(width)}'>")
    last = -1
    for row in rows:
        if row > last + 1:
            parts.append(_gap_html(cache, now_cells, rows_of_note, last + 1, row))
        parts.append(
            _row_html(cache, row, now_cells[row], token_text, ptr[1] if ptr and ptr[0] == row else None,
                      row in changed, context=row in context)
        )
        last = row
    if last < n_rows - 1:
        parts.append(_gap_html(cache, now_cells, rows_of_note, last + 1, n_rows))
    parts.append("</div></section>")
    return "".join(parts)


def _row_changed(now: Sequence[_Slot], was: Sequence[_Slot]) -> bool:
    return any(a.key != b.key for a, b in zip(now, was, strict=True))


def _heading(cache: _Cache, lecture: bool) -> str:
    snap = cache.snap
    provisional = snap.seq_len - snap.num_committed
    if cache.entries:
        split = (f"{snap.num_committed} from real features + {provisional} from predicted features"
                 if provisional else "all from real features")
    else:
        split = f"{snap.num_committed} committed + {provisional} provisional" if provisional else "all committed"
    # One line for what the cache holds, one for its bookkeeping: the grid must stay above the fold.
    lines = [f"<h3 class='svkv-title'>{esc(cache.title)} <span class='svkv-len'>· length {esc(snap.seq_len)} "
             f"({esc(split)}){esc(_next_write(snap, cache.width))}</span></h3>"]
    if not lecture:
        if snap.layout == "paged":
            table = ", ".join(str(b) for b in snap.block_table)
            detail = [f"block_table [{table}]", f"{snap.page_size} slots per block", f"policy {snap.policy or 'free'}"]
        else:
            detail = [f"write pointer at slot {snap.seq_len}", f"capacity {snap.capacity}"]
        if memory_text(snap):
            detail.append(memory_text(snap))
        lines.append(f"<p class='svkv-sub'>{esc(' · '.join(detail))}</p>")
    lines.append(f"<p class='svkv-ev'>{esc(cache.events)}</p>")
    return explain("".join(lines))  # its jargon (block_table, allocated, provisional...) explained in place


def _next_write(snap: CacheSnapshot, width: int) -> str:
    """Where the pointer bar is missing: the next position starts a block the table lacks."""
    return " · the next position needs a new block" if _pointer(snap, width) is None else ""


def _free_list_html(cache: _Cache) -> str:
    """The pool's free list in hand-out order: its head and tail, the middle counted. Chips are keyed
    by block id, so a freed block's chip fades in at the tail and the list glides as it shifts."""
    snap = cache.snap
    free = [f"<span class='svkv-fb' data-key='{esc(cache.cid)}-fb{esc(b)}'>{esc(b)}</span>" for b in snap.free_blocks]
    skipped = len(free) - FREE_LIST_SHOWN - FREE_LIST_TAIL
    if skipped > 0:
        free[FREE_LIST_SHOWN:-FREE_LIST_TAIL] = [f"<span class='svkv-fb-more'>… {skipped} more …</span>"]
    head = f"free list ({snap.num_free_blocks} of {snap.num_blocks} blocks) →"
    return (f"<div class='svkv-free' data-key='{esc(cache.cid)}-free'><span class='svkv-free-h'>{esc(head)}</span>"
            f"{''.join(free) or '<span>empty</span>'}</div>")


def _overview_html(cells: _Cells, n_rows: int, of_note: Sequence[int], shown: Sequence[int]) -> str:
    """One tiny cell per row (per OVERVIEW_MAX-th of the cache, for a longer one), in the state that
    matters most in it; the drawn rows outlined."""
    per = -(-n_rows // OVERVIEW_MAX)  # rows per tiny cell
    rank = {"free": 0, "committed": 1, "stale": 2, "provisional": 3}
    states = ["free"] * -(-n_rows // per)
    for r in of_note:  # every other row is free
        row_state = max((s.state for s in cells[r]), key=rank.__getitem__)
        states[r // per] = max(states[r // per], row_state, key=rank.__getitem__)
    drawn = {r // per for r in shown}
    spans = []
    for i, state in enumerate(states):
        cls = f"svkv-ovc svkv-s-{state}" + (" svkv-ov-shown" if i in drawn else "")
        where = f"row {i}" if per == 1 else f"rows {i * per}–{min(n_rows, (i + 1) * per) - 1}"
        spans.append(f"<span class='{esc(cls)}' title='{esc(where)}: {esc(state)}'></span>")
    return f"<div class='svkv-ov' aria-hidden='true'><span>whole cache</span>{''.join(spans)}</div>"


def _gap_html(cache: _Cache, cells: _Cells, of_note: Sequence[int], start: int, end: int) -> str:
    """One line standing for rows start..end-1, which are not drawn (only the rows of note among them
    can hold anything: `of_note`, sorted)."""
    snap = cache.snap
    inside = [cells[r] for r in of_note[bisect_left(of_note, start) : bisect_left(of_note, end)]]
    committed = sum(s.state == "committed" for row in inside for s in row)
    free = (end - start) - sum(not all(s.state == "free" for s in row) for row in inside)
    unit = "block" if snap.layout == "paged" else "row"
    span = f"{unit}s {start}–{end - 1}" if end - start > 1 else f"{unit} {start}"
    parts = [_count(committed, "committed position")] if committed or not free else []
    if free:
        parts.append(f"{_count(free, unit)} free" if committed else f"free {unit}{'s' if free > 1 else ''}")
    return (f"<div class='svkv-gap' data-key='{esc(cache.cid)}-g{esc(start)}'>⋯ {esc(span)} hidden: "
            f"{esc(', '.join(parts))} ⋯</div>")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _row_html(cache: _Cache, row: int, now: Sequence[_Slot], token_text: TokenText, pointer: int | None,
              changed: bool = False, context: bool = False) -> str:
    """One block (or contiguous row): its tag and its cells; `pointer` is the write pointer's column.
    A `context` row (nothing happens in it) is one a short lecture screen leaves out (kv.css)."""
    snap, width = cache.snap, cache.width
    tag = _tag(snap, row, width)
    tag_cls = "svkv-tag"
    if snap.layout == "paged" and tag[1] == "free":
        tag_cls += " svkv-tag-free"
    role = " data-role='action'" if changed else ""
    # The cells size to what they hold and wrap within the block's line (never cut to fit a column).
    ctx = " svkv-ctx" if context else ""
    parts = [f"<div class='svkv-row{ctx}' data-row='{esc(row)}' data-key='{esc(cache.cid)}-r{esc(row)}'{role}>"
             f"<div class='{tag_cls}'>{esc(tag[0])}<br>{esc(tag[1])}</div><div class='svkv-cells'>"]
    for col, cell in enumerate(now):
        parts.append(_cell_html(cache, row * width + col, cell, token_text, pointer == col))
    parts.append("</div></div>")
    return "".join(parts)


def _cell_html(cache: _Cache, slot: int, cell: _Slot, token_text: TokenText, pointer: bool) -> str:
    d = _draft_index(cache, cell)
    attrs = f" data-d='{esc(d)}' tabindex='0'" if d is not None else ""
    if cell.state == "free" or cell.tok < 0:
        text, pos, tip = "", "", f"slot {slot}: free"
    else:
        raw = token_text(cell.tok)
        attrs += f" data-token='{esc(show_token(raw, 10**6))}'"
        text = esc(show_token(raw, CELL_CHARS))  # whole up to 6 characters, else 5 and "…"
        pos = esc(cell.pos)
        what = (f"entry {cell.pos}: feature at {cell.pos} + token at {cell.pos + 1}" if cache.entries
                else f"position {cell.pos}")
        tip = f"slot {slot} · {what} · token {cell.tok} {raw!r} · {cell.state}" + (f" · draft d{d}" if d else "")
    ptr = f"<span class='svkv-ptr' data-key='{esc(cache.cid)}-ptr' aria-hidden='true'></span>" if pointer else ""
    return (
        f"<div class='svkv-cell svkv-s-{esc(cell.state)}' data-key='{esc(cache.cid)}-s{esc(slot)}'{attrs} "
        f"title='{esc(tip)}'>{ptr}"
        f"<span class='svkv-meta'><span class='svkv-pos'>{pos}</span><span class='svkv-glyph'>{GLYPHS[cell.state]}"
        "</span></span>"
        f"<span class='svkv-tok' data-role='token-text'>{text}</span></div>"
    )


# ---- the cycle panel ----------------------------------------------------------------------------


def _matched_html(trace: CycleTrace, token_text: TokenText) -> str:
    """Where retrieved drafts came from: the context's matched suffix, highlighted, and its store."""
    m = trace.matched
    if m is None:
        return ""
    where = ("the datastore of the target's earlier answers" if m.source == "datastore"
             else "this session's earlier texts")
    suffix = "".join(f"<mark class='svkv-mtext'>{esc(show_token(token_text(t), 10**6))}</mark>" for t in m.tokens)
    return (f"<p class='svkv-sub2 svkv-matched' data-role='matched'>Retrieved: the context's last {len(m.tokens)} "
            f"token(s) {suffix} (positions {esc(m.first)}–{esc(m.first + len(m.tokens) - 1)}) occur "
            f"{esc(m.occurrences)} time(s) in {where} (first at its position {esc(m.where)}); the drafts copy what "
            f"followed them there.</p>{_source_html(m, token_text)}")


def _source_html(m: ContextMatch, token_text: TokenText) -> str:
    """The source text around the match's first occurrence: what came before, the matched suffix
    (marked) and what followed it there (underlined: the drafts copy it). Shown in lecture mode too:
    "datastore position 239311" alone says nothing about where a guess came from."""
    if not (m.before or m.after):  # a run recorded before the source text was kept
        return ""
    text = lambda ids: esc("".join(show_token(token_text(t), 10**6) for t in ids))  # noqa: E731
    store = "the datastore" if m.source == "datastore" else "an earlier text of this session"
    tip = "highlighted: the context's matched suffix; underlined: what followed it there, which the drafts copy"
    return (f"<p class='svkv-source' data-role='retrieval-source' title='{esc(tip)}'>Source, {esc(store)}: "
            f"<span class='svkv-srctext'>…{text(m.before)}<mark class='svkv-srcm'>{text(m.tokens)}</mark>"
            f"<span class='svkv-srcnext'>{text(m.after)}</span>…</span></p>")


def _cycle_html(trace: CycleTrace, phase: str, token_text: TokenText, lecture: bool = False) -> str:
    step = _step(phase)
    if not trace.drafts:
        note = trace.proposer_note or "the proposer proposed nothing: the target took one plain step"
        return (f"<div class='svkv-cycle' data-key='cyc' data-role='drafts'><h3 class='svkv-title'>This cycle</h3>"
                f"<p>{esc(note)}</p></div>")
    greedy = trace.temperature == 0
    intro = ("temperature 0: q and p are one-hot — q(d) = 1 for every draft (it is the draft's argmax), and a "
             "draft passes iff it is also the target's argmax" if greedy
             else "q(d): the proposer's probability of its draft" + (
                 "; p(d): the target's, from the verify pass" if step >= _step("verify") else ""))
    cols = [_draft_column(d, step, greedy) for d in trace.drafts]
    if step >= _step("resolve"):
        cols.append(_result_column(trace))
    elif lecture and step == _step("accept") and not greedy:  # lecture mode has no charts below the stage
        cols.append(_pq_column(trace))
    n = len(cols)
    return (
        "<div class='svkv-cycle' data-key='cyc' data-role='drafts'><h3 class='svkv-title'>This cycle's drafts</h3>"
        f"<p class='svkv-sub2'>{esc(intro)}</p>{_matched_html(trace, token_text)}"
        f"<div class='svkv-drafts' style='--n:{n}'>{''.join(cols)}</div></div>"
    )


def _bar(d: int, label: str, value: float, kind: str, marker: float | None = None) -> str:
    width = max(0.0, min(1.0, value)) * 100
    mark = f"<span class='svkv-u' style='left:{esc(f'{marker * 100:.1f}')}%'></span>" if marker is not None else ""
    return (
        f"<div class='svkv-barrow' data-d='{esc(d)}'><span class='svkv-barlabel'>{esc(label)}</span>"
        f"<span class='svkv-bar svkv-bar-{esc(kind)}' data-d='{esc(d)}'><span style='width:{esc(f'{width:.1f}')}%'>"
        f"</span>{mark}</span>"
        "</div>"
    )


def _draft_column(d: DraftStep, step: int, greedy: bool) -> str:
    parts = [
        f"<div class='svkv-draft' data-d='{esc(d.index)}' data-key='d{esc(d.index)}' tabindex='0'>",
        f"<div class='svkv-dhead'>d{esc(d.index)} <span class='svkv-dpos'>position {esc(d.position)}</span></div>",
        f"<div class='svkv-dtok'>{esc(show_token(d.text, 10**6))}</div>",
    ]
    if d.source:  # a merged proposer: who proposed it
        parts.append(f"<div class='svkv-dsrc' data-role='draft-source'>from {esc(d.source)}</div>")
    if greedy:
        parts.append(f"<div class='svkv-barrow' data-d='{esc(d.index)}'>q(d) = 1 (one-hot)</div>")
    else:
        parts.append(_bar(d.index, f"q(d) = {fmt_p(d.draft_prob)}", d.draft_prob, "q"))
    if step >= _step("verify"):
        if greedy:
            top = "the target's argmax" if d.target_prob >= 1 else "not the target's argmax"
            parts.append(f"<div class='svkv-barrow' data-d='{esc(d.index)}'>p: {top}</div>")
        else:
            parts.append(_bar(d.index, f"p(d) = {fmt_p(d.target_prob)}", d.target_prob, "p"))
    if step >= _step("accept"):
        parts.append(_acceptance(d, greedy))
    parts.append("</div>")
    return "".join(parts)


def _acceptance(d: DraftStep, greedy: bool) -> str:
    glyph = VERDICT_GLYPHS[d.verdict]
    forced = " (forced: what-if)" if d.forced else ""
    verdict = (f"<div class='svkv-verdict svkv-v-{esc(d.verdict)}' data-d='{esc(d.index)}' data-role='verdict'>"
               f"<span class='svkv-vglyph'>{esc(glyph)}</span> {esc(d.verdict)}{esc(forced)}</div>")
    if d.verdict == "untested":
        return verdict + "<div class='svkv-barrow'>not tested: an earlier draft was rejected</div>"
    if greedy:
        return verdict
    test = f"u = {fmt_p(d.u)} {'≤' if d.verdict == 'accepted' else '>'} {fmt_p(d.ratio)}" if d.u is not None else ""
    return _bar(d.index, f"min(1, p/q) = {fmt_p(d.ratio)}", d.ratio, "a", d.u) + (
        f"<div class='svkv-barrow'>{esc(test)}</div>" if test else "") + verdict


def _result_column(trace: CycleTrace) -> str:
    token = trace.corrected_token or trace.bonus_token
    if token is None:
        return ""
    corrected = token.kind == "corrected"
    where = "from the residual norm(max(0, p − q))" if corrected else "from p_K+1 (all passed)"
    tops = trace.residual_top if corrected else trace.bonus_top  # what it was drawn from, in small
    prob = {t.token_id: t.prob for t in tops}
    rows = [(t, tp, [("r" if corrected else "b", prob.get(t, 0.0))])
            for t, tp in _top([tops], TokenProb(token.token_id, 0.0, token.text))]
    bars = _mini(rows, token.token_id)
    return (
        f"<div class='svkv-draft svkv-result svkv-k-{esc(token.kind)}' data-key='res'>"
        f"<div class='svkv-dhead'>{esc(token.kind)} <span class='svkv-dpos'>position {esc(token.position)}</span></div>"
        f"<div class='svkv-dtok'>{esc(show_token(token.text, 10**6))}</div>"
        f"<div class='svkv-barrow'>{esc(where)}</div>{bars}</div>"
    )


MINI_ROWS = 3  # tokens in a card's small distribution (the Distributions tab has the whole chart)


def _top(lists: Sequence[Sequence[TokenProb]], chosen: TokenProb) -> list[tuple[int, TokenProb]]:
    """The MINI_ROWS tokens of most mass in any of `lists`, `chosen` always among them."""
    mass: dict[int, float] = {}
    named = {chosen.token_id: chosen}
    for tops in lists:
        for t in tops:
            mass[t.token_id] = max(mass.get(t.token_id, 0.0), t.prob)
            named.setdefault(t.token_id, t)
    ids = sorted(mass, key=lambda t: -mass[t])[:MINI_ROWS]
    if chosen.token_id not in ids:
        ids = ids[: MINI_ROWS - 1] + [chosen.token_id]
    return [(t, named[t]) for t in ids]


def _mini(rows: Sequence[tuple[int, TokenProb, Sequence[tuple[str, float]]]], chosen: int) -> str:
    """A few tokens with thin bars (kind, probability), scaled to the largest; `chosen` in bold."""
    top = max((v for *_, bars in rows for _, v in bars), default=0.0) or 1.0
    cells = []
    for tid, tp, bars in rows:
        tip = ", ".join(f"{k} = {fmt_p(v)}" for k, v in bars)
        cls = " svkv-mchosen" if tid == chosen else ""
        spans = "".join(f"<span class='svkv-mbar svkv-mbar-{esc(k)}' style='width:{esc(f'{100 * v / top:.1f}')}%'>"
                        "</span>" for k, v in bars)
        cells.append(f"<span class='svkv-mtok{cls}' title='{esc(tip)}'>{esc(show_token(tp.text, 6))}</span>"
                     f"<span class='svkv-mbars' title='{esc(tip)}'>{spans}</span>")
    return f"<div class='svkv-mini'>{''.join(cells)}</div>"


def _pq_column(trace: CycleTrace) -> str:
    """p against q at the first rejected draft (or the last draft): the tokens either model favours."""
    d = trace.drafts[(trace.rejected_at or len(trace.drafts)) - 1]
    p = {t.token_id: t.prob for t in d.target_top} | {d.token_id: d.target_prob}
    q = {t.token_id: t.prob for t in d.draft_top} | {d.token_id: d.draft_prob}
    rows = [(t, tp, [("q", q.get(t, 0.0)), ("p", p.get(t, 0.0))])
            for t, tp in _top([d.target_top, d.draft_top], TokenProb(d.token_id, 0.0, d.text))]
    return (
        "<div class='svkv-draft svkv-result svkv-pq' data-key='res'>"
        f"<div class='svkv-dhead'>p vs q <span class='svkv-dpos'>at d{esc(d.index)}</span></div>"
        "<div class='svkv-barrow'><span class='svkv-mkey svkv-mbar-q'></span>q "
        "<span class='svkv-mkey svkv-mbar-p'></span>p</div>"
        f"{_mini(rows, d.token_id)}</div>"
    )


# ---- legend and words -------------------------------------------------------------------------


def _legend_html() -> str:
    items = [
        ("committed", "ab", "committed K/V (solid)"),
        ("provisional", "ab", "provisional K/V (stripes, dashed, P)"),
        ("stale", "ab", "stale: past the valid length (hatched, struck, ✕)"),
        ("free", "", "free slot (dotted, empty)"),
    ]
    parts = ["<div class='svkv-legend'>"]
    for state, text, words in items:
        parts.append(
            f"<span class='svkv-lg'><span class='svkv-cell svkv-s-{state} svkv-lgcell'><span class='svkv-meta'>"
            f"<span class='svkv-pos'></span><span class='svkv-glyph'>{GLYPHS[state]}</span></span>"
            f"<span class='svkv-tok'>{text}</span></span>{words}</span>"
        )
    parts.append("<span class='svkv-lg'><span class='svkv-lgptr'></span>next write (valid length)</span>")
    parts += [
        f"<span class='svkv-lg'><span class='svkv-verdict svkv-v-{v}'><span class='svkv-vglyph'>{g}</span></span>{v}"
        "</span>" for v, g in VERDICT_GLYPHS.items()
    ]
    parts.append("</div>")
    return "".join(parts)


def _describe(panels: Sequence[_Cache], no_proposer_cache: bool) -> str:
    out = []
    for p in panels:
        n_slots = _n_rows([p.snap], p.width) * p.width
        listed = min(n_slots, len(p.snap.slot_positions))  # the slots past these are free
        counts = {s: 0 for s in STATE_ORDER}
        for slot in range(listed):
            counts[_slot(p.snap, slot).state] += 1
        counts["free"] += n_slots - listed
        text = (f"{p.title} ({p.snap.layout}): length {p.snap.seq_len}; " + ", ".join(
            f"{counts[s]} {s}" for s in STATE_ORDER) + " slots")
        if p.snap.layout == "paged":
            table, free = (", ".join(map(str, ids)) for ids in (p.snap.block_table, p.snap.free_blocks))
            text += f"; {len(p.snap.block_table)} blocks in the block table [{table}]; free list [{free}]"
        else:
            text += f"; write pointer at slot {p.snap.seq_len}"
        out.append(text + f". This phase: {p.events}.")
    if no_proposer_cache:
        out.append("Prompt lookup keeps no draft cache.")
    return " ".join(out)


# ---- styles -------------------------------------------------------------------------------------


def _hover_rules(k: int) -> str:
    """Outline draft d_i everywhere when any element of it is hovered or focused (no script)."""
    rules = []
    for i in range(1, k + 1):
        sel = f'[data-d="{i}"]'
        # Only the slots and the column light up; the bars inside the column carry data-d to be
        # hover targets, but an outline on each would cover their labels.
        targets = ",".join(f".svkv:has({sel}:{state}) {kind}{sel}" for state in ("hover", "focus")
                           for kind in (".svkv-cell", ".svkv-draft"))
        rules.append(targets + "{outline:4px solid #111827;outline-offset:2px;box-shadow:0 0 0 8px #ffe36e;z-index:3}")
    return "".join(rules)


def stylesheet(max_drafts: int = 32) -> str:
    """The view's CSS on its own, for a page that inserts it once (docs/design.md §3, "The KV
    picture"). Linked hover covers drafts d1..d_max_drafts."""
    return f"<style>{_css(max_drafts)}</style>"


def _css(k: int) -> str:
    return _palette_rule() + read_static("kv.css") + _hover_rules(k)


@cache
def _palette_rule() -> str:
    """The palette (viz/style.py) as the CSS variables static/kv.css draws its colours with."""
    colors = {**{f"slot-{s}": c for s, c in SLOT_COLORS.items()},
              **{f"slot-text-{s}": c for s, c in SLOT_TEXT_COLORS.items()},
              **{f"kind-{k}": c for k, c in KIND_COLORS.items()}}
    return f".svkv{{--tagw:{TAG_EM}em;" + "".join(f"--svkv-{name}:{c};" for name, c in colors.items()) + "}\n"
