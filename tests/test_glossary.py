"""The glossary (viz/glossary.py): one table of the stage's jargon, marked up in place."""

from __future__ import annotations

import re

from test_kv_html import CYCLE_PHASES, _kv_stage_html, rejected_trace, run

from specviz.viz import glossary, stage_data

ABBR = re.compile(r"<abbr class='svs-gloss' title='([^']*)' tabindex='0'>([^<]*)</abbr>")


def test_the_issues_terms_each_have_one_entry():
    names = [t.name for t in glossary.TERMS]
    assert len(names) == len(set(names))
    for term in ("K/V", "logits", "x_n", "block table", "residual", "U(0,1)", "catch-up", "features", "one-hot",
                 "allocated · held · valid"):
        assert term in names, term


def test_the_first_occurrence_of_each_term_is_explained_and_markup_is_left_alone():
    html = ("<p>The <code>residual</code> keeps <em>K/V</em> of x_n; the residual again, K/V again. "
            "<a href='#'>logits</a> <abbr title='x'>stale</abbr> U(0,1)</p>")
    out = glossary.explain(html)
    marked = ABBR.findall(out)
    assert [text for _, text in marked] == ["K/V", "x_n", "residual", "U(0,1)"], marked
    assert "<code>residual</code>" in out and "<a href='#'>logits</a>" in out and "<abbr title='x'>stale</abbr>" in out
    assert re.sub(ABBR, lambda m: m.group(2), out) == html  # only the marks were added
    meaning = {t.name: t.meaning for t in glossary.TERMS}
    assert marked[2][0] == meaning["residual"].replace("'", "&#x27;")


def test_text_from_a_file_stays_text():
    """A token's or a note's text reaches here escaped: a term inside it is marked, nothing else changes."""
    hostile = "&lt;img src=x onerror=alert(1)&gt; residual"
    out = glossary.explain(f"<p>{hostile}</p>")
    assert "<img" not in out and out.count("<abbr") == 1


def test_the_stage_explains_its_jargon_in_the_narrative_and_the_cache_headings():
    token_text, tr = rejected_trace(temperature=1.0, seed=3)
    before = tr.snapshot(CYCLE_PHASES[CYCLE_PHASES.index("verify") - 1])
    heading = ABBR.findall(_kv_stage_html(tr.snapshot("verify"), before, token_text, trace=tr, phase="verify",
                                          proposer=tr.proposer))
    assert {"provisional", "block_table", "allocated"} <= {text for _, text in heading}, heading
    token_text, traces = run(temperature=1.0, seed=3, cycles=2)
    tl = stage_data.Timeline(prompt_ids=(1, 2, 3), prefill=(traces[0].snapshot("draft").target, None),
                             traces=traces, texts=token_text, proposer="draft")
    stories = [s["story"] for s in stage_data.steps_payload(tl, range(1, 6), lecture=False, max_rows=6).values()]
    explained = {text for story in stories for _, text in ABBR.findall(story)}
    assert {"K/V", "logits", "residual"} & explained and len(explained) >= 4, explained
