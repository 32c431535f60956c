"""What the stage component is sent: each step of a run as data the browser can show by itself.

A run is a timeline of steps (step 0 the prefill, then five per cycle: draft, verify, accept,
resolve, rollback; `specviz.timeline`). Every phase of a cycle is known the moment the cycle is
computed, so the browser gets them all at once and steps through them locally
(docs/design.md §3, "The stage"). One step is a plain dict: its head (`HEAD`) and its parts,
each a view of the step declared once in `PARTS` (its key, its builder, where and how the stage
draws it):

    {"title": "Cycle 2 · 3 · Acceptance tests", "cycle": 1, "phase": "accept", "sig": 17,
     "status": html, "kv": [picture_html, replay_html?], "story": html, "strip": html}

The app's stage, the standalone page and the follower page all take a step's parts from `PARTS`
(the payload's keys here, `pack`'s body, the standalone page's sections, the browser's table
`SV_PARTS`, `stage_js.parts_js`), so a new view is one entry there and its builder.

`kv` holds the KV picture (`kv_html.kv_stage_html`, computed against the step before so that the
rows the phase changed carry `data-role="action"` and the window keeps them in view) and, when
comparing, the same step replayed into another cache layout. The payload model is "keyed cells in
slots", not "a cache of rows": every node that persists carries a stable `data-key` (a slot, a row,
a free-list chip, a draft column, a tree node), and the browser patches one step's picture into the
next by key, so persisting nodes transition and a node whose key reappears elsewhere glides there.

**What travels** (`pack`): a step's heavy parts — its pictures, narrative and strip, ~50 kB of
HTML — never change once rendered, so they get a signature (`sig`, unique in the process) and
travel once: the browser says which signatures it holds (`have`) and the payload carries only the
others (and always the shown step's), deflated (the HTML repeats itself: ~10x smaller). The head and
the light parts (the status line) come with every payload. The standalone page, which has no server
to ask, gets every step whole.

Markdown (status line, narrative) is rendered here to HTML with markdown-it, HTML in the source
disabled (token texts inside the narrative are not ours). No Streamlit, no torch.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import zlib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from markdown_it import MarkdownIt

from .. import narrative
from ..stats import cycle_ms
from ..timeline import at, end_of, snapshot_at
from ..trace import CacheSnapshot, CycleTrace, PhaseSnapshot
from . import dist_table, glossary, kv_html, tokens, tree_view
from .style import PHASE_TITLES

# HTML off, and no images or links: a file's text (a proposer's note) must not fetch from or link
# to another host, and the narrative uses neither (docs/design.md §3, "The trust boundary").
_MD = MarkdownIt("commonmark", {"html": False}).disable(["image", "link", "autolink"])
_SIGNATURES = itertools.count(1)


@dataclass(frozen=True)
class Timeline:
    """The steps a browser may show, from any source: a live run (with its prefetched cycle), a
    recording, a replay. `real` counts the cycles the run has adopted: before the first one, step 0
    is the prefill (a prefetched first cycle does not turn it into "start of cycle 1"), and so it is
    on a page that shows a whole recording from its prefill (`prefill_at_zero`)."""

    prompt_ids: tuple[int, ...]
    prefill: tuple[CacheSnapshot, CacheSnapshot | None]
    traces: tuple[CycleTrace, ...]
    texts: Callable[[int], str]
    proposer: str
    proposer_label: str = ""
    real: int | None = None
    status_suffix: str = ""
    prefill_at_zero: bool = False  # a whole recorded run (the standalone page) opens on its prefill
    # Rendered parts of steps, by the identity of the traces they show: a session passes the same dict
    # to each new Timeline of a run, so a new cycle renders only its own steps (see `step_payload`).
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def adopted(self) -> int:
        return len(self.traces) if self.real is None else self.real

    @property
    def started(self) -> bool:
        """Step 0 is the start of cycle 1, not the prefill (`timeline.at`)."""
        return bool(self.adopted) and not self.prefill_at_zero

    @property
    def last_step(self) -> int:
        return end_of(len(self.traces))


def view_of(step: int, tl: Timeline) -> tuple[int | None, str]:
    """(cycle or None before the first, phase) of a step, as `specviz.ui.state.view_of`."""
    return at(step, tl.started)


def snapshots(tl: Timeline, step: int) -> PhaseSnapshot:
    return snapshot_at(step, tl.prefill, tl.traces, tl.started)


def title(cycle: int | None, phase: str) -> str:
    """The picture's heading: 'Prefill' or 'Cycle 2 · 3 · Acceptance tests'."""
    words = PHASE_TITLES.get(phase, phase)
    return words if cycle is None else f"Cycle {cycle + 1} · {words}"


def intro_html(target: str, proposer: str) -> str:
    """The first screen for someone alone (the stage shows it until it is dismissed, once per
    browser): what the two models are, what to press first, what to watch in the picture."""
    return _MD.render(
        f"**New here? Two models share the work.** The *target* ({target}) is the model whose text we want; "
        f"the *proposer* ({proposer}) cheaply guesses the next few tokens. Speculative decoding keeps the "
        "target's output exactly as it would have been, but asks it only once per guess of several tokens.\n\n"
        "1. Press **Next phase** (or the → key) to step through one cycle: the proposer drafts, the target "
        "checks every draft in one pass, a random test accepts or rejects each, and the caches roll back.\n"
        "2. Watch the picture: each cell is one slot of a KV cache (what a model keeps of the text it has read, so "
        "it need not read it again) — solid = committed, striped with *P* = provisional, hatched with ✕ = stale "
        "(past the valid length). Under the caches, each draft gets its verdict; beside them, the text explains "
        "the phase with the run's own numbers.\n"
        "3. **Next cycle** (Shift+→) jumps a whole cycle; the **Scenario gallery** in the sidebar loads runs "
        "where a rejection, a bonus token or a freed block happens by itself.")


def window(view: int, tl: Timeline, ahead: int) -> range:
    """The steps sent with the page: the shown cycle's phases, the step before it (the previous
    cycle's rollback) and the next `ahead` cycles' (the server computes that many in advance:
    ui/state.py `PREFETCH_DEPTH`), when computed — a sliding window, not the whole run."""
    cycle = at(view, True)[0]  # step 0: the first cycle's start
    lo = end_of(cycle)
    hi = min(tl.last_step, end_of(cycle + 1 + ahead))
    return range(lo, max(lo, hi) + 1)


@dataclass(frozen=True)
class StepView:
    """One step as a part's builder sees it: the step, its cycle's trace and how the page draws it."""

    tl: Timeline
    step: int
    cycle: int | None
    phase: str
    trace: CycleTrace | None
    lecture: bool
    max_rows: int | None
    compare: Timeline | None = None  # "Compare side by side": the same run replayed into another layout
    other: CycleTrace | None = None  # ... and its trace of this cycle


REGIONS = ("pics", "side", "foot")  # the stage's picture column, the narrative's column beside it, under both
HEAD = ("sig", "title", "cycle", "phase", "compute_ms")  # a step's own fields, beside its parts


@dataclass(frozen=True)
class Part:
    """One view of a step, declared once (`PARTS`): its key in the step's data, its builder, and
    where and how the stage draws it. The app's stage, the standalone page and the follower page
    all read this table (the browser as `SV_PARTS`, `stage_js.parts_js`): a new view is one entry
    here and its builder."""

    name: str
    build: Callable[[StepView], str | list[str]]
    region: str  # one of REGIONS
    patch: bool = False  # patched in place by key (morphdom: nodes transition, moved ones glide); else replaced
    many: int = 0  # a list of up to this many fragments, each in a slot of its own (a compared layout's picture)
    # Depends only on the step's trace and the drawing options: rendered once (memoised) and sent once
    # per signature (`pack`). Else made afresh for every payload and patched on the step shown (the
    # status line: "cycle 3 of 5 computed").
    heavy: bool = True
    css: str = ""  # its slot's class in the stage (default `svs-<name>`)
    attrs: tuple[tuple[str, str], ...] = ()  # hooks on its slot (tests, assistive technology)

    def __post_init__(self) -> None:
        if self.region not in REGIONS or self.name in HEAD or not self.name.isidentifier():
            raise ValueError(f"part {self.name!r}: a new name (not one of {HEAD}) in one of {REGIONS}")

    def spec(self) -> dict[str, Any]:
        """What the browser is told of it (everything but the builder)."""
        return {"name": self.name, "region": self.region, "patch": self.patch, "many": self.many, "heavy": self.heavy,
                "css": self.css or f"svs-{self.name}", "attrs": dict(self.attrs)}


def _pictures(v: StepView) -> list[str]:
    """The KV picture and, comparing, the same step replayed into another cache layout. A token tree's
    cycle adds its panel under the picture (viz/tree_view.py: keyed nodes, so the compaction's moves
    glide); a compared layout shows only its own verify slots and moves."""
    pictures = [_picture(v.tl, v.step, v.trace, v.phase, v.lecture, v.max_rows)
                + tree_view.tree_panel_html(v.trace, v.phase, v.tl.texts, lecture=v.lecture)]
    if v.compare is not None and v.step <= v.compare.last_step:
        pictures.append(_picture(v.compare, v.step, v.other, v.phase, v.lecture, v.max_rows)
                        + tree_view.tree_panel_html(v.other, v.phase, v.compare.texts, lecture=v.lecture,
                                                    parts=("cache",)))
    return pictures


def _status(v: StepView) -> str:
    """The status line ("cycle 3 of 5"): counts the cycles computed so far, so it is made fresh."""
    tl = v.tl
    traces = tl.traces[: max((v.cycle or 0) + 1, tl.adopted)]
    text = narrative.status_markdown(len(tl.prompt_ids), traces, v.cycle, v.phase, tl.proposer_label or tl.proposer)
    return _status_html(text + chosen_k(tl.status_suffix, v.trace))


def _story(v: StepView) -> str:
    """The narrative: the phase explained with the run's own numbers, its jargon explained where it
    stands (viz/glossary.py: hover, tap or Tab) and, at resolve, what the token was drawn from, with
    its numbers, under the words that explain it (viz/dist_table.py)."""
    if v.trace is None:
        target, proposer = v.tl.prefill
        story = narrative.prefill_markdown(len(v.tl.prompt_ids), target.seq_len,
                                           proposer.seq_len if proposer is not None else None, v.tl.proposer)
    else:
        story = narrative.phase_markdown(v.trace, v.phase)
    chart = dist_table.resolve_table(v.trace) if v.phase == "resolve" else ""
    return glossary.explain(_MD.render(story)) + chart


def _strip(v: StepView) -> str:
    """The generated text so far, token by token."""
    tl = v.tl
    return tokens.strip_html(tokens.strip_chips(list(tl.prompt_ids), tl.traces[: (v.cycle or 0) + 1], tl.texts,
                                                v.cycle, v.phase))


# A step's parts, in reading order (the standalone page's sections follow it; in the stage each part
# goes to its region, in this order within it).
PARTS: tuple[Part, ...] = (
    Part("status", _status, region="side", heavy=False),
    Part("kv", _pictures, region="pics", patch=True, many=2, css="svs-pic"),
    Part("story", _story, region="side", attrs=(("data-role", "narrative"), ("aria-live", "polite"))),
    Part("strip", _strip, region="foot"),
)


def body_keys() -> tuple[str, ...]:
    """The keys of a step's heavy parts: sent once per signature (see `pack`)."""
    return tuple(p.name for p in PARTS if p.heavy)


def step_payload(tl: Timeline, step: int, *, lecture: bool, max_rows: int | None,
                 compare: Timeline | None = None) -> dict[str, Any]:
    """One step as the browser shows it: its head (`HEAD`) and each of `PARTS` by name.

    The light parts (the status line) are made fresh; the heavy ones depend only on the step's
    trace, the trace before it (the picture is computed against the step before) and the drawing
    options, and are memoised by them in `tl.memo`."""
    cycle, phase = view_of(step, tl)
    tr = tl.traces[cycle] if cycle is not None else None
    prev = tl.traces[cycle - 1] if cycle else None
    other = compare.traces[cycle] if compare is not None and cycle is not None and cycle < len(compare.traces) else None
    view = StepView(tl, step, cycle, phase, tr, lecture, max_rows, compare, other)
    parts = PARTS
    # id()s of objects the entry keeps alive (its value holds them): an id is never reused meanwhile.
    key = (id(tr), id(prev), id(other), phase, lecture, max_rows, tl.proposer, len(tl.prompt_ids), tl.texts, parts)
    if key not in tl.memo:
        if len(tl.memo) > 400:
            tl.memo.clear()
        tl.memo[key] = ((tr, prev, other), next(_SIGNATURES), {p.name: p.build(view) for p in parts if p.heavy})
    _, sig, heavy = tl.memo[key]
    return {
        "sig": sig, "title": title(cycle, phase), "cycle": cycle, "phase": phase,
        **heavy, **{p.name: p.build(view) for p in parts if not p.heavy},
        # What computing this step's cycle took on the server (the latency bench compares with it).
        "compute_ms": round(cycle_ms(tr), 1) if tr is not None else None,
    }  # fmt: skip


AUTO_CHIP = "`K = auto`"  # the settings chip of a k="auto" run (ui/stage.py `settings_chip`)


def chosen_k(suffix: str, tr: CycleTrace | None) -> str:
    """The status line's settings chips with an auto run's "K = auto" naming what the cost law chose
    for this cycle ("K = 3 (auto)", a tree's node budget "16 nodes (auto)"); before the first cycle,
    "K = auto"."""
    if tr is None or tr.auto is None or AUTO_CHIP not in suffix:
        return suffix
    k = f"{tr.auto.k} nodes" if tr.tree is not None else f"K = {tr.auto.k}"
    return suffix.replace(AUTO_CHIP, f"`{k} (auto)`")


@functools.lru_cache(maxsize=2048)
def _status_html(text: str) -> str:
    """A status line rendered (every step of every payload has one, and most recur unchanged)."""
    return _MD.render(text)


def _picture(tl: Timeline, step: int, tr: CycleTrace | None, phase: str, lecture: bool, max_rows: int | None) -> str:
    before = snapshots(tl, step - 1) if step > 0 else None
    return kv_html.kv_stage_html(
        snapshots(tl, step), before, tl.texts, trace=tr, phase=phase, proposer=tl.proposer, lecture=lecture,
        max_rows=max_rows, inline_css=False,
    )  # fmt: skip


def steps_payload(tl: Timeline, steps: Iterable[int], *, lecture: bool, max_rows: int | None,
                  compare: Timeline | None = None) -> dict[str, dict[str, Any]]:
    """Several steps, keyed by their index as a string (JSON object keys)."""
    return {str(s): step_payload(tl, s, lecture=lecture, max_rows=max_rows, compare=compare)
            for s in steps if 0 <= s <= tl.last_step}


def pack(steps: dict[str, dict[str, Any]], have: Collection[int] = (), shown: int | None = None,
         deflate: bool = True) -> dict[str, Any]:
    """Steps as the component is sent them: `steps` without their heavy part, and `bodies`, the
    heavy parts (`body_keys`) of the signatures not in `have` and always the `shown` step's. A browser
    that does not hold a body it was not sent lacks that step, and asks for it like any step it
    lacks: the answer shows it, so its body comes with it.

    With `deflate`, `bodies` is base64 of deflated JSON (the browser inflates it with fflate): a
    component's data travels as it is. Without, a plain object, for an HTTP answer (the stage's
    route) that the web server gzips and the browser's network stack inflates off the page's
    main thread."""
    body = body_keys()
    heads = {s: {k: v for k, v in d.items() if k not in body} for s, d in steps.items()}
    bodies = {str(d["sig"]): {k: d[k] for k in body} for s, d in steps.items()
              if d["sig"] not in have or s == str(shown)}
    if not deflate:
        return {"steps": heads, "bodies": bodies}
    raw = json.dumps(bodies, separators=(",", ":"), ensure_ascii=False).encode()
    return {"steps": heads, "bodies": base64.b64encode(zlib.compress(raw, 6)).decode("ascii")}


def unpack(packed: dict[str, Any], held: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """`pack`'s inverse: whole steps, the missing bodies taken from `held` (signature -> body, as
    the browser keeps them). A step whose body is in neither is left out."""
    sent = packed["bodies"]
    if isinstance(sent, str):
        sent = json.loads(zlib.decompress(base64.b64decode(sent)))
    bodies = {**(held or {}), **sent}
    return {s: {**h, **bodies[str(h["sig"])]} for s, h in packed["steps"].items() if str(h["sig"]) in bodies}
