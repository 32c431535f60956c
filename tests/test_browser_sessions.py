"""One session per browser, in two real browsers (issue 33, part 6b): Debian's headless Chromium through
Playwright, two contexts (two browsers: separate cookies and storage) on one `streamlit run app.py`
with the tiny pair.

Observed before: after a browser's connection dropped and came back, two browsers drove one session
(B changed the seed and A's stage switched to B's run): while A was away, B opened A's address, which
carried the session's token, and took A's workspace over; A's session then reconnected to it.

Each try here: A steps to its own place and B to another; A's connection drops (the context goes
offline and its websockets are closed, as a Wi-Fi blip does); meanwhile B reloads its page (its own
run comes back) and opens A's address in a new tab (a fresh run: the address names nothing); A comes
back online and reconnects. Then every page steps once more and must move only its own run: A from
its step, B from its step, the new tab from the start, each server answer (the payload's `view`)
following its own page. `TRIES` tries, all must pass (the figure the issue asks for: 10 of 10).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.load import CHROMIUM

STATUS = "[data-testid='stStatusWidget']"
TRIES = int(os.environ.get("SPECVIZ_SESSION_TRIES", "3"))  # 10 for the figure (slow: ~25 s a try)
# Every websocket the page opens, so that a test can drop the connection as the network would.
RECORD_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  window.__svSockets = [];
  window.WebSocket = function (...args) { const ws = new Native(...args); window.__svSockets.push(ws); return ws; };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
})();
"""

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
]


def _page(context, url: str, errors: list[str]):
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="domcontentloaded")
    _settled(page)
    return page


def _settled(page) -> None:
    """The page's script run is over, its stage holds data and waits for no answer, and the server's
    last payload shows the step on screen (the stage reported it)."""
    page.locator(".st-key-next_phase button").first.wait_for()
    page.wait_for_selector(STATUS, state="detached")
    page.wait_for_function(
        "() => { const s = window.__specvizStage && window.__specvizStage.state;"
        " return !!(s && s.data) && !s.waiting && s.queue.length === 0 && s.data.view === s.cur; }"
    )


def _cur(page) -> int:
    return page.evaluate("window.__specvizStage.state.cur")


def _step(page, key: str) -> None:
    """Click a step button like a person and wait until the server's payload shows where it went."""
    before = _cur(page)
    page.locator(f".st-key-{key} button").first.click()
    page.wait_for_function(f"() => window.__specvizStage.state.cur !== {before}")
    _settled(page)


def _drop(context, page) -> int:
    """The network goes (offline), and the page's open websockets with it; returns how many there were."""
    context.set_offline(True)
    return page.evaluate(
        "() => { const open = window.__svSockets.filter(s => s.readyState === 1); open.forEach(s => s.close());"
        " window.__svDropped = window.__svSockets.length; return open.length; }"
    )


def _restore(context, page) -> None:
    context.set_offline(False)
    page.wait_for_function(
        "() => window.__svSockets.slice(window.__svDropped).some(s => s.readyState === 1)", timeout=120_000
    )
    _settled(page)


def _one_try(browser, url: str, errors: list[str]) -> dict:
    a_ctx, b_ctx = browser.new_context(), browser.new_context()
    for ctx in (a_ctx, b_ctx):
        ctx.add_init_script(RECORD_SOCKETS)
    try:
        a, b = _page(a_ctx, url, errors), _page(b_ctx, url, errors)
        _step(a, "next_cycle")
        _step(a, "next_cycle")
        _step(b, "next_phase")
        a_at, b_at = _cur(a), _cur(b)
        assert (a_at, b_at) == (10, 1)
        dropped = _drop(a_ctx, a)
        b.reload(wait_until="domcontentloaded")  # B's reload while A is away: B's own run comes back
        _settled(b)
        stranger = _page(b_ctx, a.url, errors)  # A's address, opened by B: it names nothing
        _restore(a_ctx, a)
        seen = {"dropped": dropped, "a": _cur(a), "b": _cur(b), "stranger": _cur(stranger)}
        assert (seen["a"], seen["b"], seen["stranger"]) == (a_at, b_at, 0), seen
        _step(a, "next_phase")
        _step(b, "next_phase")
        _step(stranger, "next_phase")
        after = {
            name: (_cur(p), p.evaluate("window.__specvizStage.state.data.view"))
            for name, p in (("a", a), ("b", b), ("stranger", stranger))
        }
        assert after == {"a": (a_at + 1, a_at + 1), "b": (b_at + 1, b_at + 1), "stranger": (1, 1)}, after
        channels = {p.evaluate("window.__specvizStage.state.data.channel") for p in (a, b, stranger)}
        assert len(channels) == 3
        return seen
    finally:
        a_ctx.close()
        b_ctx.close()


def test_two_browsers_keep_their_own_runs_through_a_dropped_connection(server: str, browser) -> None:
    errors: list[str] = []
    kept = 0
    for attempt in range(TRIES):
        seen = _one_try(browser, server, errors)
        assert seen["dropped"] >= 1, (attempt, seen)  # the page did lose its connection
        kept += 1
    print(f"two browsers, a dropped and restored connection: {kept} of {TRIES} tries kept their own runs")
    assert kept == TRIES and not errors, errors


def test_a_closed_tabs_address_opens_a_run_of_its_own(server: str, browser) -> None:
    """Once a tab is closed, whoever opens its address (browser history on a shared lab computer, a
    projected screen) gets a new run: the address carries nothing, and the reload cookie the closing
    tab leaves lives in its own browser only, for seconds."""
    errors: list[str] = []
    owner, other = browser.new_context(), browser.new_context()
    try:
        page = _page(owner, server, errors)
        _step(page, "next_cycle")
        address = page.url
        assert _cur(page) == 5 and "session" not in address
        with page.expect_event("close"):  # close(run_before_unload=True) returns before the page has gone
            page.close(run_before_unload=True)
        assert any(c["name"] == "specviz_resume" for c in owner.cookies())  # left for a reload, in this browser
        stranger = _page(other, address, errors)
        assert _cur(stranger) == 0 and not any(c["name"] == "specviz_resume" for c in other.cookies())
    finally:
        owner.close()
        other.close()
    assert not errors, errors
