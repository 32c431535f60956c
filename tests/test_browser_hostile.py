"""Crafted run files in a real Chromium (Debian's /usr/bin/chromium through Playwright): no script runs.

A run file with a script payload in every free-text field (title, pair, prompt, every token's text,
notes, a timing's name: `hostile_runs.hostile_text`) passes the schema, since any text is valid
text there, and must be drawn as text:

* **the standalone run page** (viz/standalone.py), opened from disk and stepped through every step
  with the Next button, as a person clicks it;
* **the app**: the file opened through the sidebar's "Open a run file", then stepped with Next phase.

Each step checks that `window.__pwned` (what every payload sets) stays undefined and that no dialog
fired; the payload's characters are on the page as text (the header, the cells' `data-token`, the
token strip). A file with a payload in a *numeric* field is refused by the schema: the app says
where and what, shows no traceback, and keeps the run it had.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_runs import PAYLOADS, hostile_text, tiny_record, with_value
from test_browser import _button, _no_exception, _open, _status, _wait_idle, _watch_errors

from bench.load import CHROMIUM
from specviz.runfile import load_run
from specviz.viz.standalone import run_html

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
]

PWNED = "() => window.__pwned"


def _hostile_file(tmp_path: Path) -> Path:
    path = tmp_path / "hostile.run.json"
    path.write_text(json.dumps(hostile_text(tiny_record().to_dict())))
    return path


def _guard(page) -> list[str]:
    """Dialogs the page opens (an alert is how a payload would show itself), dismissed and listed."""
    dialogs: list[str] = []

    def seen(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", seen)
    return dialogs


def _assert_clean(page, dialogs: list[str], where: str) -> None:
    assert page.evaluate(PWNED) is None, f"a payload ran at {where}"
    assert not dialogs, (where, dialogs)
    injected = ".svs img, .svs svg, .svs iframe, img[src='x'], [onerror], [onload]"  # the app's own icons are svg
    assert page.evaluate(f'document.querySelectorAll("{injected}").length') == 0, where


def test_the_standalone_page_of_a_hostile_run_runs_no_script(browser, tmp_path) -> None:
    record = load_run(_hostile_file(tmp_path).read_text())  # through the schema: free text is valid
    path = tmp_path / "hostile.html"
    path.write_text(run_html(record))
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    dialogs = _guard(page)
    _watch_errors(page, errors, "file://")
    page.goto(path.as_uri())
    page.wait_for_function("() => window.__specvizStage && window.__specvizStage.state.cur === 0")
    _assert_clean(page, dialogs, "the prefill")
    assert record.title in page.inner_text("header")  # the payload's characters, as text
    last = 5 * len(record.traces)
    tokens: set[str] = set()
    for step in range(1, last + 1):
        page.locator("#next").click()
        page.wait_for_function(f"() => window.__specvizStage.state.cur === {step}")
        _assert_clean(page, dialogs, f"step {step}")
        tokens |= set(page.eval_on_selector_all(".svs [data-token]", "els => els.map(e => e.dataset.token)"))
    assert any(p.replace(" ", "␣") in t for t in tokens for p in PAYLOADS), sorted(tokens)[:3]
    page.close()
    assert not errors, errors


def test_the_app_opens_a_hostile_run_file_and_runs_no_script(server: str, browser, tmp_path) -> None:
    errors: list[str] = []
    page = _open(browser, server, errors)
    dialogs = _guard(page)
    page.locator(".st-key-run_file input[type=file]").set_input_files(str(_hostile_file(tmp_path)))
    page.wait_for_function(
        "() => { const e = document.querySelector('.svs .svs-status');"
        " return !!e && e.innerText.includes('imported run'); }",
        timeout=60_000,
    )
    _wait_idle(page)
    _assert_clean(page, dialogs, "opening the file")
    for step in range(1, 11):  # every phase of two cycles
        _button(page, "next_phase").click()
        _wait_idle(page)
        _no_exception(page, f"step {step}")
        _assert_clean(page, dialogs, f"step {step}")
    assert "cycle 2 of" in _status(page), _status(page)
    strip = page.locator(".svs .svs-strip").inner_text()
    assert "PWN" in strip and any(tag in strip for tag in ("<img", "<script>", "<svg")), strip[:300]

    # A payload where a number belongs is refused, with where and what, and the run stays.
    bad = tmp_path / "bad.run.json"
    data = with_value(json.loads(tiny_record().to_json()), ("traces", 0, "drafts", 0, "index"), PAYLOADS[0])
    bad.write_text(json.dumps(data))
    before = _status(page)
    page.locator(".st-key-run_file input[type=file]").set_input_files(str(bad))
    page.get_by_text("traces[0].drafts[0].index: expected an integer").wait_for(timeout=60_000)
    _wait_idle(page)
    _no_exception(page, "a refused file")
    _assert_clean(page, dialogs, "a refused file")
    assert _status(page) == before
    page.close()
    assert not errors, errors
