"""A live lecture's room (specviz.room): codes, keys, following, polls and their reveal, expiry.

Real traces: a tiny pair decodes the cycles a poll asks about (chains and a token tree)."""

from __future__ import annotations

import threading

import pytest

from specviz import DecodeConfig, SpeculativeDecoder, build_tiny_pair
from specviz.room import (
    CODE_ALPHABET,
    CODE_LENGTH,
    MAX_STUDENTS,
    PollClosed,
    RoomError,
    RoomExpired,
    RoomForbidden,
    RoomFull,
    RoomNotFound,
    Rooms,
    normalise_code,
    poll_for,
)


@pytest.fixture(scope="module")
def traces():
    pair = build_tiny_pair(seed=0)
    out = {}
    for name, cfg in {"chain": DecodeConfig(k=4, seed=3), "tree": DecodeConfig(k=3, tree_width=2, tree_nodes=7,
                                                                               seed=3)}.items():
        dec = SpeculativeDecoder(pair, cfg)
        dec.start(pair.tokenizer.encode("the quick brown fox jumps"))
        out[name] = [dec.step() for _ in range(4)]
    return out


def test_a_room_code_is_short_readable_and_found_however_it_is_typed():
    rooms = Rooms()
    room = rooms.create(now=0.0)
    assert len(room.code) == CODE_LENGTH and set(room.code) <= set(CODE_ALPHABET)
    assert room.lecturer_key not in room.code and len(room.lecturer_key) >= 24
    typed = room.code[:2].lower() + " - " + room.code[2:]
    assert rooms.find(typed, now=1.0) is room and normalise_code(typed) == room.code
    assert len({rooms.create(now=0.0).code for _ in range(20)} | {room.code}) == 21


def test_an_unknown_or_expired_code_says_which():
    rooms = Rooms(idle_s=60.0)
    room = rooms.create(now=0.0)
    with pytest.raises(RoomNotFound, match="no live lecture has the code"):
        rooms.find("ZZZZZ", now=1.0)
    room.move(room.lecturer_key, 0, 3, now=50.0)  # the lecturer keeps the room alive
    assert rooms.find(room.code, now=100.0) is room
    with pytest.raises(RoomExpired, match="has ended") as gone:
        rooms.find(room.code, now=111.0)
    assert gone.value.status == 410 and len(rooms) == 0


def test_only_the_lecturers_key_moves_the_room_polls_or_reads_it(traces):
    room = Rooms().create(now=0.0)
    student = room.join(now=0.0)
    for attempt in (lambda k: room.move(k, 0, 5), lambda k: room.open_poll(k, traces["chain"][0]),
                    lambda k: room.reveal(k, 1), lambda k: room.glance(k), lambda k: room.results(k)):
        for key in (student, "", room.lecturer_key[:-1] + "x"):
            with pytest.raises(RoomForbidden) as refused:
                attempt(key)
            assert refused.value.status == 403
    assert room.step == 0 and room.polls == [] and room.version == 0


def test_followers_see_the_lecturers_step_and_how_far_behind_they_are():
    room = Rooms().create(now=0.0)
    a, b = room.join(now=0.0), room.join(now=0.0)
    v = room.move(room.lecturer_key, 0, 7, frames={"7": {"title": "Cycle 2 · verify"}}, now=1.0)
    assert room.here(a, 7, True, now=1.5) == {"run": 0, "step": 7, "version": v, "poll": None, "behind": None,
                                              "lecturer_away": False, "fork": False}
    assert room.here(b, 4, False, now=1.5)["behind"] == 3  # branched: three steps back
    assert room.glance(room.lecturer_key, now=2.0) | {"poll": None} == {
        "code": room.code, "joined": 2, "following": 1, "branched": 1, "poll": None}
    room.move(room.lecturer_key, 1, 0, now=3.0)  # a new run (a setting changed): its frames start afresh
    assert room.frames == {} and room.here(a, 0, True, now=3.0)["run"] == 1
    with pytest.raises(RoomForbidden, match="join it again"):
        room.here("not-a-student", 0, True)


def test_a_poll_asks_from_the_trace_and_hides_the_truth_until_the_reveal(traces):
    room = Rooms().create(now=0.0)
    students = [room.join(now=0.0) for _ in range(5)]
    trace = traces["chain"][1]
    poll = room.open_poll(room.lecturer_key, trace, now=1.0)
    assert poll.question.options == tuple(f"{n} of {trace.k}" for n in range(trace.k + 1))
    assert poll.question.truth == trace.num_accepted
    for i, s in enumerate(students):
        seen = room.answer(s, poll.number, i % 2, now=2.0)
        assert "truth" not in seen and "counts" not in seen and seen["yours"] == i % 2
    room.answer(students[0], poll.number, 3, now=2.5)  # changed before the reveal: one answer each
    before = room.glance(room.lecturer_key, now=3.0)["poll"]
    assert before["answered"] == 5 and "counts" not in before and "truth" not in before
    room.reveal(room.lecturer_key, poll.number, now=4.0)
    with pytest.raises(PollClosed, match="revealed"):
        room.answer(students[1], poll.number, 0, now=5.0)
    after = room.here(students[1], 8, True, now=5.0)["poll"]
    assert after["counts"] == [2, 2, 0, 1, 0][: trace.k + 1] and after["truth"] == trace.num_accepted
    assert after["yours"] == 1 and sum(after["counts"]) == 5
    assert room.results(room.lecturer_key) == [{
        "cycle": trace.cycle, "kind": "accepted", "text": poll.question.text, "options": list(poll.question.options),
        "counts": after["counts"], "truth": trace.num_accepted, "revealed": True}]


def test_a_tree_poll_asks_which_path_survives(traces):
    trace = next(t for t in traces["tree"] if t.tree is not None)
    q = poll_for(trace)
    assert q.kind == "path" and q.options[0].startswith("none")
    assert q.truth == (trace.tree.path[-1] if trace.tree.path else 0) and len(q.options) == len(trace.tree.nodes) + 1


def test_malformed_or_stale_answers_are_refused_with_a_clear_code(traces):
    room = Rooms().create(now=0.0)
    s = room.join(now=0.0)
    first = room.open_poll(room.lecturer_key, traces["chain"][0], now=1.0)
    for bad in (-1, len(first.question.options), True, "2", 1.0, None):
        with pytest.raises(RoomError, match="one of the options") as refused:
            room.answer(s, first.number, bad)
        assert refused.value.status == 400
    for bad in (0, 2, "1", True):
        with pytest.raises(RoomError, match="no question number"):
            room.answer(s, bad, 0)
    room.open_poll(room.lecturer_key, traces["chain"][1], now=2.0)
    with pytest.raises(PollClosed, match="newer one"):
        room.answer(s, first.number, 0)
    assert first.answers == {}


def test_two_hundred_students_join_at_once_and_a_full_room_says_so():
    room = Rooms().create(now=0.0)
    keys: list[str] = []
    lock = threading.Lock()

    def join():
        key = room.join(now=1.0)
        with lock:
            keys.append(key)

    threads = [threading.Thread(target=join) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(keys)) == 200 and len(room.students) == 200
    for _ in range(MAX_STUDENTS - 200):
        room.join(now=1.0)
    with pytest.raises(RoomFull, match="full") as full:
        room.join(now=2.0)
    assert full.value.status == 429
    room.join(now=1.0 + 10_000)  # students long gone (no answers) make room


def test_a_lecture_exported_with_the_class_answers_opens_again_with_them():
    """The run file carries each question's counts and truth (never who answered); loading checks them."""
    import json

    from specviz.runfile import RunFileError, load_run, record_run

    pair = build_tiny_pair(seed=0)
    cfg = DecodeConfig(k=4, seed=3, max_new_tokens=24)
    dec = SpeculativeDecoder(pair, cfg)
    prompt = pair.tokenizer.encode("the quick brown fox jumps")
    dec.start(prompt)
    prefill = (dec.target_cache.snapshot(len(prompt)), dec.proposer.snapshot(len(prompt)))
    traces = [dec.step() for _ in range(3)]
    room = Rooms().create(now=0.0)
    students = [room.join(now=0.0) for _ in range(3)]
    for trace in traces[:2]:
        poll = room.open_poll(room.lecturer_key, trace, now=1.0)
        for i, s in enumerate(students):
            room.answer(s, poll.number, min(i, trace.k), now=1.0)
        room.reveal(room.lecturer_key, poll.number, now=1.0)
    room.move(room.lecturer_key, 1, 0, now=2.0)  # a later run's question is not this run's
    room.open_poll(room.lecturer_key, traces[2], now=2.0)
    results = room.results(room.lecturer_key, run=0)
    record = record_run("lecture", "tiny", "draft", cfg, "the quick brown fox jumps", False, prompt, prefill, traces,
                        dec.token_text, max_context=dec.max_context, polls=results)
    text = record.to_json()
    assert not any(s in text for s in students)  # anonymous
    again = load_run(text)
    assert [dict(p) for p in again.polls] == results and len(again.polls) == 2
    assert again.polls[0]["counts"] == [1, 1, 1, 0, 0][: traces[0].k + 1] and again.polls[0]["revealed"]
    bad = json.loads(text)
    bad["polls"][0]["counts"] = [1]  # a count per option, or the file is refused
    with pytest.raises(RunFileError, match="one count per option"):
        load_run(json.dumps(bad))
    bad["polls"][0] = {**results[0], "truth": 99}
    with pytest.raises(RunFileError, match="polls"):
        load_run(json.dumps(bad))


def test_the_room_follows_the_lecturers_reports_and_the_servers_moves_never_an_older_payload():
    """ui/live.publish: a report moves the room at once; a payload moves it only when the server moved
    (its stage_seq changed) or the run is new, else it brings frames; an overtaken report is dropped;
    a step ahead of the lecturer's is never published."""
    from types import SimpleNamespace

    from specviz.ui import live

    ws = SimpleNamespace(live=None)
    lecture = live.start(ws)
    room = lecture.room
    frames = {str(s): {"title": f"step {s}"} for s in range(12)}
    live.publish(ws, 1, 5, frames, seq=1)  # the first payload: at step 5, with the cycle computed ahead
    assert room.step == 5 and sorted(room.frames, key=int) == [str(s) for s in range(6)]  # nothing ahead
    live.publish(ws, 1, 6, frames, sent=("page-a", 10.0))  # the lecturer stepped on: at once
    assert room.step == 6 and "6" in room.frames and "7" not in room.frames
    live.publish(ws, 1, 5, frames, seq=1)  # a payload built before that report was carried out
    assert room.step == 6
    live.publish(ws, 1, 4, frames, sent=("page-a", 9.0))  # a report the one above overtook
    assert room.step == 6
    live.publish(ws, 1, 8, frames, seq=2)  # the server moved (a step computed on request, Play, a reveal)
    assert room.step == 8 and "8" in room.frames and "9" not in room.frames
    live.publish(ws, 1, 3, frames, sent=("page-b", 1.0))  # the lecturer's page reloaded: a new clock
    assert room.step == 3
    version = room.version
    live.publish(ws, 1, 3, frames, sent=("page-b", 2.0))  # nothing new: followers keep waiting
    assert room.version == version
    live.publish(ws, 2, 0, {"0": {"title": "prefill"}}, seq=2)  # a new run: followed, its frames afresh
    assert (room.run, room.step, list(room.frames)) == (2, 0, ["0"])
    live.end(ws)
    live.publish(ws, 2, 1, frames, seq=3)  # over: nothing more reaches the room
    assert room.step == 0


def test_a_fork_starts_from_the_lecturers_settings_never_ahead_nor_while_the_class_answers(traces):
    """Room.fork_basis: a student's own try of a cycle (ui/fork.py) starts from the lecturer's settings,
    for a cycle the lecturer has reached, and not while the class answers a question about it."""
    room = Rooms().create(now=0.0)
    with pytest.raises(RoomError, match="recording"):
        room.fork_basis(0)
    with pytest.raises(RoomForbidden):
        room.offer(room.join(now=0.0), {"seed": 3})  # only the lecturer offers
    room.offer(room.lecturer_key, {"seed": 3, "k": 4})
    room.move(room.lecturer_key, 0, 7, now=1.0)  # cycle 2's verify phase
    assert room.fork_basis(1) == room.fork_basis(0) == {"seed": 3, "k": 4}
    with pytest.raises(RoomForbidden, match="not reached cycle 3"):
        room.fork_basis(2)
    poll = room.open_poll(room.lecturer_key, traces["chain"][1], now=1.0)
    with pytest.raises(PollClosed, match="after the reveal") as asked:
        room.fork_basis(1)
    assert asked.value.status == 409 and room.fork_basis(0)  # another cycle may be tried meanwhile
    room.reveal(room.lecturer_key, poll.number, now=1.0)
    assert room.fork_basis(1)
    room.move(room.lecturer_key, 1, 0, now=2.0)  # a new run: its own settings come with its payload
    with pytest.raises(RoomError, match="recording"):
        room.fork_basis(0)


def test_the_lecturer_offers_the_runs_settings_and_nothing_that_breaks_exactness():
    from types import SimpleNamespace

    from specviz.ui import live, sidebar

    assert {key for key, _ in sidebar.RESTART_WIDGETS} <= set(live.FORK_SETTINGS)
    assert {"k", "temperature", "top_k", "top_p", "tree_width", "tree_nodes", "max_new"} <= set(live.FORK_SETTINGS)
    widgets = {"prompt": "the cat", "seed": 7, "k": 3, "whatif": True, "force_reject": [1], "lecture": True}
    ws = SimpleNamespace(live=None, run=SimpleNamespace(live=True), widgets=widgets)
    room = live.start(ws).room
    try:
        live.publish(ws, 1, 0, {"0": {"title": "start"}}, seq=1)
        assert room.settings == {"prompt": "the cat", "seed": 7, "k": 3}  # no forcing, no lecture layout
        ws.run = SimpleNamespace(live=False)  # a recording: nothing to fork
        live.publish(ws, 1, 0, {"0": room.frames["0"]}, sent=("p", 1.0))
        assert room.settings is None and room.here(room.join(), 0, True)["fork"] is False
    finally:
        live.end(ws)
