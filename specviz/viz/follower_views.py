"""A live lecture's other views on a student's page: the app's tabs, for the step the student looks at.

The follower page (`viz/follower`) shows the room's stage; under it, as in the app, tabs open the
**Distributions** of the cycle on screen (the app's own figures, `cycle_charts`: q of every draft,
from verify on min(1, p/q), p against q at one draft position, from resolve on the residual or
p_{K+1}), the **Statistics** of the cycles done by that step (acceptance per cycle and per draft
position, tokens per cycle or per verify pass, time per cycle, the cycle history: `specviz.stats`,
`viz/statistics`) and the **Misconceptions** (static text, drawn into the page once).

A view is a pure function of the room's cycles (`Room.traces`: the lecturer's run, held once), the
step and, for the distributions, the draft position compared: every student at the same step asks
for the same view, so the route builds each one once for the whole room (`View.key`, the cache in
`ui/live_route`). Only a step the lecturer has shown can be asked for (the room refuses the rest),
and the phase rules are the app's (`timeline.reached`): nothing is revealed before its phase.

A view travels as its HTML (built through `markup`: run records are untrusted input) with a
placeholder per figure, and the figures as plotly JSON, which the page draws with the plotly.js
of the installed `plotly` package, served by the live route itself (no CDN: a classroom may have
no internet).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence

import plotly.io as pio
from markdown_it import MarkdownIt

from ..narrative import MISCONCEPTIONS
from ..stats import AcceptanceStats, SpeedupReport, acceptance_stats, cycle_costs, cycle_rows, measured_speedup
from ..timeline import PHASES_PER_CYCLE, at, reached
from ..trace import CycleTrace
from . import statistics
from .cycle_charts import cycle_figures
from .markup import esc, tag

TABS = ("charts", "stats")  # the views built per step (the misconceptions are the same at every step)
_MD = MarkdownIt("commonmark", {"html": False}).disable(["image", "link", "autolink"])  # escapes all text
HISTORY_COLUMNS = ("cycle", "K", "accepted", "rejected at", "committed", "last token", "note", "forced", "ms")


@dataclasses.dataclass(frozen=True)
class View:
    """One view as the page draws it: `html` with a `<div class='svf-fig' data-fig='i'>` per figure,
    and the figures as plotly JSON. `key` says what it shows: the page redraws only when it changes."""

    key: str
    html: str
    figures: tuple[str, ...] = ()

    def json(self) -> bytes:
        """The route's answer, the figures' JSON spliced in as it is (never parsed and re-encoded)."""
        head = json.dumps({"key": self.key, "html": self.html})[:-1]
        return f'{head}, "figures": [{", ".join(self.figures)}]}}'.encode()


def view(tab: str, traces: Sequence[CycleTrace], started: bool, step: int, pos: int | None = None) -> View:
    """The `tab` view ("charts" or "stats") at `step` of the run whose cycles are `traces`."""
    if tab == "charts":
        return charts(traces, started, step, pos)
    if tab == "stats":
        return stats(traces, started, step)
    raise ValueError(f"no view {tab!r}: one of {', '.join(TABS)}")


def view_key(tab: str, traces: Sequence[CycleTrace], started: bool, step: int, pos: int | None = None) -> str:
    """What the view at `step` depends on (cheap: the route's cache is keyed by it, before building)."""
    if tab == "stats":
        return f"stats:{_done(traces, started, step)}"
    cycle, phase = at(step, started)
    if cycle is None or cycle >= len(traces) or phase == "start":
        return "charts:none"
    options = [d.index for d in traces[cycle].drafts]
    shown = reveals(phase)
    return f"charts:{cycle}:{shown}:{pos if pos in options else (traces[cycle].rejected_at or 1)}"


def reveals(phase: str) -> str:
    """The phase whose charts `phase` shows: rollback reveals nothing the resolve phase did not."""
    return "resolve" if reached(phase, "resolve") else phase


# ---------------------------------------------------------------- distributions ----------------


def charts(traces: Sequence[CycleTrace], started: bool, step: int, pos: int | None = None) -> View:
    """The cycle on screen at `step`: the app's Distributions tab, as far as its phase reveals."""
    key = view_key("charts", traces, started, step, pos)
    cycle = at(step, started)[0]
    if key == "charts:none":
        return View(key, _note("The distributions describe one cycle: step into a cycle's draft phase to see them."))
    tr = traces[cycle]
    _, _, phase, shown = key.split(":")
    shown = int(shown)
    figures = cycle_figures(tr, phase, shown)
    parts = [tag("h2", esc(f"Cycle {cycle + 1}: its distributions")), _fig(0)]
    if "acceptance" not in figures:
        parts.append(_note("The target has not scored the drafts yet: the acceptance tests appear at verify."))
        return View(key, "".join(parts), _figures(figures))
    parts.append(_fig(1))
    if "p_vs_q" in figures:
        parts.append(_positions([d.index for d in tr.drafts], shown) + _fig(2))
    else:
        parts.append(_note("No proposal this cycle, so there is no p against q: the target took one plain step "
                           "and its p1 gave the next token."))
    if "resolve" in figures:
        parts.append(_fig(len(figures) - 1))
    elif "p_vs_q" in figures:
        parts.append(_note("After the tests: the residual norm(max(0, p_j − q_j)) at a rejection, or p_{K+1} "
                           "for the bonus token when all K pass."))
    return View(key, "".join(parts), _figures(figures))


def _positions(options: list[int], shown: int) -> str:
    """The draft positions p and q can be compared at, the one shown pressed."""
    buttons = "".join(tag("button", esc(f"d{i}"), type="button", cls="svf-pos", data_pos=i,
                          aria_pressed="true" if i == shown else "false") for i in options)
    return tag("div", tag("span", "Compare p and q at draft position") + buttons, cls="svf-positions",
               role="group", aria_label="Draft position compared")


# ---------------------------------------------------------------- statistics -------------------


def stats(traces: Sequence[CycleTrace], started: bool, step: int) -> View:
    """The cycles done by `step` (their rollback shown): the app's Statistics tab without what the
    room does not hold (the lecturer's baseline run and the machine's cost law)."""
    key = view_key("stats", traces, started, step)
    done = list(traces[: _done(traces, started, step)])
    st = acceptance_stats(done)
    if not done:
        return View(key, _note("Statistics appear once a cycle has been stepped through to its rollback."))
    if st.cycles == 0:
        return View(key, _note("Every cycle so far was forced (what-if): statistics count exact cycles only."))
    figures = []
    report = measured_speedup(done, None)  # the room holds no baseline run: no measured speedup
    heading = tag("h2", esc(f"Statistics of the {len(done)} cycle{'s' if len(done) > 1 else ''} done"))
    parts = [heading, _metrics(st, report)]
    if st.chain_cycles:  # α, its histogram and the theory describe chains (specviz.stats)
        figures.append(statistics.stats_figure(st))
        parts.append(_fig(0, wide=True))
    if st.tree_cycles:
        parts.append(_note(f"{st.tree_cycles} token-tree cycle(s) verified {st.tree_nodes} nodes and accepted "
                           f"{st.tree_path_tokens} path tokens: a tree's nodes are alternatives, not drafts in a row, "
                           "so they stay out of α and the histogram; their figure is tokens per verify pass."))
    figures.append(statistics.cycle_time_figure(cycle_costs(done)))
    parts += [_fig(len(figures) - 1), tag("h3", "Cycle history"), _history(done)]
    return View(key, "".join(parts), tuple(_json(f) for f in figures))


def _done(traces: Sequence[CycleTrace], started: bool, step: int) -> int:
    """Cycles whose rollback `step` has shown (what the statistics count, as the app's `cycles_shown`)."""
    return min(len(traces), step // PHASES_PER_CYCLE) if started else 0


def _metrics(st: AcceptanceStats, report: SpeedupReport) -> str:
    if st.tree_cycles:  # token trees: tokens per verify pass is the figure (specviz.stats)
        pairs = [("Tokens per verify pass", f"{st.tokens_per_cycle:.2f}"),
                 ("Tree nodes per pass", f"{st.tree_nodes / st.tree_cycles:.1f}"),
                 ("Accepted path length", f"{st.tree_path_tokens / st.tree_cycles:.2f}")]
    else:  # α needs a tested draft: plain steps alone (lookup without a match) have none
        pairs = [("Acceptance rate α", f"{st.alpha:.3f}" if st.tested else "—"),
                 ("Tokens per cycle", f"{st.tokens_per_cycle:.2f}"),
                 ("Theory: E[tokens/cycle]", f"{report.expected_tokens_per_cycle:.2f}")]
    pairs.append(("Cycles counted", str(st.cycles)))
    items = "".join(tag("div", tag("dt", esc(name)) + tag("dd", esc(value))) for name, value in pairs)
    return tag("dl", items, cls="svf-metrics")


def _history(done: Sequence[CycleTrace]) -> str:
    rows = cycle_rows(done)
    head = tag("tr", "".join(tag("th", esc(c), scope="col") for c in HISTORY_COLUMNS))
    body = "".join(tag("tr", "".join(tag("td", esc(r[c])) for c in HISTORY_COLUMNS)) for r in rows)
    table = tag("table", tag("thead", head) + tag("tbody", body), cls="svf-history")
    return tag("div", table, cls="svf-scroll", tabindex=0, role="region", aria_label="Cycle history")


# ---------------------------------------------------------------- misconceptions ---------------


@functools.cache
def myths_html() -> str:
    """The misconceptions of the common walkthrough with their corrections (the app's tab)."""
    intro = tag("p", esc("The classic walkthrough of the cache bookkeeping gets these wrong. specviz shows the "
                         "precise version:"))
    items = "".join(tag("li", tag("s", _MD.renderInline(m.claim)) + tag("div", _MD.renderInline(m.correction)))
                    for m in MISCONCEPTIONS)
    return tag("h2", "Common misconceptions") + intro + tag("ul", items, cls="svf-myths")


# ---------------------------------------------------------------- pieces -----------------------


def _fig(i: int, wide: bool = False) -> str:
    """A figure's place; a `wide` one (three panels) scrolls sideways on a phone rather than shrink."""
    if wide:
        return tag("div", tag("div", "", cls="svf-fig svf-wide", data_fig=i), cls="svf-scroll")
    return tag("div", "", cls="svf-fig", data_fig=i)


def _note(text: str) -> str:
    return tag("p", esc(text), cls="svf-note")


def _figures(figures: dict) -> tuple[str, ...]:
    return tuple(_json(f) for f in figures.values())


def _json(fig: object) -> str:
    return pio.to_json(fig, validate=False, engine="json")
