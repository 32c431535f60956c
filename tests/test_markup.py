"""One escaping path (specviz/viz/markup.py): every HTML builder escapes what it interpolates.

A run with a script payload in every free-text field, and a run whose every number formats as a
payload (`hostile_runs.EvilInt` / `EvilFloat`: the schema bypassed, defence in depth), are drawn
by every view that builds markup: each step of the stage (KV picture, tree panel, token strip,
status line, narrative), in both layouts of the page, and the standalone run page. The markup is
parsed as a browser would tokenise it: no element or attribute a payload would create (`img`,
`svg`, a second `script`, an `on…` handler) may appear, and the payload's text must be there as text.
"""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser

import pytest
from hostile_runs import MARK, PAYLOADS, evil_numbers, hostile_text, tiny_record

from specviz.runfile import load_run
from specviz.viz import stage_data
from specviz.viz.markup import attrs, esc, label, tag
from specviz.viz.standalone import run_html, timeline

INJECTED = {"img", "svg", "iframe", "object", "embed", "math"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, name, attributes) -> None:
        self.tags.append((name, attributes))
        self.text.extend(v for _, v in attributes if v)

    def handle_data(self, data) -> None:
        self.text.append(data)


def assert_inert(markup: str, scripts: int = 0) -> str:
    """No element or handler a payload would create; returns the text a reader sees (attributes included)."""
    parsed = _Tags()
    parsed.feed(markup)
    names = [name for name, _ in parsed.tags]
    assert not INJECTED & set(names), sorted(INJECTED & set(names))
    assert names.count("script") == scripts
    handlers = [(name, a) for name, attributes in parsed.tags for a, _ in attributes if a.startswith("on")]
    assert not handlers, handlers[:3]
    return "".join(parsed.text)


def test_esc_escapes_text_attributes_and_numbers():
    assert esc("<b x='1' y=\"2\">&") == "&lt;b x=&#x27;1&#x27; y=&quot;2&quot;&gt;&amp;"
    assert esc(12) == "12" and esc(None) == "None"
    assert attrs(cls="a'b", data_key=3, hidden=True, title=None) == " class='a&#x27;b' data-key='3' hidden"
    assert tag("span", esc("<x>"), data_d="'><img>") == "<span data-d='&#x27;&gt;&lt;img&gt;'>&lt;x&gt;</span>"
    assert label('<b>"q"</b>') == '&lt;b&gt;"q"&lt;/b&gt;'


def _pages(record) -> list[str]:
    """Every step as the app's stage draws it (both layouts of the page) and the standalone page's body."""
    tl = timeline(record)
    out = []
    for lecture in (False, True):
        for step in stage_data.steps_payload(tl, range(tl.last_step + 1), lecture=lecture, max_rows=None).values():
            for part in stage_data.PARTS:  # every view of the step
                out += step[part.name] if isinstance(step[part.name], list) else [step[part.name]]
    return out


@pytest.mark.parametrize("tree_width", [1, 3])
def test_every_view_draws_a_payload_in_every_text_field_as_text(tree_width):
    record = load_run(json.dumps(hostile_text(tiny_record(tree_width).to_dict())))
    seen = "".join(assert_inert(part) for part in _pages(record))
    page = run_html(record)
    seen += assert_inert(page, scripts=1)
    for needle in (record.title, record.pair):
        assert needle in html.unescape(seen)
    marks = seen.count(MARK)
    assert marks > 50, marks  # token texts, drafts, notes drawn as text, many times over


def test_a_note_from_a_file_fetches_nothing_and_links_nowhere():
    """Markdown in a file's text (a proposer's note) stays text: no image from another host, no link."""
    data = json.loads(tiny_record(tree_width=3).to_json())  # a tree cycle's narrative quotes the note
    for trace in data["traces"]:
        trace["proposer_note"] = "see ![x](http://tracker.example/p.png) [here](http://e.example) <http://e.example>"
    parts = _pages(load_run(json.dumps(data)))
    assert any("tracker.example" in part for part in parts)  # the note is drawn, as text
    assert not any("<img" in part or "<a " in part for part in parts)


@pytest.mark.parametrize("tree_width", [1, 3])
def test_numbers_that_format_as_markup_are_escaped_too(tree_width):
    """The schema makes a file's integers integers; the views escape them anyway."""
    record = evil_numbers(tiny_record(tree_width))
    texts = []
    for part in _pages(record):
        texts.append(assert_inert(part))
    texts.append(assert_inert(run_html(record), scripts=1))
    assert any(PAYLOADS[0] in t for t in texts)  # the crafted numbers were drawn: as text
