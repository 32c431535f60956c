"""What the resolve phase drew from, as a small table with its numbers, beside the narrative.

The Distributions tab draws p, q and the residual as plotly charts, but lecture mode has no tabs,
and bars without numbers teach little from the back row. So at resolve the stage puts this table
under the phase's narrative (`stage_data.step_payload`), HTML like the rest of the stage:

* after a rejection at d_j: the residual's top tokens with p_j (the target's probability), q_j
  (the proposer's) and r_j = norm(max(0, p_j − q_j)), the distribution the corrected token was drawn
  from (docs/design.md §1, "Resolve"). The rejected draft d_j is a row too: it failed because
  q_j > p_j there, so its r_j is 0, and the corrected token is never the draft it replaces.
  At T = 0 there is no residual: p and q are one-hot and the corrected token is argmax p_j.
* all K accepted: the top of p_{K+1}, the bonus token's distribution (no q: nothing was drafted
  there); with no proposal at all (k = 0), p_1 and the one token generated from it.

Each number is text (`fmt_p`), over a thin bar of its size against 1 in its distribution's colour
(viz/style.py). A token outside a distribution's stored top-N (`DecodeConfig.top_n`) has no recorded
value there: its cell says "—" and its tooltip why, never a made-up 0. Token trees resolve in their
own panel (viz/tree_view.py) and get no table here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..trace import CycleTrace, DraftStep, TokenProb
from .markup import esc, tag
from .style import BONUS_COLOR, DRAFT_COLOR, KIND_COLORS, RESIDUAL_COLOR, TARGET_COLOR, fmt_p, show_token

ROWS = 4  # tokens in the table, the drawn one always among them
MISSING = "outside the stored top-N"


@dataclass(frozen=True)
class Column:
    head: str  # the heading: "p5", "q5", "r5"
    color: str  # its bars' colour
    tip: str  # what it is, in words (the heading's tooltip)


@dataclass(frozen=True)
class Row:
    token: TokenProb
    values: tuple[float | None, ...]  # one per column; None = outside that distribution's stored top-N
    note: str = ""  # "drawn", "d5 ✗"


def _probs(tops: Sequence[TokenProb]) -> dict[int, float]:
    return {t.token_id: t.prob for t in tops}


def pick(lists: Sequence[Sequence[TokenProb]], must: Sequence[TokenProb], n: int = ROWS) -> list[TokenProb]:
    """`n` tokens: every token of `must`, then the most probable of the first list (then of the next
    ones), in the order of that ranking (a `must` token that no list holds comes last)."""
    ranked: dict[int, TokenProb] = {}
    for tops in lists:
        for t in sorted(tops, key=lambda t: -t.prob):
            ranked.setdefault(t.token_id, t)
    keep = {t.token_id: t for t in must}
    rest = [t for t in ranked if t not in keep][: max(0, n - len(keep))]
    shown = set(keep) | set(rest)
    order = [t for t in ranked if t in shown] + [t for t in keep if t not in ranked]
    return [ranked.get(t) or keep[t] for t in order]


def table_html(rows: Sequence[Row], cols: Sequence[Column], drawn: int, caption: str) -> str:
    """The table: a caption, then token | one number per column; the `drawn` token's row in bold."""
    head = tag("th", "token", scope="col") + "".join(
        tag("th", esc(c.head), cls="svd-num", scope="col", title=c.tip) for c in cols)
    body = []
    for row in rows:
        t = row.token
        tip = f"token {t.token_id} {t.text!r}" + "".join(
            f" · {c.head} = {MISSING if v is None else fmt_p(v)}" for c, v in zip(cols, row.values, strict=True))
        note = tag("span", esc(row.note), cls="svd-note") if row.note else ""
        cells = [tag("th", tag("span", esc(show_token(t.text, 10)), cls="svd-tok") + note, scope="row", title=tip)]
        for c, v in zip(cols, row.values, strict=True):
            if v is None:
                cells.append(tag("td", "—", cls="svd-num svd-none", title=MISSING))
            else:
                size = f"{100 * max(0.0, min(1.0, v)):.1f}%"
                cells.append(tag("td", esc(fmt_p(v)), cls="svd-num", style=f"--v:{size};--c:{c.color}"))
        body.append(tag("tr", "".join(cells), cls="svd-drawn" if t.token_id == drawn else None))
    return tag("table", tag("caption", esc(caption)) + tag("thead", tag("tr", head)) + tag("tbody", "".join(body)),
               cls="svd", data_role="resolve-chart")


def resolve_table(trace: CycleTrace | None) -> str:
    """The table for `trace`'s resolve phase (see the module docstring); "" for a token tree's cycle
    or a cycle that drew nothing."""
    if trace is None or trace.tree is not None:
        return ""
    if trace.rejected_at is not None and trace.corrected_token is not None:
        return _residual(trace, trace.drafts[trace.rejected_at - 1])
    token = trace.bonus_token or next((e for e in trace.emitted if e.kind == "generated"), None)
    if token is None or not trace.bonus_top:
        return ""
    i = len(trace.drafts) + 1
    p = _probs(trace.bonus_top)
    color = BONUS_COLOR if token.kind == "bonus" else KIND_COLORS["generated"]
    cols = [Column(f"p{i}", color, f"p{i}: the target's distribution at position {token.position}, from the "
                                   "verify pass")]
    drawn = TokenProb(token.token_id, 0.0, token.text)
    rows = [Row(t, (p.get(t.token_id),), "drawn" if t.token_id == token.token_id else "")
            for t in pick([trace.bonus_top], [drawn])]
    how = "the argmax of" if trace.temperature == 0 else "drawn from"
    caption = (f"All {i - 1} drafts passed: the bonus token is {how} p{i}" if trace.drafts else
               f"No proposal: the token is {how} p{i}")
    return table_html(rows, cols, token.token_id, caption)


def _residual(trace: CycleTrace, d: DraftStep) -> str:
    """p_j, q_j and the residual r_j at the rejected draft d_j (q and p one-hot at T = 0: no r)."""
    j, token = d.index, trace.corrected_token
    p = _probs(d.target_top) | {d.token_id: d.target_prob}  # the draft's own p and q are always recorded
    q = _probs(d.draft_top) | {d.token_id: d.draft_prob}
    r = _probs(trace.residual_top)
    greedy = trace.temperature == 0
    cols = [Column(f"p{j}", TARGET_COLOR, f"p{j}: the target's probability at position {token.position}"),
            Column(f"q{j}", DRAFT_COLOR, f"q{j}: the proposer's probability there")]
    if not greedy:
        cols.append(Column(f"r{j}", RESIDUAL_COLOR, f"r{j} = norm(max(0, p{j} − q{j})): the corrected token's "
                                                    "distribution"))
    rows = []
    for t in pick([trace.residual_top, d.target_top], [TokenProb(token.token_id, 0.0, token.text),
                                                        TokenProb(d.token_id, 0.0, d.text)]):
        pt, qt = p.get(t.token_id), q.get(t.token_id)
        # r is 0 exactly where q ≥ p, which the recorded values may show outside r's stored top-N
        rt = r.get(t.token_id, 0.0 if pt is not None and qt is not None and pt <= qt else None)
        note = "drawn" if t.token_id == token.token_id else f"d{j} ✗" if t.token_id == d.token_id else ""
        rows.append(Row(t, (pt, qt) if greedy else (pt, qt, rt), note))
    caption = (f"T = 0: p{j} and q{j} are one-hot; the corrected token is the argmax of p{j}" if greedy else
               f"The corrected token is drawn from r{j} = norm(max(0, p{j} − q{j})): what p{j} has beyond "
               f"q{j}, rescaled to sum to 1")
    return table_html(rows, cols, token.token_id, caption)
