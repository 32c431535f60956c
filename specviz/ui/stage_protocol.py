"""The stage's protocol: what the browser says, what the run does about it, what it is sent back.

The browser steps through the phases it has by itself and tells the server only when it matters
(docs/design.md §3, "The stage"). Each message is one dict:

    {"kind": "view", "run": 3, "step": 7}                     # where the browser is now
    {"kind": "view", "run": 3, "step": 7, "pause": true}      # ... and stepping has paused
    {"kind": "prefetch", "run": 3, "step": 7}                 # compute the next cycle in advance
    {"kind": "next_phase" | "next_cycle" | "back" | "seek",   # a step the browser does not have
     "run": 3, "step": 10, "target": 11}
    {"kind": "play", "run": 3, "step": 7, "on": true}         # Play (false: Pause) from the step shown

A request (a step the browser does not have) carries an id, `"req": "mount:n"`, that the payload
answering it echoes (`answered`); one sent again because its answer was late is carried out once.
A message may list the step bodies the browser holds (`"have"`, `viz.stage_data.pack`): the
payloads that follow leave those out. `step` is always the step the browser shows: the run first
moves there (adopting the prefetched cycles up to it), then does what was asked with the functions
the page's buttons use, so a click answered by the server and one answered locally cannot disagree.

A message comes two ways, as the component's trigger (a script run, `stage_component`) or through
the stage's own route (an HTTP call, `stage_route`), and both go through `handle` and `payload` for
the session's `Channel`: no Streamlit here. When the payload says one more cycle could be computed
ahead (`can_prefetch`), the browser asks for it, and `prefetch_next` computes it on a fork
(`state.prefetch`) as background work: a page nobody looks at computes nothing ahead.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from ..gate import ServerBusyError
from ..proposers import registry
from ..timeline import at
from ..viz import stage_data
from . import live, state
from .actions import act, background_slot, quiet_slot, wake_shown, wanting
from .state import PREFETCH_DEPTH, Run, Slot, Workspace

KINDS = ("view", "prefetch", "next_phase", "next_cycle", "back", "seek", "play")
MAX_HAVE = 256  # signatures a message may list (the browser keeps a few dozen)
MAX_COUNT = 10**9  # a run id, a step, a target: far beyond any run's length
MAX_SIG = 2**53  # a step body's signature (`stage_data.pack`: a counter of the server process)
MAX_SENT = 2**53  # `sent`, the page's clock in ms: 285,000 years
ORDER_WINDOW_S = 120.0  # `in_order` skips a message sent before the latest only this long after it
PREFETCH_WAIT_S = 60.0  # a prefetch message on the route waits this long for the one computing


# ---------------------------------------------------------------- messages ---------------------


class BadMessage(ValueError):
    """A message that is not a stage message (the route answers 400; the trigger ignores it)."""


def parse(event: Any) -> dict[str, Any] | None:
    """A well-formed message, or None (a stale or foreign value is ignored, never an error). Numbers
    must be finite and in range, integers integral: `1e999` as a step is no step (`BadMessage`)."""
    if not isinstance(event, dict) or event.get("kind") not in KINDS:
        return None
    try:
        out = {"kind": event["kind"], "run": _count(event["run"]), "step": _count(event["step"])}
        if "target" in event:
            out["target"] = _count(event["target"])
        if "req" in event:
            out["req"] = _text(event["req"])
        if "sent" in event:  # the page's own clock (ms since it opened): see `in_order`
            out["sent"] = _number(event["sent"], MAX_SENT)
        if event.get("pause") is True:
            out["pause"] = True
        if out["kind"] == "play":
            out["on"] = event.get("on") is True
        if "have" in event:
            if not isinstance(event["have"], list):
                raise BadMessage("have")
            out["have"] = frozenset(_count(h, MAX_SIG) for h in event["have"][:MAX_HAVE])
    except (KeyError, BadMessage):
        return None
    return out


def _number(value: Any, top: float) -> float:
    """A JSON number in [0, top]; booleans and strings are not numbers here."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= top:
        raise BadMessage(repr(value)[:40])  # NaN fails the comparison too
    return value


def _count(value: Any, top: int = MAX_COUNT) -> int:
    number = _number(value, top)
    if number != int(number):
        raise BadMessage(repr(value)[:40])
    return int(number)


def _text(value: Any) -> str:
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise BadMessage(repr(value)[:40])
    return str(value)[:40]


def moves_server(event: dict[str, Any]) -> bool:
    """False for a report: the browser already shows that step, so it need not be told to follow."""
    return event["kind"] not in ("view", "prefetch")


def apply(run: Run, event: dict[str, Any], slot: Slot = contextlib.nullcontext) -> Run:
    """The run after `event` (parsed). Raises what the state machine raises (e.g. a finished text)."""
    if event["run"] != run.id:
        return run
    run = state.show_step(run, event["step"])
    actions: dict[str, Callable[[Run], Run]] = {
        "view": lambda r: r,
        "prefetch": lambda r: state.prefetch(r, slot),
        "next_phase": lambda r: state.advance_phase(r, slot),
        "next_cycle": lambda r: state.advance_cycle(r, slot),
        "back": state.back,
        "seek": lambda r: state.seek(r, event.get("target", r.view)),
        # Play steps at once from the step on screen; Pause stays on it (a step the server made on
        # the timer after it, on its way to the browser, is undone).
        "play": lambda r: state.advance_phase(r, slot) if event.get("on") else r,
    }
    return actions[event["kind"]](run)


# ---------------------------------------------------------------- one session's stage ----------


@dataclasses.dataclass(frozen=True)
class PageView:
    """What the page decided about the stage on its last script run: the stage's route builds its
    payloads with it (a route call runs no script)."""

    lecture: bool
    max_rows: int
    proposer_label: str
    suffix: str
    # The second picture's steps ("Compare side by side"): memoised per run state, so compared by
    # identity (`Channel.look`); by value it would walk every trace.
    compare: stage_data.Timeline | None = dataclasses.field(compare=False)
    quiz: bool
    tabs: bool  # the tabs under "More views" are open (`stage_component.tabs_follow`)
    live: bool = False  # a live lecture is on: its room follows every step (`ui/live.py`)

    @property
    def follow(self) -> bool:
        """Something below the picture follows every step (the quiz, an open tab)."""
        return self.quiz or self.tabs


@dataclasses.dataclass(eq=False)
class Channel:
    """One browser session's stage on the server, reachable from its script runs (session state)
    and from the stage's route (`stage_route`, by `token`): the workspace, the page's last
    `PageView`, the step bodies the browser holds, the requests answered, the built steps."""

    ws: Workspace
    token: str = dataclasses.field(default_factory=lambda: secrets.token_urlsafe(18))
    view: PageView | None = None
    have: frozenset[int] = frozenset()  # step signatures the browser last said it holds
    answered: collections.deque = dataclasses.field(default_factory=lambda: collections.deque(maxlen=64))
    memo: tuple | None = None  # (run state, Timeline): see `timeline`
    latest: float = 0.0  # when the browser sent the newest message carried out (`in_order`), page clock
    latest_at: float = 0.0  # ... and when it was carried out (server's monotonic clock; 0: none yet)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)  # around a payload's building
    calls: int = 0  # the route's calls of this session in flight (`stage_route`, in its event loop only)
    owner: str | None = dataclasses.field(default=None, init=False)  # the session the workspace had then

    def __post_init__(self) -> None:
        self.owner = self.ws.owner

    @property
    def current(self) -> bool:
        """Whether this channel's session still shows its workspace: a reload's new session that took
        it over (`session.open_workspace`) leaves the old session's channel dead (the route: 410)."""
        return self.ws.owner == self.owner

    def look(self, view: PageView) -> None:
        """The page's script run set the stage's `view`. A change (lecture mode, the quiz...) dates every
        payload built before it, like an action: the browser keeps only the newest `version`."""
        with self.lock:  # a payload reads the view and the version together
            if self.view != view or self.view.compare is not view.compare:
                self.ws.stage_version += 1
            self.view = view


def handle(ch: Channel, event: dict[str, Any], route: bool = False) -> bool:
    """Carry out a parsed event for the session of `ch`, from a script run's callback or from the
    stage's route (`route`: a prefetch message waits for the cycles its answer brings). It waits for
    a decoding slot without drawing (an element drawn in a callback shifts the page). True when the
    whole page should be drawn again (the history slider and the open tabs are outside the fragment)."""
    slot = quiet_slot(ch.ws)
    if "have" in event:
        ch.have = event["have"]
    if event.get("req") in ch.answered:  # a request sent again that had arrived after all: done already
        return False
    if event["kind"] == "prefetch":
        prefetch_next(ch.ws, event["run"], wait=route)  # on the route: the answer brings them
        return False
    if event["kind"] == "view":
        publish_shown(ch, event)  # before the workspace's lock, which a cycle computed ahead may hold
    moves = moves_server(event)
    if event["kind"] == "play":  # before the step: a step that fails (the end of the text) stops it again
        ch.ws.playing = bool(event.get("on")) and ch.ws.run is not None and ch.ws.run.id == event["run"]
    with wanting(ch.ws) if moves else contextlib.nullcontext():  # a click waits for this one
        act(ch.ws, lambda r: in_order(ch, event, r, slot), slot, moved=moves)
    if "req" in event:
        ch.answered.append(event["req"])  # the payload that follows answers it
    if event["kind"] == "view":  # the browser moved on (a new cycle, a pause): the next cycle, in the same run
        prefetch_next(ch.ws, event["run"])
    # Play and Pause: the page draws the other button (and the stage's timer starts or stops).
    return bool(event.get("pause")) or event["kind"] == "play" or (ch.view is not None and ch.view.tabs)


def publish_shown(ch: Channel, event: dict[str, Any]) -> None:
    """A live lecture's room follows the lecturer's report at once, from the steps the last payload
    built (the browser shows one of them): no wait for a cycle that the workspace's lock is computing."""
    memo, view = ch.memo, ch.view
    if ch.ws.live is None or memo is None or view is None or memo[0][0] != event["run"]:
        return
    tl = memo[1]
    with ch.lock:
        shown = [s for s in stage_data.window(event["step"], tl, PREFETCH_DEPTH) if s <= event["step"]]
        steps = stage_data.steps_payload(tl, shown, lecture=view.lecture, max_rows=view.max_rows, compare=view.compare)
    sent = (ch.token, event.get("sent", float("inf")))
    live.publish(ch.ws, event["run"], event["step"], steps, view.lecture, sent=sent, timeline=tl)


def in_order(ch: Channel, event: dict[str, Any], run: Run, slot: Slot) -> Run:
    """`apply`, under the workspace's lock, unless the browser sent `event` before a message already
    carried out (the route's calls take that lock in no set order: design.md §3, the stage's protocol).

    `sent` is the page's own clock (`performance.now()`: monotonic, from the page's opening), so a
    wall clock stepping back cannot reorder anything. The server's clock bounds what a bad stamp can
    do: a message is skipped only within `ORDER_WINDOW_S` of the latest one's carrying out (a race
    between waiting calls lasts seconds), and a stamp further ahead of the latest than the server's
    own time since then allows is carried out without becoming the latest, so `sent` = 1e15 cannot
    freeze a session."""
    sent, now = event.get("sent"), _clock()
    if sent is not None:
        if sent < ch.latest and now - ch.latest_at < ORDER_WINDOW_S:
            return run
        if not ch.latest_at or sent - ch.latest <= (now - ch.latest_at + ORDER_WINDOW_S) * 1000:
            ch.latest, ch.latest_at = sent, now
    return apply(run, event, slot)


def _clock() -> float:
    return time.monotonic()


def served_stamp(event: dict[str, Any], start: float) -> dict[str, Any]:
    """When an event's handling started and how long it took (epoch ms; read by the latency bench)."""
    return {"kind": event["kind"], "req": event.get("req"), "event_at": round(start),
            "callback_ms": round(time.time() * 1000 - start, 1)}


# ---------------------------------------------------------------- the payload ------------------


def timeline(ch: Channel, run: Run) -> stage_data.Timeline:
    """The run's steps as the browser may show them (with the prefetched cycles), built once per
    run state and kept in the channel: the steps it renders are memoised inside it."""
    view = ch.view
    ahead = run.ahead_cycles
    key = (run.id, run.source, len(run.traces), id(run.traces[-1]) if run.traces else 0, tuple(map(id, ahead)),
           view.suffix, view.proposer_label)
    memo = ch.memo
    if memo is None or memo[0] != key:
        parts = memo[1].memo if memo is not None and memo[0][0] == run.id else {}  # the run's rendered steps
        tl = stage_data.Timeline(
            prompt_ids=run.prompt_ids, prefill=run.prefill, traces=(*run.traces, *ahead),
            texts=run.texts, proposer=run.proposer, proposer_label=view.proposer_label, real=len(run.traces),
            status_suffix=view.suffix, memo=parts,
        )  # fmt: skip
        memo = ch.memo = (key, tl)
    return memo[1]


def can_grow(run: Run) -> bool:
    """Whether the server can compute beyond the steps it has."""
    ahead = run.ahead_cycles
    return run.live and not (ahead[-1].finish_reason if ahead else run.finished)


def end_text(run: Run) -> str:
    if not run.live:
        return state.recording_end_text(len(run.traces))
    last = (*run.traces, *run.ahead_cycles)
    return state.finished_text(last[-1].finish_reason if last else None)


def quiz_steps(run: Run, steps: range, quiz: bool) -> list[int]:
    """Verify steps of unanswered quiz questions: the browser holds there once before skipping."""
    if not quiz:
        return []
    answered = {q.cycle for q in run.quiz}
    traces = (*run.traces, *run.ahead_cycles)  # the prefetched ones too
    shown = [(s, *at(s, True)) for s in steps]
    return [s for s, c, phase in shown if phase == "verify" and c < len(traces) and c not in answered
            and traces[c].k > 0]


def intro(run: Run, proposer_label: str, lecture: bool) -> str:
    """The guided start, except in lecture mode (a teacher's screen)."""
    if lecture:
        return ""
    target = run.pair.target_name if run.pair is not None else (run.pair_description.split(" + ")[0] or "target")
    # Plain words for someone new: the model's name without how its file was made ("Q4_1 GGUF …,
    # de-quantised"), the proposer said in words before its name ("feature head").
    plain = next((e.words.plain for e in registry.entries() if e.name == run.proposer), "") or proposer_label
    return stage_data.intro_html(target.split(" (")[0], plain)


def payload(ch: Channel, *, route: str | None = None, page: bool = False, served: dict[str, Any] | None = None,
            deflate: bool = True) -> dict[str, Any]:
    """What the component is sent: the steps around the one shown, for the page's last `view`
    (`route`: where the stage's route is served, None where none is; `deflate`: the bodies
    deflated, see `stage_data.pack`)."""
    start = time.time() * 1000
    ws = ch.ws
    # What the payload says about the server's moves is read before the run it shows: an action
    # assigns the run first, then bumps these (`actions.act`, `handle`), so the run is at least as
    # new as they say, and a payload never answers a request over the step before it.
    seq, answered = ws.stage_seq, ch.answered[-1] if ch.answered else None
    with ch.lock:
        version = ws.stage_version  # read before the run: a payload is never newer than it says
        view = ch.view  # with the version (`Channel.look`)
        run = ws.run
        tl = timeline(ch, run)
        steps = stage_data.window(run.view, tl, PREFETCH_DEPTH)
        whole = stage_data.steps_payload(tl, steps, lecture=view.lecture, max_rows=view.max_rows, compare=view.compare)
        packed = stage_data.pack(whole, have=ch.have, shown=run.view, deflate=deflate)
    # A live lecture's room follows (ui/live.py), with the run's cycles for the followers' other views.
    live.publish(ws, run.id, run.view, whole, view.lecture, seq=seq, timeline=tl)
    data = {
        "run": run.id, "seq": seq, "version": version, "view": run.view, "answered": answered, **packed,
        "more": can_grow(run), "end": end_text(run), "follow": view.follow, "live": view.live, "lecture": view.lecture,
        "quiz": quiz_steps(run, steps, view.quiz), "prefetch": can_prefetch(run, ws),
        "intro": intro(run, view.proposer_label, view.lecture),
        "playing": ws.playing,  # what the page's Play button does when the browser takes its click
        "page": page,  # a whole-page run: the history slider below is drawn for `view`
        # The route answers without a script run (None: the page's trigger only); the channel's token
        # is the route's key, and what `version` counts within.
        "route": route if view.compare is None else None, "channel": ch.token,
        "resume": ws.token,  # the workspace's secret: a reload of this page takes its runs over with it
    }  # fmt: skip
    # Where the server's part of an event's round trip went (epoch ms: on one machine the browser's
    # clock compares): the callback, then this payload's building. Read by bench.browser_latency.
    if served is not None:
        now = time.time() * 1000
        data["served"] = {**served, "built_at": round(now), "build_ms": round(now - start, 1)}
    return data


# ---------------------------------------------------------------- computing ahead --------------


def can_prefetch(run: Run, ws: Workspace) -> bool:
    """Whether one more cycle could be computed in advance now (see `prefetch_next`). A parked run
    (idle, or shown again from the run list) can: its decoder is rebuilt first, in the background."""
    if not run.live or run.finished or (run.dec is None and run.parked is None):
        return False
    if run.dec is not None and not state.can_compute_ahead(run):
        return False
    mark = _prefetch_mark(run)  # a what-if cycle (forced outcomes) is computed when it is asked for
    return not mark[-1].forced_outcomes and ws.prefetch_failed != mark


def _prefetch_mark(run: Run) -> tuple:
    """The run state a failed prefetch is remembered for (not retried until it changes)."""
    config = run.dec.config if run.dec is not None else run.parked.config
    return (run.id, len(run.traces), len(run.ahead_cycles), config)


def prefetch_next(ws: Workspace, run_id: int, wait: bool = False) -> bool:
    """Compute cycles ahead of the shown run until it has `PREFETCH_DEPTH` in hand; True when one
    was added. One caller per session computes (`Workspace.prefetching`); another returns at once,
    or with `wait` (the route's prefetch message) once the one computing has finished. Each cycle
    is computed under the run's lock (a click that needs it waits for it and adopts it), in a
    background slot (`actions.background_slot`). A failure is remembered for this run state and left
    for the click that asks for the cycle to report; a busy server is not a failure of the run."""
    if not ws.prefetching.acquire(timeout=PREFETCH_WAIT_S if wait else 0):
        return False
    try:
        added = False
        while _wants_prefetch(ws, run_id) and _prefetch_one(ws, run_id):
            added = True
        return added
    finally:
        ws.prefetching.release()


def _prefetch_one(ws: Workspace, run_id: int) -> bool:
    slot = background_slot(ws)
    with ws.lock:  # a click of this session waits for it here, and promotes it meanwhile (`wanting`)
        if not _wants_prefetch(ws, run_id):  # the run moved on while this waited
            return False
        mark = _prefetch_mark(ws.run)
        try:
            wake_shown(ws, slot)  # a parked decoder is rebuilt here, not on the click that needs it
            new = state.prefetch(ws.run, slot)
        except ServerBusyError:
            return False
        except Exception:  # noqa: BLE001 - SpecvizError or not: the click that asks for the cycle reports it
            ws.prefetch_failed = mark
            return False
        ws.run = dataclasses.replace(ws.run, ahead=new.ahead)
        ws.stage_version += 1
    return True


def _wants_prefetch(ws: Workspace, run_id: int) -> bool:
    run = ws.run
    return run is not None and run.id == run_id and can_prefetch(run, ws)
