"""What resolve drew from, as a table beside the narrative (viz/dist_table.py), on real tiny-pair
cycles: every printed number is the trace's own value, the drawn token and the rejected draft are
rows, a token outside a stored top-N says so, and the stage's narrative carries the table at resolve
only."""

from __future__ import annotations

from html.parser import HTMLParser

from test_kv_html import rejected_trace, run

from specviz.viz import dist_table, stage_data
from specviz.viz.style import fmt_p, show_token


class _Cells(HTMLParser):
    """The table's caption and its rows of cell texts (the header row first)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.caption, self.cell, self.in_caption = "", None, False

    def handle_starttag(self, name, attrs):
        if name == "tr":
            self.rows.append([])
        elif name in ("td", "th"):
            self.cell = ""
        elif name == "caption":
            self.in_caption = True

    def handle_endtag(self, name):
        if name in ("td", "th"):
            self.rows[-1].append(self.cell)
            self.cell = None
        elif name == "caption":
            self.in_caption = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data
        elif self.in_caption:
            self.caption += data


def cells(html: str) -> tuple[str, list[str], dict[str, list[str]]]:
    """(caption, headings, token label -> its numbers) of the table in `html`."""
    t = _Cells()
    t.feed(html)
    return t.caption, t.rows[0], {r[0]: r[1:] for r in t.rows[1:]}


def test_after_a_rejection_the_table_prints_p_q_and_the_normalised_residual():
    _, tr = rejected_trace(temperature=1.0, seed=3)
    j, d, drawn = tr.rejected_at, tr.drafts[tr.rejected_at - 1], tr.corrected_token
    caption, heads, rows = cells(dist_table.resolve_table(tr))
    assert heads == ["token", f"p{j}", f"q{j}", f"r{j}"] and f"r{j} = norm(max(0, p{j} − q{j}))" in caption
    assert len(rows) == dist_table.ROWS
    residual = {t.token_id: t.prob for t in tr.residual_top}
    assert rows[show_token(drawn.text, 10) + "drawn"][2] == fmt_p(residual[drawn.token_id])
    # the rejected draft: its own p and q are always recorded, and its residual is 0 (q > p there)
    assert rows[show_token(d.text, 10) + f"d{j} ✗"] == [fmt_p(d.target_prob), fmt_p(d.draft_prob), fmt_p(0.0)]
    p, q = ({t.token_id: t.prob for t in top} for top in (d.target_top, d.draft_top))
    shown = 0
    for t in tr.residual_top:  # every residual token shown: its p, q and r as the trace recorded them
        key = next((k for k in rows if k in (show_token(t.text, 10), show_token(t.text, 10) + "drawn")), None)
        if key is not None:
            shown += 1
            want = [fmt_p(p[t.token_id]) if t.token_id in p else "—", fmt_p(q[t.token_id]) if t.token_id in q else "—",
                    fmt_p(t.prob)]
            assert rows[key] == want, (key, rows[key], want)
    assert shown == dist_table.ROWS - 1  # the rest are the residual's most probable tokens


def test_after_all_passed_the_table_prints_p_k_plus_1_in_order_and_no_q():
    _, traces = run(temperature=1.0, seed=3, cycles=6)
    tr = next(t for t in traces if t.bonus_token is not None and t.drafts)
    caption, heads, rows = cells(dist_table.resolve_table(tr))
    k1 = len(tr.drafts) + 1
    assert heads == ["token", f"p{k1}"] and f"drawn from p{k1}" in caption
    p = {t.token_id: t.prob for t in tr.bonus_top}
    ranked = sorted(p, key=lambda t: -p[t])
    top = ranked[: dist_table.ROWS]
    if tr.bonus_token.token_id not in top:
        top = [*ranked[: dist_table.ROWS - 1], tr.bonus_token.token_id]
    assert [v[0] for v in rows.values()] == [fmt_p(p[t]) for t in top]
    assert rows[show_token(tr.bonus_token.text, 10) + "drawn"] == [fmt_p(p[tr.bonus_token.token_id])]


def test_at_temperature_0_there_is_no_residual_column_and_the_caption_says_why():
    _, tr = rejected_trace(temperature=0.0)
    caption, heads, rows = cells(dist_table.resolve_table(tr))
    j = tr.rejected_at
    assert heads == ["token", f"p{j}", f"q{j}"] and "T = 0" in caption and "argmax" in caption
    assert rows[show_token(tr.corrected_token.text, 10) + "drawn"][0] == fmt_p(1.0)


def test_a_plain_step_and_a_token_tree_and_the_prefill_get_no_residual():
    _, traces = run(temperature=1.0, seed=3, cycles=3, tree_width=2, tree_nodes=4)
    # a token tree resolves in its own panel
    assert all(tr.tree is not None and dist_table.resolve_table(tr) == "" for tr in traces)
    assert dist_table.resolve_table(None) == ""


def test_token_text_is_escaped():
    row = dist_table.Row(dist_table.TokenProb(7, 0.5, "<img src=x onerror=alert(1)>"), (0.5, None))
    html = dist_table.table_html([row], [dist_table.Column("p1", "#000", "t"), dist_table.Column("q1", "#000", "<b>")],
                                 7, "<b>cap</b>")
    assert "<img" not in html and "<b>" not in html and "&lt;b&gt;cap" in html
    assert dist_table.MISSING in html and "—" in html


def test_the_stage_shows_the_table_under_the_narrative_at_resolve_only():
    token_text, traces = run(temperature=1.0, seed=3, cycles=3)
    tl = stage_data.Timeline(prompt_ids=(1, 2, 3), prefill=(traces[0].snapshot("draft").target, None), traces=traces,
                             texts=token_text, proposer="draft")
    steps = stage_data.steps_payload(tl, range(1, 6), lecture=True, max_rows=3)
    has = {s["phase"]: "data-role='resolve-chart'" in s["story"] for s in steps.values()}
    assert has == {"draft": False, "verify": False, "accept": False, "resolve": True, "rollback": False}, has


def test_an_auto_runs_chip_names_the_k_the_cost_law_chose_for_the_cycle():
    """The status line's "K = auto" chip (ui/stage.py `settings_chip`) says, on each cycle's steps, the
    K that cycle's auto choice recorded; a fixed K and the prefill are left as they are."""
    import dataclasses

    from specviz.trace import AutoChoice

    token_text, traces = run(temperature=1.0, seed=3, cycles=2)
    chose = [dataclasses.replace(tr, auto=AutoChoice(k, 2.0, 1.5, 1.33, "why")) for tr, k in zip(traces, (3, 0))]
    suffix = f" · {stage_data.AUTO_CHIP} `T = 1` `draft model` `chain`"
    assert stage_data.chosen_k(suffix, chose[0]) == " · `K = 3 (auto)` `T = 1` `draft model` `chain`"
    assert stage_data.chosen_k(suffix, chose[1]).startswith(" · `K = 0 (auto)`")
    assert stage_data.chosen_k(suffix, None) == suffix  # the prefill: nothing chosen yet
    assert stage_data.chosen_k(" · `K = 4` `T = 1`", chose[0]) == " · `K = 4` `T = 1`"
    tl = stage_data.Timeline(prompt_ids=(1, 2, 3), prefill=(traces[0].snapshot("draft").target, None),
                             traces=tuple(chose), texts=token_text, proposer="draft", status_suffix=suffix)
    status = [s["status"] for s in stage_data.steps_payload(tl, range(1, 11), lecture=False, max_rows=3).values()]
    assert all("K = 3 (auto)" in s for s in status[:5]) and all("K = 0 (auto)" in s for s in status[5:])
