"""What the stage component is sent: each step of a run as data the browser can show by itself.

A run is a timeline of steps (step 0 the prefill, then five per cycle: draft, verify, accept,
resolve, rollback; `specviz.timeline`). Every phase of a cycle is known the moment the cycle is
computed, so the browser gets them all at once and steps through them locally
(docs/design.md §3, "The stage"). One step is a plain dict:

    {"title": "Cycle 2 · 3 · Acceptance tests", "cycle": 1, "phase": "accept", "sig": 17,
     "kv": [picture_html, replay_html?], "status": html, "story": html, "strip": html}

`kv` holds the KV picture (`kv_html.kv_stage_html`, computed against the step before so that the
rows the phase changed carry `data-role="action"` and the window keeps them in view) and, when
comparing, the same step replayed into another cache layout. The payload model is "keyed cells in
slots", not "a cache of rows": every node that persists carries a stable `data-key` (a slot, a row,
a free-list chip, a draft column, a tree node), and the browser patches one step's picture into the
next by key, so persisting nodes transition and a node whose key reappears elsewhere glides there.

**What travels** (`pack`): a step's heavy part — its pictures, narrative and strip, ~50 kB of
HTML — never changes once rendered, so it gets a signature (`sig`, unique in the process) and
travels once: the browser says which signatures it holds (`have`) and the payload carries only the
others (and always the shown step's), deflated (the HTML repeats itself: ~10x smaller). The light
part (title, status line) comes with every payload. The standalone page, which has no server to
ask, gets every step whole.

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
BODY = ("kv", "story", "strip")  # a step's heavy part: sent once per signature (see `pack`)
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


def step_payload(tl: Timeline, step: int, *, lecture: bool, max_rows: int | None,
                 compare: Timeline | None = None) -> dict[str, Any]:
    """One step as the browser shows it (see the module docstring).

    The status line ("cycle 3 of 5") is made fresh; the rest — the pictures, the narrative, the
    strip — depends only on the step's trace, the trace before it (the picture is computed against
    the step before) and the drawing options, and is memoised by them in `tl.memo`."""
    cycle, phase = view_of(step, tl)
    tr = tl.traces[cycle] if cycle is not None else None
    traces = tl.traces[: max((cycle or 0) + 1, tl.adopted)]
    status = narrative.status_markdown(len(tl.prompt_ids), traces, cycle, phase, tl.proposer_label or tl.proposer)
    prev = tl.traces[cycle - 1] if cycle else None
    other = compare.traces[cycle] if compare is not None and cycle is not None and cycle < len(compare.traces) else None
    # id()s of objects the entry keeps alive (its value holds them): an id is never reused meanwhile.
    key = (id(tr), id(prev), id(other), phase, lecture, max_rows, tl.proposer, len(tl.prompt_ids), tl.texts)
    if key not in tl.memo:
        if len(tl.memo) > 400:
            tl.memo.clear()
        # A token tree's cycle adds its panel under the picture (viz/tree_view.py: keyed nodes, so the
        # compaction's moves glide); a compared layout shows only its own verify slots and moves.
        pictures = [_picture(tl, step, tr, phase, lecture, max_rows)
                    + tree_view.tree_panel_html(tr, phase, tl.texts, lecture=lecture)]
        if compare is not None and step <= compare.last_step:
            pictures.append(_picture(compare, step, other, phase, lecture, max_rows)
                            + tree_view.tree_panel_html(other, phase, compare.texts, lecture=lecture,
                                                        parts=("cache",)))
        # At resolve, what the token was drawn from, with its numbers, under the words that explain it.
        chart = dist_table.resolve_table(tr) if phase == "resolve" else ""
        if tr is None:
            target, proposer = tl.prefill
            story = narrative.prefill_markdown(len(tl.prompt_ids), target.seq_len,
                                               proposer.seq_len if proposer is not None else None, tl.proposer)
        else:
            story = narrative.phase_markdown(tr, phase)
        strip = tokens.strip_html(tokens.strip_chips(list(tl.prompt_ids), tl.traces[: (cycle or 0) + 1], tl.texts,
                                                     cycle, phase))
        # The jargon in the narrative explained where it stands (viz/glossary.py: hover, tap or Tab).
        story_html = glossary.explain(_MD.render(story)) + chart
        tl.memo[key] = ((tr, prev, other), next(_SIGNATURES), pictures, story_html, strip)
    _, sig, pictures, story, strip = tl.memo[key]
    return {
        "sig": sig, "title": title(cycle, phase), "cycle": cycle, "phase": phase, "kv": pictures,
        "status": _status_html(status + chosen_k(tl.status_suffix, tr)), "story": story, "strip": strip,
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
    heavy parts (`BODY`) of the signatures not in `have` and always the `shown` step's. A browser
    that does not hold a body it was not sent lacks that step, and asks for it like any step it
    lacks: the answer shows it, so its body comes with it.

    With `deflate`, `bodies` is base64 of deflated JSON (the browser inflates it with fflate): a
    component's data travels as it is. Without, a plain object, for an HTTP answer (the stage's
    route) that the web server gzips and the browser's network stack inflates off the page's
    main thread."""
    heads = {s: {k: v for k, v in d.items() if k not in BODY} for s, d in steps.items()}
    bodies = {str(d["sig"]): {k: d[k] for k in BODY} for s, d in steps.items()
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
