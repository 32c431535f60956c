"""The KV caches of the target and the draft, side by side, animated phase by phase.

What the picture teaches (DESIGN §1, §2):

* **paged layout** (vLLM's PagedAttention): the cache is a pool of fixed-size blocks. Each row of
  the grid is one *physical* block, each cell one slot, labelled with the token whose K/V it
  holds. The tag left of a row names the physical block and its place in the sequence's
  `block_table` (``b7·L3``: physical block 7 holds logical block 3), or "free" when the block is
  in the free pool.
* **contiguous layout** (gpt-fast, HF static cache): one preallocated buffer, drawn in rows of
  16 slots, with a ▼ marking the write pointer (the next slot to be written).
* colours: committed K/V, *provisional* K/V (written by the target's verify pass, or by the
  draft's own forward passes, not yet known to survive), *stale* slots (past the valid length:
  the values are still in memory and will be overwritten), free slots. Slots that changed in the
  phase shown are outlined.
* the right panel is the *proposer's* cache (DESIGN §1b): a draft model's full cache, or an
  EAGLE-style feature head's one-layer cache, whose entry p pairs the target's feature at
  position p with the token at position p+1. For the head "committed" means *built from the
  target's real features*; entries built from the head's own predicted features stay provisional
  and are always truncated at rollback, even when their drafts were accepted. Prompt lookup keeps
  no cache at all: the target is drawn alone, full width, with a caption saying so.

Each cycle's figure carries one plotly frame per phase of `CYCLE_PHASES` (start, draft, verify,
accept, resolve, rollback) with a play button and a phase slider, so the provisional append, the
truncation, the blocks returning to the pool (policy "free") or staying reserved ("keep") and
the pointer rewind can be watched as an animation. `layout.transition` is set too, so when the
app redraws the same chart for the next phase plotly.js animates the change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from ..trace import CYCLE_PHASES, CacheEvent, CacheSnapshot, CycleTrace, PhaseSnapshot
from .style import FONT, PHASE_TITLES, SLOT_COLORS, SLOT_ORDER, SLOT_TEXT_COLORS, base_layout, esc, show_token

TokenText = Callable[[int], str]
CONTIGUOUS_ROW = 16  # slots per drawn row of a contiguous buffer
CONTIGUOUS_ROW_ALONE = 32  # ... when the target is drawn alone (no proposer cache): twice as wide
MAX_ROWS = 40  # rows drawn per model; longer caches show their most recent rows
ROW_PX = 26  # vertical pitch of the grid (the figure's height is set from it)
CELL_PX = 23  # side of a slot's square marker
COL_PX = 29  # intended horizontal pitch; sets each grid's share of the figure's width
ASSUMED_WIDTH_PX = 1050  # typical width of the chart in the app's wide layout
TAG_COLS = 1.9  # width (in slots) of the row-tag column left of each grid
# Slots are scatter markers, not heatmap cells: plotly.js tweens scatter marker colours and
# positions, so the provisional append, the rollback and the moving write pointer fade and glide
# between phases (a heatmap can only jump, and vanishes during a transition).
TRANSITION_MS = 550
FRAME_MS = 1300
HALF, WHOLE = 0.47, 0.97  # the most of the figure's width one grid may take: beside another, or alone

# The proposer's panel, by `CycleTrace.proposer`. Prompt lookup has none: `NO_CACHE` replaces it.
PANEL_TITLES = {
    "draft": "Draft model cache",
    "feature": "Feature head cache (1 layer: pairs of target feature + next token)",
}
PANEL_SHORT = {"draft": "draft", "feature": "feature head", "lookup": "prompt lookup"}
NO_CACHE = (
    "<b>Prompt lookup keeps no draft cache</b><br><span style='font-size:11px'>it copies what followed an "
    "earlier match of the last n-gram:<br>no model runs, nothing to write or roll back</span>"
)


def _share(width: int, cap: float = HALF) -> float:
    """The fraction of the figure's width one grid of `width` slot columns gets (at most `cap`)."""
    return min(cap, (width + TAG_COLS) * COL_PX / ASSUMED_WIDTH_PX)


def _cell_px(width: int, cap: float = HALF) -> int:
    """Marker side for a grid: CELL_PX, or smaller when many columns (page 32/64) share the width."""
    pitch = _share(width, cap) * ASSUMED_WIDTH_PX / (width + TAG_COLS)
    return int(max(6, min(CELL_PX, pitch - 3)))


@dataclass(frozen=True)
class _Grid:
    """How one model's cache maps onto rows × columns of the drawing (fixed for all frames)."""

    layout: str
    width: int  # columns = slots per row
    rows: tuple[int, ...]  # physical block index (paged) / buffer row index (contiguous) per drawn row
    hidden_rows: int  # rows not drawn (cap on height)
    cap: float = HALF  # the most of the figure's width this grid may take
    entries: bool = False  # a feature head's cache: slot p holds the pair (feature p, token p+1)

    @property
    def cell_px(self) -> int:
        return _cell_px(self.width, self.cap)


def _grid_for(snaps: Sequence[CacheSnapshot], alone: bool = False, entries: bool = False) -> _Grid:
    """The grid for one model's snapshots; `alone` = no other panel beside it (full width)."""
    first = snaps[0]
    cap = WHOLE if alone else HALF
    if first.layout == "paged":
        width = first.page_size
        touched = max(-(-len(s.slot_positions) // width) for s in snaps)
        in_use = max((max(s.block_table, default=-1) for s in snaps), default=-1) + 1
        n_rows = max(touched, in_use, 1)
    else:
        width = CONTIGUOUS_ROW_ALONE if alone else CONTIGUOUS_ROW
        extent = max(max(len(s.slot_positions), s.seq_len + 1) for s in snaps)
        n_rows = max(-(-extent // width), 1)
    rows = tuple(range(n_rows))
    hidden = 0
    if n_rows > MAX_ROWS:
        # Keep the rows where the action is: the blocks (rows) holding the newest positions.
        if first.layout == "paged":
            wanted = {b for s in snaps for b in s.block_table[-(MAX_ROWS - 2) :]}
            rows = tuple(sorted(wanted)[-MAX_ROWS:]) or rows[-MAX_ROWS:]
        else:
            rows = tuple(range(n_rows - MAX_ROWS, n_rows))
        hidden = n_rows - len(rows)
    return _Grid(first.layout, width, rows, hidden, cap, entries)


@dataclass(frozen=True)
class _Cells:
    """One model's slots at one phase, flattened row-major over the drawn grid."""

    states: tuple[str, ...]
    labels: tuple[str, ...]
    hovers: tuple[str, ...]


def _cells(snap: CacheSnapshot, grid: _Grid, token_text: TokenText) -> _Cells:
    states, labels, hovers = [], [], []
    cell = grid.cell_px
    limit = 0 if cell < 18 else (5 if grid.width <= 8 else 4)  # what fits the slot at 9 px (0: no labels)
    for row in grid.rows:
        for col in range(grid.width):
            slot = row * grid.width + col
            state = snap.slot_state(slot) if slot < snap.capacity or snap.layout == "contiguous" else "free"
            pos = snap.slot_positions[slot] if slot < len(snap.slot_positions) else -1
            tok = snap.slot_tokens[slot] if slot < len(snap.slot_tokens) else -1
            states.append(state)
            if state == "free" or tok < 0:
                labels.append("")
                hovers.append(f"slot {slot}: {state}")
            else:
                raw = token_text(tok)
                labels.append(esc(show_token(raw, limit)) if limit else "")
                if grid.entries:  # the head's entry p: what it was built from, not a single token
                    source = {"committed": "the target's real feature", "provisional": "the head's predicted feature"}
                    hovers.append(
                        f"slot {slot} · <b>{state}</b><br>entry {pos}: {source.get(state, 'a feature')} at position "
                        f"{pos}<br>+ token at position {pos + 1}: {tok} {esc(repr(raw))}"
                    )
                else:
                    hovers.append(f"slot {slot} · <b>{state}</b><br>position {pos} · token {tok} {esc(repr(raw))}")
    return _Cells(tuple(states), tuple(labels), tuple(hovers))


def _row_tags(snap: CacheSnapshot, grid: _Grid) -> list[str]:
    """Left-of-row tags: the logical block a physical block serves, or 'free' / buffer offsets."""
    tags = []
    for row in grid.rows:
        if grid.layout == "paged":
            if row in snap.block_table:
                tags.append(f"b{row}·L{snap.block_table.index(row)}")
            else:
                tags.append(f"b{row}·free")
        else:
            tags.append(f"{row * grid.width}")
    return tags


def _pointer_xy(snap: CacheSnapshot, grid: _Grid) -> tuple[float | None, float | None]:
    """Grid coordinates of the slot the next position (seq_len) would be written to."""
    pos = snap.seq_len
    if grid.layout == "paged":
        logical, offset = divmod(pos, grid.width)
        if logical >= len(snap.block_table):
            return None, None  # the next write needs a fresh block from the pool
        row = snap.block_table[logical]
    else:
        row, offset = divmod(pos, grid.width)
    if row not in grid.rows:
        return None, None
    return float(offset), float(grid.rows.index(row))


def _summary(name: str, snap: CacheSnapshot, entries: bool = False) -> str:
    """The subplot heading: lengths, and for paged caches the block table and free blocks.

    For a feature head (`entries`) the split is by what each entry was built from: the target's
    real features ("committed") or the head's own predicted features ("provisional")."""
    provisional = snap.seq_len - snap.num_committed
    # A long panel name (the feature head's) takes a line of its own: half the figure is ~490 px.
    head = f"<b>{name}</b>" + (" · " if len(name) <= 30 else "<br>") + f"length {snap.seq_len}"
    if entries:
        head += (
            f" ({snap.num_committed} from real features + {provisional} from predicted features)"
            if provisional
            else " (all from real features)"
        )
    else:
        head += f" ({snap.num_committed} committed + {provisional} provisional)" if provisional else " (all committed)"
    if snap.layout == "paged":
        table = ", ".join(str(b) for b in snap.block_table[-8:])
        if len(snap.block_table) > 8:
            table = "…, " + table
        head += (
            f"<br><span style='font-size:11px'>block_table [{table}] · free blocks "
            f"{snap.num_free_blocks}/{snap.num_blocks} · policy {snap.policy or 'free'}</span>"
        )
    else:
        head += (
            f"<br><span style='font-size:11px'>write pointer at slot {snap.seq_len} · capacity {snap.capacity}</span>"
        )
    return head + _memory_line(snap)


def memory_text(snap: CacheSnapshot) -> str:
    """KV memory of one cache: allocated (storage that exists), held (what the sequence owns:
    the buffer, or its blocks incl. stale slots) and valid (positions ever read); '' if the
    snapshot predates memory recording."""
    if not snap.bytes_per_slot:
        return ""
    mib = 1024 * 1024
    return (f"KV {snap.allocated_bytes / mib:.2f} MiB allocated · {snap.held_bytes / mib:.2f} held · "
            f"{snap.valid_bytes / mib:.2f} valid")


def _memory_line(snap: CacheSnapshot) -> str:
    text = memory_text(snap)
    return f"<br><span style='font-size:11px'>{text}</span>" if text else ""


def events_text(events: Sequence[CacheEvent], phase: str) -> str:
    """The phase's cache events in one line. The draft appends one position per forward pass, so
    consecutive appends are merged into one range, and block allocations into one list."""
    here = [e for e in events if e.phase == phase]
    if not here:
        return "no change"
    parts: list[str] = []
    appends = [e for e in here if e.kind == "append"]
    if appends:
        runs: list[list[CacheEvent]] = []
        for e in appends:
            if runs and runs[-1][-1].end == e.start:
                runs[-1].append(e)
            else:
                runs.append([e])
        for run in runs:
            passes = f", {len(run)} forward passes" if len(run) > 1 else ""
            parts.append(f"append K/V for positions {run[0].start}..{run[-1].end - 1} (provisional{passes})")
    allocated = [b for e in here if e.kind == "alloc" for b in e.blocks]
    if allocated:
        parts.append(f"allocate block(s) {allocated} from the free pool")
    parts += [e.describe() for e in here if e.kind not in ("append", "alloc")]
    return "; ".join(parts)


@dataclass(frozen=True)
class KVFrame:
    """One animation frame: a named phase, the two snapshots, and what changed in each cache."""

    phase: str
    snapshot: PhaseSnapshot
    target_events: str = ""
    draft_events: str = ""


def frames_for_trace(trace: CycleTrace) -> list[KVFrame]:
    """One KVFrame per phase of CYCLE_PHASES, in order."""
    out = []
    for phase in CYCLE_PHASES:
        out.append(
            KVFrame(
                phase,
                trace.snapshot(phase),
                events_text(trace.target_events, phase),
                events_text(trace.draft_events, phase),
            )
        )
    return out


def kv_figure(trace: CycleTrace, token_text: TokenText, phase: str = "rollback") -> go.Figure:
    """Target and proposer caches for one cycle, shown at `phase`, with one frame per phase."""
    return kv_figure_from_frames(frames_for_trace(trace), token_text, phase, cycle=trace.cycle, proposer=trace.proposer)


def kv_figure_from_frames(
    frames: Sequence[KVFrame],
    token_text: TokenText,
    phase: str,
    cycle: int | None = None,
    proposer: str = "draft",
) -> go.Figure:
    """The general form: any sequence of KVFrames (the app uses a single "prefill" frame before
    the first cycle). The figure's initial data is the frame named `phase`. `proposer` names the
    right panel; when the frames carry no proposer snapshot (prompt lookup) the target is drawn
    alone, full width, and a caption stands where the proposer's panel would be."""
    names = [f.phase for f in frames]
    current = names.index(phase) if phase in names else len(names) - 1
    has_draft = all(f.snapshot.draft is not None for f in frames)
    entries = proposer == "feature"
    t_grid = _grid_for([f.snapshot.target for f in frames], alone=not has_draft)
    d_grid = _grid_for([f.snapshot.draft for f in frames], entries=entries) if has_draft else None
    n_rows = max(len(t_grid.rows), len(d_grid.rows) if d_grid else 0)
    short = PANEL_SHORT.get(proposer, proposer)

    memo: dict[int, _Cells] = {}

    def cells(snap: CacheSnapshot, grid: _Grid) -> _Cells:
        """_cells, computed once per snapshot (each is drawn and also diffed with the next)."""
        if id(snap) not in memo:
            memo[id(snap)] = _cells(snap, grid, token_text)
        return memo[id(snap)]

    # Traces are plain dicts and the figure is built with `_validate=False`: plotly's per-property
    # validation of 6 frames × 2 grids of slots costs far more than drawing them.
    def traces_for(frame: KVFrame, prev: KVFrame | None) -> list[dict]:
        out: list[dict] = []
        pairs = [(t_grid, frame.snapshot.target, prev.snapshot.target if prev else None, "")]
        if d_grid is not None:
            pairs.append((d_grid, frame.snapshot.draft, prev.snapshot.draft if prev else None, "2"))
        for grid, snap, before, axis in pairs:
            now = cells(snap, grid)
            was = cells(before, grid) if before is not None else now
            xs = [c for _ in grid.rows for c in range(grid.width)]
            ys = [r for r in range(len(grid.rows)) for _ in range(grid.width)]
            fills = [SLOT_COLORS[st] for st in now.states]
            # A slot whose state or token changed in this phase gets a dark outline.
            changed = [
                a != b or la != lb for a, b, la, lb in zip(now.states, was.states, now.labels, was.labels, strict=True)
            ]
            out.append(
                dict(
                    type="scatter",
                    x=xs,
                    y=ys,
                    mode="markers+text",
                    marker=dict(
                        symbol="square",
                        size=grid.cell_px,
                        color=fills,
                        line=dict(color=["#111827" if c else f for c, f in zip(changed, fills, strict=True)], width=2),
                    ),
                    text=list(now.labels),
                    textposition="middle center",
                    textfont=dict(size=9, family=FONT, color=[SLOT_TEXT_COLORS[st] for st in now.states]),
                    customdata=list(now.states),
                    hovertext=list(now.hovers),
                    hovertemplate="%{hovertext}<extra></extra>",
                    showlegend=False,
                    xaxis=f"x{axis}",
                    yaxis=f"y{axis}",
                )
            )
            px, py = _pointer_xy(snap, grid)
            marker_name = "write pointer" if grid.layout == "contiguous" else "next slot"
            out.append(
                dict(
                    type="scatter",
                    x=[px],
                    y=[None if py is None else py - 0.5],
                    mode="markers",
                    marker=dict(symbol="triangle-down", size=9, color="#111827"),
                    hovertemplate=f"{marker_name}: position {snap.seq_len}<extra></extra>",
                    showlegend=False,
                    xaxis=f"x{axis}",
                    yaxis=f"y{axis}",
                )
            )
            tags = _row_tags(snap, grid)
            out.append(
                dict(
                    type="scatter",
                    x=[-0.5 - TAG_COLS / 2] * len(tags),
                    y=list(range(len(tags))),
                    text=tags,
                    mode="text",
                    textposition="middle center",
                    textfont=dict(size=10, color="#6b7280"),
                    hoverinfo="skip",
                    showlegend=False,
                    xaxis=f"x{axis}",
                    yaxis=f"y{axis}",
                )
            )
        return out  # indices 0-2: target slots, pointer, row tags; 3-5: the same for the proposer

    n_traces = 3 * (2 if d_grid is not None else 1)

    def annotations_for(frame: KVFrame) -> list[dict]:
        """Always three: the target's heading, the proposer's heading (or the no-cache caption),
        and the phase's events line (the frames replace exactly these three)."""
        snap = frame.snapshot
        title = PHASE_TITLES.get(frame.phase, frame.phase)
        cyc = f"Cycle {cycle + 1} · " if cycle is not None else ""  # 0-based in the trace, from 1 on screen
        if d_grid is not None:
            right = _panel_header(_summary(PANEL_TITLES.get(proposer, "Draft cache"), snap.draft, entries), x=0.53)
            second = f"{short}: {esc(frame.draft_events)}"
        else:
            # Top right, clear of the target's heading whatever the target grid's width.
            right = dict(_panel_header(NO_CACHE, x=1.0), xanchor="right", align="right", font=dict(color="#6b7280"))
            second = f"{short}: no cache"
        return [
            _panel_header(_summary("Target cache", snap.target), x=0.0),
            right,
            dict(
                text=f"<b>{cyc}{esc(title)}</b> — target: {esc(frame.target_events)}<br>{second}",
                x=0.0,
                y=0.0,
                xref="paper",
                yref="paper",
                xanchor="left",
                yanchor="top",
                yshift=-4,
                showarrow=False,
                align="left",
                font=dict(size=11, color="#374151"),
            ),
        ]

    legend_traces = [
        dict(
            type="scatter",
            x=[None],
            y=[None],
            mode="markers",
            name=state,
            marker=dict(symbol="square", size=12, color=SLOT_COLORS[state], line=dict(color="#9ca3af", width=1)),
        )
        for state in SLOT_ORDER
    ] + [
        dict(
            type="scatter",
            x=[None],
            y=[None],
            mode="markers",
            name="changed in this phase",
            marker=dict(symbol="square", size=12, color="#ffffff", line=dict(color="#111827", width=2)),
        )
    ]
    animated = len(frames) > 1
    top, bottom = 64, (150 if animated else 86)
    plot_h = ROW_PX * n_rows + 10
    height = top + bottom + plot_h

    def below(px: float) -> float:
        """Paper y coordinate `px` pixels below the plot area (paper coords scale with plot_h)."""
        return -px / plot_h

    def axes(grid: _Grid, left: float) -> tuple[dict, dict]:
        # Each grid gets the share of the width its columns need, so slots keep a square-ish pitch.
        share = _share(grid.width, grid.cap)
        hidden = dict(showgrid=False, zeroline=False, showticklabels=False, ticks="", showline=False, fixedrange=True)
        x = dict(domain=[left, left + share], range=[-0.5 - TAG_COLS, grid.width - 0.5], **hidden)
        y = dict(range=[n_rows - 0.5, -0.9], **hidden)
        return x, y

    x1, y1 = axes(t_grid, 0.0)
    layout = base_layout("", height)
    layout.update(
        margin=dict(l=28, r=10, t=top, b=bottom),
        legend=dict(orientation="h", x=1.0, xanchor="right", y=below(bottom - 22), yanchor="top", font=dict(size=11)),
        annotations=annotations_for(frames[current]),
        xaxis=x1,
        yaxis=y1,
        # When the app redraws this chart for the next phase, plotly.js tweens the change too.
        transition=dict(duration=TRANSITION_MS, easing="cubic-in-out"),
    )
    if d_grid is not None:
        x2, y2 = axes(d_grid, 0.53)
        layout.update(xaxis2=x2, yaxis2=dict(anchor="x2", **y2))
    if animated:
        step_args = dict(
            mode="immediate",
            # redraw after the tween: token labels and headings are not tweened, they switch at its end
            frame=dict(duration=0, redraw=True),
            transition=dict(duration=TRANSITION_MS, easing="cubic-in-out"),
        )
        layout.update(
            updatemenus=[
                dict(
                    type="buttons",
                    direction="left",
                    x=0.0,
                    xanchor="left",
                    y=below(44),
                    yanchor="top",
                    pad=dict(t=0, r=8),
                    showactive=False,
                    buttons=[
                        dict(
                            label="▶ Play cycle",
                            method="animate",
                            args=[
                                None,
                                dict(
                                    frame=dict(duration=FRAME_MS, redraw=True),
                                    fromcurrent=False,
                                    transition=dict(duration=TRANSITION_MS, easing="cubic-in-out"),
                                    mode="immediate",
                                ),
                            ],
                        ),
                        dict(
                            label="❚❚",
                            method="animate",
                            args=[
                                [None],
                                dict(
                                    frame=dict(duration=0, redraw=False), mode="immediate", transition=dict(duration=0)
                                ),
                            ],
                        ),
                    ],
                )
            ],
            sliders=[
                dict(
                    active=current,
                    x=0.2,
                    xanchor="left",
                    len=0.8,
                    y=below(40),
                    yanchor="top",
                    pad=dict(t=0, b=0),
                    currentvalue=dict(visible=False),
                    font=dict(size=10),
                    steps=[dict(label=f.phase, method="animate", args=[[f.phase], step_args]) for f in frames],
                )
            ],
        )
    hidden_rows = max(t_grid.hidden_rows, d_grid.hidden_rows if d_grid else 0)
    if hidden_rows:
        layout["annotations"] = layout["annotations"] + [
            dict(
                text=f"(showing the most recent {MAX_ROWS} rows)",
                x=1,
                y=0,
                xref="paper",
                yref="paper",
                xanchor="right",
                yanchor="top",
                showarrow=False,
                font=dict(size=10, color="#6b7280"),
            )
        ]
    return go.Figure(
        dict(
            data=traces_for(frames[current], frames[current - 1] if current else None) + legend_traces,
            layout=layout,
            frames=[
                dict(
                    name=f.phase,
                    data=traces_for(f, frames[i - 1] if i else None),
                    traces=list(range(n_traces)),
                    layout=dict(annotations=annotations_for(f) + layout["annotations"][3:]),
                )
                for i, f in enumerate(frames)
            ],
        ),
        _validate=False,
    )


def prefill_frame(target: CacheSnapshot, draft: CacheSnapshot | None) -> KVFrame:
    """A single frame for the state after prefill, before any cycle has run (`draft` None: the
    proposer keeps no cache)."""
    return KVFrame(
        "prefill",
        PhaseSnapshot("prefill", target, draft),
        "prefill of the prompt",
        "prefill of the prompt" if draft is not None else "",
    )


def _panel_header(text: str, x: float) -> dict:
    """A left-aligned caption sitting on top of one cache's panel (paper coordinates)."""
    return dict(
        text=text,
        x=x,
        y=1.0,
        xref="paper",
        yref="paper",
        xanchor="left",
        yanchor="bottom",
        showarrow=False,
        align="left",
    )
