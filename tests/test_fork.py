"""A student's own try of a live lecture's cycle (specviz/ui/fork.py), through the app's script in
AppTest: a lecturer's session publishes its run to a room; a second session opened with the
follower's link (`?fork=<code>&cycle=<c>`) replays the lecture's cycles before c with the lecturer's
settings and draws with a seed of its own from c on; a link that cannot be carried out says why."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest
from test_app import APP, TIMEOUT, assert_clean, click, open_app, shown, workspace

from specviz.timeline import end_of
from specviz.ui import live


def _open(code: str, cycle: str) -> AppTest:
    """A new page of the app at the follower's fork link."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["fork"], at.query_params["cycle"] = code, cycle
    at.run()
    assert_clean(at)
    return at


def test_a_fork_replays_the_lecture_before_its_cycle_and_draws_its_own_from_there():
    lecturer = open_app(tab=None, seed=11, k=3)
    ws = workspace(lecturer)
    room = live.start(ws).room
    try:
        click(lecturer, "next_cycle", 3)  # the lecture at cycle 3: its draft phase
        lecture = shown(lecturer)
        assert room.settings["seed"] == 11 and room.settings["k"] == 3 and len(room.traces) == 3
        student = _open(room.code, "2")
        run = shown(student)
        assert "fork" not in student.query_params  # taken once: a rerun does not fork again
        assert run.view == end_of(2) and len(run.traces) == 2 and run.dec.config.seed != 11
        assert [[e.token_id for e in t.emitted] for t in run.traces] == [
            [e.token_id for e in t.emitted] for t in lecture.traces[:2]]  # the lecture's text so far
        assert run.config.k == 3 and "Your own try of cycle 3" in run.notices[0]
        assert "differs" not in run.notices[0]
        click(student, "next_phase")  # the student's own cycle 3, on the student's decoder
        assert len(shown(student).traces) == 3 and len(room.traces) == 3  # the lecture did not move

        ahead = _open(room.code, "7")  # a cycle the lecturer has not reached
        assert any("has not reached cycle 8" in w.value for w in ahead.warning)
        assert shown(ahead) is None or not any("Your own try" in n for n in shown(ahead).notices)
    finally:
        live.end(ws)


def test_a_link_to_an_unknown_room_or_without_a_cycle_says_why():
    unknown = _open("ZZZZZ", "0")
    assert any("no live lecture has the code ZZZZZ" in w.value for w in unknown.warning)
    broken = _open("ZZZZZ", "x1")
    assert any("not complete" in w.value for w in broken.warning)
