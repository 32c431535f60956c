"""A live lecture seen from the lecturer's session: the server's rooms, and the lecturer's steps
published to the room (no Streamlit).

The lecturer's decoder computes every cycle once; each payload the lecturer's stage is sent (a
script run's or the stage route's, `stage_protocol.payload`) also *publishes* its whole steps to
the room (`publish`), so the room holds the stage's data for the steps around the lecturer's and
every follower's page is fed from there (`live_route`): students never decode. While a lecture is
live the lecturer's stage tells the server every step it shows (`PageView.follow`), so the room
moves with each click.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ..room import Room, RoomError, Rooms
from ..timeline import at
from ..trace import CycleTrace

MAX_FRAMES = 400  # steps of the lecturer's run a room holds (80 cycles): a student may go back through them
# The sidebar settings a student's fork of the lecturer's run starts from (`ui/fork`): what starts the
# run (`sidebar.RESTART_WIDGETS`) and what the decoder takes live (`sidebar.LIVE`). Never the what-if
# forcing, the lecture layout or the quiz: a fork is an exact run of the student's own.
FORK_SETTINGS = ("pair_kind", "custom_target", "custom_draft", "proposer", "prompt", "chat", "layout", "page_size",
                 "policy", "seed", "num_blocks", "max_context", "dtype", "k_mode", "k", "tree_width", "tree_nodes",
                 "temperature", "top_k", "top_p", "max_new")


@dataclasses.dataclass(eq=False)
class Lecture:
    """The lecturer's hold on a room: the room and the key that moves it (kept in the workspace,
    never sent to a page but the lecturer's)."""

    room: Room
    key: str
    seq: int | None = None  # the workspace's `stage_seq` at the last payload published
    # The newest report of the lecturer's step published (`stage_protocol.publish_shown`): the page's
    # channel and its clock (a reloaded page is a new channel with a clock of its own).
    sent: tuple[str, float] = ("", float("-inf"))


@functools.cache
def rooms() -> Rooms:
    """This server process's rooms (one table for every session)."""
    return Rooms()


def start(ws: Any) -> Lecture:
    """A new room for the workspace's lecturer (the one it has, if it is still live)."""
    lecture = getattr(ws, "live", None)
    if lecture is not None:
        try:
            if rooms().find(lecture.room.code) is lecture.room:
                return lecture
        except RoomError:  # expired: a new one
            pass
    room = rooms().create()
    ws.live = Lecture(room, room.lecturer_key)
    return ws.live


def end(ws: Any) -> None:
    """The lecture is over for this workspace (the room expires on its own once nobody moves it)."""
    ws.live = None


def publish(ws: Any, run_id: int, view: int, steps: dict[str, dict[str, Any]], layout: bool = False, *,
            seq: int | None = None, sent: tuple[str, float] | None = None, timeline: Any = None) -> None:
    """The lecturer shows `view` of run `run_id`: the room follows, with the stage data of `steps`
    (whole steps, keyed by their index as a string; `layout`: lecture mode) and, from `timeline` (the
    `stage_data.Timeline` they were built from), the run's cycles up to the lecturer's, which the
    follower's other views are drawn from (`viz/follower_views`).

    Two callers say where the lecturer is. A report of the browser's step (`sent`: the page's
    channel and when it sent it) is published at once, unless a newer report of that page's was.
    A payload (`seq`: the workspace's `stage_seq` when it was built) moves the room only when the
    server moved since the last payload (a step it computed on request, Play, a reveal) or to a new
    run; otherwise it only brings frames: a payload built before a report was carried out (a cycle
    computed ahead) must not move the followers back to the step the lecturer left."""
    lecture = getattr(ws, "live", None)
    if lecture is None:
        return
    room = lecture.room
    if sent is not None:
        if sent[0] == lecture.sent[0] and sent[1] < lecture.sent[1]:
            return
        lecture.sent = sent
    elif seq is not None:
        if seq == lecture.seq and room.run == run_id:
            view = room.step
        lecture.seq = seq
    # Only the steps up to the lecturer's: a step ahead (the cycle computed in advance) would show a
    # follower the verdicts before the class has predicted them.
    frames = {k: v for k, v in steps.items() if int(k) <= view and (room.run != run_id or room.frames.get(k) is not v)}
    record = _record(timeline, view)
    if record is not None and room.run == run_id and _same(record[0], room.traces) and record[1] == room.started:
        record = None
    if room.run == run_id and room.step == view and room.lecture == layout and not frames and record is None:
        _offer(lecture, ws)
        return  # nothing new: no version bump, followers' long polls keep waiting
    room.move(lecture.key, run_id, view, frames, lecture=layout, record=record)
    _offer(lecture, ws)
    if len(room.frames) > MAX_FRAMES:
        with room.lock:
            for k in sorted(room.frames, key=int)[: len(room.frames) - MAX_FRAMES]:
                del room.frames[k]


def _offer(lecture: Lecture, ws: Any) -> None:
    settings = fork_settings(ws)
    if settings != lecture.room.settings:  # read without the lock: at worst offered once more
        lecture.room.offer(lecture.key, settings)


def fork_settings(ws: Any) -> dict[str, Any] | None:
    """The lecturer's settings a fork starts from, when the run shown is live (a recording has no
    decoder to fork) and it is the one the sidebar describes."""
    run, widgets = getattr(ws, "run", None), getattr(ws, "widgets", None) or {}
    if run is None or not getattr(run, "live", False) or not widgets:
        return None
    return {key: widgets[key] for key in FORK_SETTINGS if key in widgets}


def _record(timeline: Any, view: int) -> tuple[tuple[CycleTrace, ...], bool] | None:
    """The run's cycles up to the one the lecturer shows at `view` (never one computed ahead of it:
    its verdicts are the class's next question), and whether the run has started."""
    if timeline is None:
        return None
    cycle = at(view, timeline.started)[0]
    return tuple(timeline.traces[: 0 if cycle is None else cycle + 1]), timeline.started


def _same(a: tuple[CycleTrace, ...], b: tuple[CycleTrace, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
