"""One session per browser, and a classroom's bounds on sessions (issue 33, parts 6, 6b and 7), without
a browser (tests/test_browser_sessions.py drives two real ones).

* **A workspace is handed over once, to its own browser's reload** (`state.Kept.claim`): never while
  its session is connected, and under a new secret each time, so a secret seen once (an old cookie,
  a copied value) opens nothing again. The restore list keeps the most recently active pages only.
* **A classroom admits a bounded number of pages** (`Kept.admit`): in all and per browser address,
  counting connected sessions only, each refusal with a sentence that says what to do.
* **A page whose browser has gone is released while playing** (`session.release_idle`): Play kept
  the idle sweep from ever releasing a closed tab's decoder.
* **Classroom caps**: tree width and node budget, precision, run files per page, each refused with
  its limit in the message behind the widgets' bounds.
"""

from __future__ import annotations

import time

import pytest

import specviz
from specviz.config import DecodeConfig
from specviz.errors import ConfigError
from specviz.server import ServerSettings
from specviz.ui import session
from specviz.ui.state import Kept, Workspace, start_live_run


def test_a_workspace_is_handed_over_once_and_never_while_its_page_is_connected():
    kept = Kept()
    ws = Workspace()
    kept.add(ws, "page-a", "10.0.0.5")
    first = ws.token
    assert kept.claim(first, "page-b", active=lambda s: s == "page-a") is None  # A is still there
    assert ws.owner == "page-a" and first in kept
    assert kept.claim(first, "page-b", active=lambda s: False) is ws  # A is gone: its reload takes over
    assert ws.owner == "page-b" and ws.token != first and first not in kept and ws.token in kept
    assert kept.claim(first, "page-c", active=lambda s: False) is None  # the old secret opens nothing


def test_the_restore_list_keeps_the_most_recently_active_pages():
    kept = Kept(keep=2)
    now = time.monotonic()  # monotonic time starts at boot: ages are relative to it, never absolute
    spaces = [Workspace(last_active=now - age) for age in (10.0, 30.0, 20.0)]
    for ws in spaces:
        kept.add(ws, None)
    assert [w.token in kept for w in spaces] == [True, False, True]  # the least recently active let go


def test_a_classroom_admits_a_bounded_number_of_pages():
    kept = Kept()
    live = set()
    for i, client in enumerate(["10.0.0.5"] * 3 + ["10.0.0.6"] * 2):
        kept.add(Workspace(), f"s{i}", client)
        live.add(f"s{i}")
    active = live.__contains__
    assert kept.admit(None, None, "10.0.0.5", active) is None  # a personal machine: no bound
    assert kept.admit(10, 4, "10.0.0.5", active) is None
    per_client = kept.admit(10, 3, "10.0.0.5", active)
    assert "3 pages" in per_client and "(3)" in per_client
    assert kept.admit(10, 3, "10.0.0.6", active) is None  # another address has its own count
    full = kept.admit(5, None, "10.0.0.9", active)
    assert "full" in full and "at most 5" in full
    live.clear()  # the pages were closed: their places are free again
    assert kept.admit(5, 3, "10.0.0.5", active) is None


@pytest.fixture(scope="module")
def pair():
    return specviz.build_tiny_pair(seed=0)


def test_a_page_that_was_playing_when_its_browser_went_is_released(pair, monkeypatch):
    def playing(owner: str) -> Workspace:
        ws = Workspace(playing=True, owner=owner)
        ws.run = start_live_run(1, "t", ("k",), pair, DecodeConfig(k=3, max_new_tokens=16), [3, 9, 4, 12])
        return ws

    gone, here = playing("closed tab"), playing("open tab")
    monkeypatch.setattr(session, "connected", lambda sid: sid == "open tab")
    assert session.release_idle(gone) and gone.run.dec is None and gone.run.parked is not None
    assert not gone.playing
    assert not session.release_idle(here) and here.run.dec is not None and here.playing  # still playing there


def test_classroom_caps_on_trees_precision_and_run_files():
    room, own = ServerSettings(classroom=True), ServerSettings()
    with pytest.raises(ConfigError, match=r"Tree width = 5 is above this server's limit of 4"):
        room.check_config(3, 64, tree_width=5, tree_nodes=16)
    with pytest.raises(ConfigError, match=r"Tree nodes = 33 .* limit of 32"):
        room.check_config(3, 64, tree_width=4, tree_nodes=33)
    with pytest.raises(ConfigError, match="Precision bfloat16 is off on this classroom server"):
        room.check_config(3, 64, dtype="bfloat16")
    ServerSettings(classroom=True, allow_bfloat16=True).check_config(3, 64, dtype="bfloat16")
    own.check_config(16, 4096, tree_width=16, tree_nodes=128, dtype="bfloat16")  # a personal machine's bounds
    assert room.clamp({"tree_width": 8, "tree_nodes": 128, "k": 2}) == {"tree_width": 4, "tree_nodes": 32}
    room.check_upload(9)
    with pytest.raises(ConfigError, match=r"opened 10 run files, the most this classroom server allows \(10\)"):
        room.check_upload(10)
    own.check_upload(10_000)
    text = room.sidebar_markdown()
    assert "tree width ≤ 4" in text and "≤ 32 nodes" in text and "precision float32" in text and "10 run files" in text


def test_a_classroom_page_caps_trees_and_precision_and_hides_error_details(monkeypatch):
    """The served page itself (AppTest): the widgets' bounds are the classroom's, a session that asks
    for more is lowered with a note, and error details are hidden from pages from the first run on."""
    from streamlit import config
    from test_app import open_app, shown

    monkeypatch.setenv("SPECVIZ_SETTINGS", "/nonexistent/specviz.toml")
    monkeypatch.setenv("SPECVIZ_CLASSROOM", "1")
    before = config.get_option("client.showErrorDetails")
    try:
        at = open_app(tab=None, tree_width=8, tree_nodes=100, dtype="bfloat16")
        assert config.get_option("client.showErrorDetails") == "none"
    finally:
        config.set_option("client.showErrorDetails", before)
    assert at.number_input(key="tree_width").proto.max == 4 and at.number_input(key="tree_nodes").proto.max == 32
    assert at.radio(key="dtype").options == ["float32"]
    notes = [w.value for w in at.warning]
    assert any("Tree width lowered from 8 to 4" in n for n in notes), notes
    assert any("Precision bfloat16 is off on this classroom server" in n for n in notes), notes
    run = shown(at)
    assert run.config.tree_width == 4 and run.config.tree_nodes == 32 and run.dtype == "float32"


def test_a_reload_whose_runs_were_let_go_says_so(monkeypatch):
    """The restore list's bound (`restore_sessions`): a reload whose workspace was let go starts afresh
    and says why, instead of quietly showing a new run."""
    from test_app import open_app, shown

    monkeypatch.setattr(session, "_resume_token", lambda: "let-go-long-ago-0123")
    at = open_app(tab=None)
    toasts = [t.value for t in at.toast]
    assert any("could not be brought back" in t and "64 most recently active pages" in t for t in toasts), toasts
    assert shown(at).view == 0
