"""The app on a shared server, under `streamlit.testing.v1.AppTest` on the tiny pair.

Classroom mode (SPECVIZ_CLASSROOM=1) offers no custom pair and never calls `load_pair`, caps the
prompt (characters and tokens), K, max_new_tokens and the lab's N, says so in the sidebar, and
answers bad input with a message while the app keeps working; off, nothing changes. A full server
(SPECVIZ_MAX_DECODING) makes a step wait with its place shown, or fail clearly after the timeout;
an idle session's decoder is parked (caches freed, history kept) and rebuilt exactly.
"""

from __future__ import annotations

import gc
import os
import threading
import weakref

import pytest
import torch
from streamlit.testing.v1 import AppTest
from test_app import APP, TIMEOUT, assert_clean, click, open_app, shown, workspace
from test_gate import hold_slot

import specviz
from specviz.gate import Place, shared_gate
from specviz.ui.sidebar import PAIR_LABELS


@pytest.fixture(autouse=True)
def server_env(monkeypatch):
    """A clean server configuration: no settings file, nothing set but the tiny pair."""
    for name in (
        "CLASSROOM",
        "MAX_K",
        "MAX_NEW_TOKENS",
        "MAX_LAB_N",
        "MAX_PROMPT_CHARS",
        "MAX_PROMPT_TOKENS",
        "MAX_DECODING",
        "BUSY_TIMEOUT",
        "IDLE_SECONDS",
        "THREADS",
    ):
        monkeypatch.delenv(f"SPECVIZ_{name}", raising=False)
    monkeypatch.setenv("SPECVIZ_SETTINGS", "/nonexistent/specviz.toml")
    monkeypatch.setenv("SPECVIZ_PAIR", "tiny")
    return monkeypatch


def classroom(monkeypatch, **caps):
    monkeypatch.setenv("SPECVIZ_CLASSROOM", "1")
    for name, value in caps.items():
        monkeypatch.setenv(f"SPECVIZ_{name.upper()}", str(value))


def infos(at) -> list[str]:
    return [e.value for e in at.info]


# ---------------------------------------------------------------- classroom lockdown ----------


def test_personal_machine_is_unchanged():
    at = open_app()
    assert PAIR_LABELS["custom"] in at.radio(key="pair_kind").options
    assert not any("Classroom server" in t for t in infos(at))
    assert at.slider(key="k").proto.max == 16
    assert at.number_input(key="max_new").proto.max == 4096
    assert at.text_area(key="prompt").proto.max_chars == 0  # no limit


def test_classroom_offers_no_custom_pair_caps_the_widgets_and_says_so(server_env):
    classroom(server_env)
    at = open_app(tab="lab")  # the lab's N is in its (lazy) tab
    assert at.radio(key="pair_kind").options == [PAIR_LABELS["default"], PAIR_LABELS["tiny"]]
    note = next(t for t in infos(at) if "Classroom server" in t)
    assert "Custom model pairs and local paths are disabled" in note and "K ≤ 8" in note
    assert at.slider(key="k").proto.max == 8
    assert at.number_input(key="max_new").proto.max == 256
    assert at.number_input(key="lab_n").proto.max == 200
    assert at.text_area(key="prompt").proto.max_chars == 2000
    click(at, "next_phase")  # the app works as usual inside the limits
    assert len(shown(at).traces) == 1


def test_classroom_never_loads_a_custom_pair(server_env):
    classroom(server_env)
    calls = []
    server_env.setattr(specviz, "load_pair", lambda *a, **kw: calls.append((a, kw)))
    at = open_app(pair="custom", custom_target="/etc", custom_draft="/root")
    assert calls == []
    assert at.radio(key="pair_kind").value == "tiny"  # the server's own pair instead
    assert any("Custom model pairs are disabled on this classroom server" in w.value for w in at.warning)
    assert not at.get("text_input")  # no path fields at all
    click(at, "next_phase")
    assert calls == [] and len(shown(at).traces) == 1


def test_classroom_refuses_an_overlong_prompt_and_recovers(server_env):
    classroom(server_env, max_prompt_chars=40, max_prompt_tokens=12)
    from specviz.ui.sidebar import DEFAULT_PROMPT

    at = open_app()  # the default prompt is longer than 40 characters: refused with a message, nothing breaks
    assert len(DEFAULT_PROMPT) > 40
    assert any(f"{len(DEFAULT_PROMPT)} characters; this classroom server accepts at most 40" in e.value
               for e in at.error)
    assert shown(at) is None and at.button(key="next_phase").disabled
    at.text_area(key="prompt").set_value("x" * 41).run()
    assert_clean(at)
    assert at.session_state["prompt"] == "x" * 40  # the widget itself stops at max_chars
    assert any("40 tokens long" in e.value and "at most 12" in e.value for e in at.error)
    assert shown(at) is None
    at.text_area(key="prompt").set_value("why blue").run()
    assert_clean(at)
    assert not at.error
    click(at, "next_phase")
    assert len(shown(at).traces) == 1


def test_classroom_lowers_values_above_the_caps_with_a_note(server_env):
    classroom(server_env, max_k=4, max_new_tokens=32, max_lab_n=50)
    at = open_app(k=16, max_new=4000, lab_n=1000)
    assert at.session_state["k"] == 4 and at.session_state["max_new"] == 32 and at.session_state["lab_n"] == 50
    warnings = " ".join(w.value for w in at.warning)
    assert "K lowered from 16 to 4" in warnings and "Max new tokens lowered from 4000 to 32" in warnings
    assert shown(at).dec.config.k == 4 and shown(at).dec.config.max_new_tokens == 32


def test_a_bad_server_setting_is_reported_not_ignored(server_env):
    server_env.setenv("SPECVIZ_CLASSROOM", "maybe")
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    assert_clean(at)
    assert any("settings are invalid" in e.value and "classroom must be on or off" in e.value for e in at.error)
    assert not at.button  # nothing to click: the server does not open


# ---------------------------------------------------------------- sharing the machine ----------


def _hold_the_only_slot():
    entered, leave = threading.Event(), threading.Event()
    return leave, hold_slot(shared_gate(1), entered, leave)


def test_a_step_on_a_busy_server_waits_with_its_place_shown(server_env):
    server_env.setenv("SPECVIZ_MAX_DECODING", "1")
    at = open_app()
    places = []
    message = Place.message
    server_env.setattr(Place, "message", lambda self: places.append(self) or message(self))
    click(at, "next_cycle")  # the first cycle, computed with the page: no wait
    assert len(shown(at).traces) == 1 and not places
    leave, holder = _hold_the_only_slot()
    timer = threading.Timer(1.5, leave.set)
    timer.start()
    try:
        click(at, "next_cycle")  # the second must be computed: blocks until the other session's step ends
    finally:
        leave.set()
        holder.join(10)
    assert places and places[0].ahead == 0 and places[0].decoding == 1 and places[0].capacity == 1
    assert len(shown(at).traces) == 2
    assert any("Waited" in c.value and "decodes at most 1 session(s) at once" in c.value for c in at.caption)


def test_a_step_that_waits_too_long_fails_clearly_and_the_app_keeps_working(server_env):
    server_env.setenv("SPECVIZ_MAX_DECODING", "1")
    server_env.setenv("SPECVIZ_BUSY_TIMEOUT", "0.5")
    at = open_app()
    click(at, "next_cycle")  # the first cycle, computed with the page
    leave, holder = _hold_the_only_slot()
    try:
        click(at, "next_cycle")
        assert any("The server is busy" in e.value and "try again" in e.value for e in at.error)
        assert len(shown(at).traces) == 1 and shown(at).view == 5  # nothing changed
    finally:
        leave.set()
        holder.join(10)
    click(at, "next_cycle")
    assert len(shown(at).traces) == 2 and not at.error



def test_an_idle_session_is_parked_and_rebuilt_exactly(server_env):
    server_env.setenv("SPECVIZ_IDLE_SECONDS", "30")
    idle, straight = open_app(), open_app()
    click(idle, "next_cycle", 2)
    click(straight, "next_cycle", 3)
    traces = shown(idle).traces
    cache = weakref.ref(shown(idle).dec.target_cache)
    workspace(idle).last_active -= 60  # as if untouched for a minute
    open_app()  # another session's activity sweeps the idle one
    parked = shown(idle)
    assert parked.dec is None and parked.parked is not None and parked.traces is traces
    gc.collect()
    assert cache() is None  # its KV caches are gone
    click(idle, "next_cycle")  # the user comes back
    s = shown(idle)
    assert s.dec is not None and s.parked is None and s.traces[:2] == traces and len(s.traces) == 3
    assert any("caches were released" in t and "continues exactly" in t for t in infos(idle))
    assert s.dec.committed == shown(straight).dec.committed  # as if it had never been parked
    assert [t.emitted for t in s.traces] == [t.emitted for t in shown(straight).traces]


def test_a_recent_session_is_not_parked(server_env):
    server_env.setenv("SPECVIZ_IDLE_SECONDS", "30")
    a = open_app()
    open_app()
    assert shown(a).dec is not None and shown(a).parked is None


def _threads_in_a_new_thread() -> int:
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    t.start()
    t.join()
    return seen[0]


def test_threads_follow_the_server_setting(server_env):
    """torch's count is process-wide: the app sets it in its script thread, and every new thread
    (the next script run of any session) starts with it."""
    before = torch.get_num_threads()
    try:
        server_env.setenv("SPECVIZ_THREADS", "2")
        open_app()
        assert _threads_in_a_new_thread() == 2
        server_env.delenv("SPECVIZ_THREADS")
        server_env.setenv("SPECVIZ_MAX_DECODING", "1")
        open_app()
        assert _threads_in_a_new_thread() == (1 if (os.cpu_count() or 1) <= 2 else os.cpu_count())
    finally:
        torch.set_num_threads(before)
