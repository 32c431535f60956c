"""A live lecture's room: who is in it, where the lecturer is, and the class's answers (no Streamlit).

A lecturer creates a room and gets two things: a short **room code** that students type or scan,
and a **lecturer key**, a secret that only the lecturer's browser holds. Students join by code
and get a student key of their own. Everything that changes the room checks the key it needs:

- the lecturer's key moves the room (the run and the step every follower shows), opens a poll,
  reveals it, reads the room at a glance and exports the results;
- a student's key answers a poll and says where that student is (following, or branched off to
  look at another step); it can never move the room or read another student's answer.

The room holds the lecturer's cycles once (`Room.frames`: the stage's step data, whatever the
caller puts there), however many students follow: a follower's page is the stage fed by the
room. A **poll** is a question about the cycle on screen, asked at the verify phase, before the
outcome is shown (predict, then reveal): its options and true answer come from the recorded trace
(`poll_for`), the truth stays on the server until the lecturer reveals it, each student has one
answer (changeable until the reveal), an answer after the reveal does not count, and only counts
ever leave the room: no answer is tied to a name.

Rooms expire after `ROOM_IDLE_S` without the lecturer; a reload of either side finds its room
again by its key (the key, not the connection, is who you are).
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Sequence
from typing import Any

from .errors import SpecvizError
from .timeline import at
from .trace import CycleTrace

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read off a projector at the back
CODE_LENGTH = 5  # 31**5 = 28.6 million codes: guessing one of a few live rooms is hopeless
ROOM_IDLE_S = 2 * 3600.0  # a room whose lecturer has not been seen for this long is gone
MAX_ROOMS = 64  # per server process
MAX_STUDENTS = 400  # per room: a large lecture hall
STUDENT_IDLE_S = 120.0  # a student not seen for this long no longer counts as in the room
LECTURER_AWAY_S = 10.0  # the lecturer's page checks in every second (its room panel): silent this long, it is away


class RoomError(SpecvizError):
    """A room request that cannot be carried out; `status` is the HTTP code a route answers with."""

    status = 400


class RoomNotFound(RoomError):
    status = 404


class RoomExpired(RoomError):
    status = 410


class RoomForbidden(RoomError):
    status = 403


class RoomFull(RoomError):
    status = 429


class PollClosed(RoomError):
    status = 409


class RunChanged(RoomError):
    """A page asked about a run of the lecturer's that is no longer the room's (it follows into the new one)."""

    status = 409


@dataclasses.dataclass(frozen=True)
class Question:
    """One poll question about a cycle: the options a student picks from, and which one is true."""

    kind: str  # "accepted" (how many drafts pass) or "path" (which path of a token tree survives)
    text: str
    options: tuple[str, ...]
    truth: int  # index into options


def poll_for(trace: CycleTrace) -> Question:
    """The question a cycle's verify phase asks, from its recorded outcome (never shown before the reveal)."""
    if trace.tree is not None:
        from .ui.quiz import path_labels  # the quiz's own labels: one wording for one question

        labels = path_labels(trace)
        end = trace.tree.path[-1] if trace.tree.path else 0
        return Question("path", "Which path of the tree will the target accept?", labels, end)
    options = tuple(f"{n} of {trace.k}" for n in range(trace.k + 1))
    return Question("accepted", f"How many of the {trace.k} drafts will the target accept?", options,
                    trace.num_accepted)


@dataclasses.dataclass
class Poll:
    """A question open to the room: one answer per student, changeable until the reveal."""

    number: int
    cycle: int
    question: Question
    run: int = 0  # the lecturer's run it asks about
    answers: dict[str, int] = dataclasses.field(default_factory=dict)  # student key -> option
    revealed: bool = False

    def counts(self) -> list[int]:
        counts = [0] * len(self.question.options)
        for option in self.answers.values():
            counts[option] += 1
        return counts

    def view(self, student: str | None = None, lecturer: bool = False) -> dict[str, Any]:
        """What a page may see: the question and how many answered; after the reveal the counts and
        the truth; a student also their own answer. The truth never leaves before the reveal."""
        q = self.question
        out: dict[str, Any] = {"number": self.number, "cycle": self.cycle, "kind": q.kind, "text": q.text,
                               "options": list(q.options), "answered": len(self.answers), "revealed": self.revealed}
        if self.revealed:
            out |= {"counts": self.counts(), "truth": q.truth}
        elif lecturer:
            out["counts_hidden"] = True  # the lecturer sees how many answered, not what, until the reveal
        if student is not None:
            out["yours"] = self.answers.get(student)
        return out

    def result(self) -> dict[str, Any]:
        """The anonymous record kept after class: the question, the counts and the truth."""
        q = self.question
        return {"cycle": self.cycle, "kind": q.kind, "text": q.text, "options": list(q.options),
                "counts": self.counts(), "truth": q.truth, "revealed": self.revealed}


@dataclasses.dataclass
class Student:
    seen: float  # time.monotonic() of the last message
    step: int | None = None  # the step this student's page shows
    following: bool = True  # False: branched off to look at another step


@dataclasses.dataclass(eq=False)
class Room:
    """One live lecture. Every method takes the caller's key and checks it; all under one lock."""

    code: str
    lecturer_key: str
    created: float
    seen: float  # the lecturer's last message (time.monotonic())
    run: int = 0  # the lecturer's run: a new run (a setting changed) bumps it, followers follow
    step: int = 0  # the lecturer's step
    lecture: bool = False  # the lecturer's stage is in lecture layout: so are the followers'
    version: int = 0  # counts the room's changes: a follower asks "anything after version v?"
    frames: dict[str, Any] = dataclasses.field(default_factory=dict)  # the stage's steps, held once
    # The run's cycles up to the lecturer's (the same trace objects as the lecturer's run: held once),
    # what the follower's other views are drawn from, and whether step 0 is the start of cycle 1.
    traces: tuple[CycleTrace, ...] = ()
    started: bool = False
    # The sidebar settings that re-create the lecturer's live run (None: a recording, nothing to fork).
    settings: dict[str, Any] | None = None
    students: dict[str, Student] = dataclasses.field(default_factory=dict)
    polls: list[Poll] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    # ------------------------------------------------------------ the lecturer

    def _lecturer(self, key: str, now: float) -> None:
        if not secrets.compare_digest(str(key), self.lecturer_key):
            raise RoomForbidden("only the lecturer of this room can do that")
        self.seen = now

    def move(self, key: str, run: int, step: int, frames: dict[str, Any] | None = None,
             now: float | None = None, lecture: bool | None = None,
             record: tuple[Sequence[CycleTrace], bool] | None = None) -> int:
        """The lecturer is at `step` of `run` (with the stage data for it, if new, and `record`: the
        run's cycles up to that step and whether it has started); the new version."""
        with self.lock:
            self._lecturer(key, _now(now))
            if run < 0 or step < 0:
                raise RoomError("a run and a step are counted from 0")
            if lecture is not None:
                self.lecture = bool(lecture)
            if run != self.run:
                self.frames, self.traces, self.started, self.settings = {}, (), False, None
            if frames:
                self.frames.update(frames)
            if record is not None:
                self.traces, self.started = tuple(record[0]), bool(record[1])
            self.run, self.step = run, step
            self.version += 1
            return self.version

    def offer(self, key: str, settings: dict[str, Any] | None, now: float | None = None) -> None:
        """The settings a student's fork of the lecturer's run starts from (None: none to fork)."""
        with self.lock:
            self._lecturer(key, _now(now))
            self.settings = None if settings is None else dict(settings)

    def fork_basis(self, cycle: int) -> dict[str, Any]:
        """What a student's own try of `cycle` starts from: the lecturer's settings. Refused for a run
        that cannot be forked, a cycle the lecturer has not reached, and a cycle whose question is
        open (a greedy run would show its answer before the reveal)."""
        with self.lock:
            if self.settings is None:
                raise RoomError("the lecturer's run is a recording: there is no decoder to fork")
            shown = at(self.step, True)[0]  # the cycle on the lecturer's screen (0: its start)
            if not 0 <= cycle <= shown:
                raise RoomForbidden(f"the lecturer has not reached cycle {cycle + 1} yet")
            poll = self.polls[-1] if self.polls else None
            if poll is not None and not poll.revealed and poll.run == self.run and poll.cycle == cycle:
                raise PollClosed("the class is answering a question about this cycle: try it after the reveal")
            return dict(self.settings)

    def open_poll(self, key: str, trace: CycleTrace, now: float | None = None) -> Poll:
        """Ask the room about `trace`'s cycle; an unrevealed earlier poll is closed unrevealed."""
        with self.lock:
            self._lecturer(key, _now(now))
            poll = Poll(len(self.polls) + 1, trace.cycle, poll_for(trace), self.run)
            self.polls.append(poll)
            self.version += 1
            return poll

    def reveal(self, key: str, number: int, now: float | None = None) -> Poll:
        with self.lock:
            self._lecturer(key, _now(now))
            poll = self._poll(number)
            poll.revealed = True
            self.version += 1
            return poll

    def glance(self, key: str, now: float | None = None) -> dict[str, Any]:
        """The room at a glance, for the lecturer's screen: who is here, who follows, answers in (the
        lecturer's page asks every second: it is how the room knows the lecturer is there)."""
        now = _now(now)
        with self.lock:
            self._lecturer(key, now)
            here = [s for s in self.students.values() if now - s.seen < STUDENT_IDLE_S]
            poll = self.polls[-1].view(lecturer=True) if self.polls else None
            return {"code": self.code, "joined": len(here), "following": sum(s.following for s in here),
                    "branched": sum(not s.following for s in here), "poll": poll}

    def results(self, key: str, run: int | None = None) -> list[dict[str, Any]]:
        """Every poll's anonymous result (of one run of the lecturer's), for the run file exported after class."""
        with self.lock:
            self._lecturer(key, time.monotonic())
            return [p.result() for p in self.polls if run is None or p.run == run]

    # ------------------------------------------------------------ a student

    def join(self, now: float | None = None) -> str:
        """A new student's key (a reload keeps its key and rejoins with it: `here`)."""
        now = _now(now)
        with self.lock:
            if len(self.students) >= MAX_STUDENTS:
                self._forget_gone(now)
            if len(self.students) >= MAX_STUDENTS:
                raise RoomFull(f"this room is full ({MAX_STUDENTS} students)")
            student = secrets.token_urlsafe(16)
            self.students[student] = Student(seen=now)
            return student

    def here(self, student: str, step: int | None, following: bool, now: float | None = None) -> dict[str, Any]:
        """A student's page says where it is; the answer is what it needs to follow the room."""
        now = _now(now)
        with self.lock:
            s = self._student(student)
            s.seen, s.step, s.following = now, step, bool(following)
            poll = self.polls[-1].view(student=student) if self.polls else None
            return {"run": self.run, "step": self.step, "version": self.version, "poll": poll,
                    "behind": None if step is None or following else self.step - step,
                    "lecturer_away": now - self.seen > LECTURER_AWAY_S, "fork": self.settings is not None}

    def record(self, student: str, run: int, step: int,
               now: float | None = None) -> tuple[tuple[CycleTrace, ...], bool]:
        """The cycles a student's page may draw its other views from at `step` of `run`: never a step
        the lecturer has not shown (403), never an old run (409: the page follows into the new one)."""
        with self.lock:
            self._student(student).seen = _now(now)
            if run != self.run:
                raise RunChanged("the lecturer has started a new run: this page follows into it")
            if step > self.step:
                raise RoomForbidden("the lecturer has not shown that step yet")
            return self.traces, self.started

    def answer(self, student: str, number: int, option: int, now: float | None = None) -> dict[str, Any]:
        """A student's answer to an open poll (replacing their earlier one); refused after the reveal."""
        with self.lock:
            s = self._student(student)
            s.seen = _now(now)
            poll = self._poll(number)
            if poll.revealed:
                raise PollClosed("this question has been revealed: answers no longer count")
            if poll is not self.polls[-1]:
                raise PollClosed("this question is closed: a newer one is open")
            if isinstance(option, bool) or not isinstance(option, int) or not 0 <= option < len(poll.question.options):
                raise RoomError(f"an answer is one of the options 0 to {len(poll.question.options) - 1}")
            poll.answers[student] = option
            return poll.view(student=student)

    # ------------------------------------------------------------ helpers

    def _student(self, student: str) -> Student:
        s = self.students.get(str(student))
        if s is None:
            raise RoomForbidden("this page is not a student of this room: join it again with its code")
        return s

    def _poll(self, number: int) -> Poll:
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= len(self.polls):
            raise RoomError(f"no question number {number!r} in this room")
        return self.polls[number - 1]

    def _forget_gone(self, now: float) -> None:
        """Students long gone make room (their answers stay counted)."""
        for key in [k for k, s in self.students.items() if now - s.seen >= STUDENT_IDLE_S]:
            answered = any(key in p.answers for p in self.polls)
            if not answered:
                del self.students[key]


class Rooms:
    """A server's rooms by code. Creating, finding (with a clear error for an unknown or expired
    code) and expiring; one lock for the table, each room its own for what happens in it."""

    def __init__(self, idle_s: float = ROOM_IDLE_S, max_rooms: int = MAX_ROOMS) -> None:
        self.idle_s, self.max_rooms = idle_s, max_rooms
        self._rooms: dict[str, Room] = {}
        self._expired: set[str] = set()
        self._lock = threading.Lock()

    def create(self, now: float | None = None) -> Room:
        now = _now(now)
        with self._lock:
            self._sweep(now)
            if len(self._rooms) >= self.max_rooms:
                raise RoomFull(f"this server already runs {self.max_rooms} live lectures")
            code = _new_code(self._rooms.keys() | self._expired)
            room = Room(code=code, lecturer_key=secrets.token_urlsafe(24), created=time.time(), seen=now)
            self._rooms[code] = room
            return room

    def find(self, code: str, now: float | None = None) -> Room:
        clean = normalise_code(code)
        with self._lock:
            self._sweep(_now(now))
            if clean in self._rooms:
                return self._rooms[clean]
            if clean in self._expired:
                raise RoomExpired(f"the live lecture {clean} has ended")
        raise RoomNotFound(f"no live lecture has the code {clean or repr(code)}: check the code on the screen")

    def __len__(self) -> int:
        with self._lock:
            return len(self._rooms)

    def _sweep(self, now: float) -> None:
        for code in [c for c, r in self._rooms.items() if now - r.seen >= self.idle_s]:
            del self._rooms[code]
            self._expired.add(code)


def normalise_code(code: Any) -> str:
    """A typed code as the room knows it: upper case, spaces and dashes dropped, other characters kept
    (an unknown code is refused as such, never trimmed into someone else's)."""
    return "".join(ch for ch in str(code).upper() if ch not in " -")[:16]


def _new_code(taken: Sequence[str] | set[str]) -> str:
    while True:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        if code not in taken:
            return code


def _now(now: float | None) -> float:
    return time.monotonic() if now is None else now
