"""The stage as a Streamlit custom component (components v2): the browser steps, the server computes.

Every phase of a cycle is known the moment the cycle is computed, so a server round trip per
phase (a script run, a sanitised `st.html` re-inserted) is waste. The component is mounted once,
with a fixed key, straight into the page (`isolate_styles=False`: the page's KV stylesheet applies
and tests find `.svkv` with a plain query). It receives the steps around the one shown
(`viz.stage_data.window`: the shown cycle, the step before it and the prefetched next cycles) and
steps through them itself — on the page's Next phase / Next cycle / Back buttons and the arrow
keys — patching the picture in place so the nodes transition and glide (`viz/static/stage.js`).

It tells the server where it is only when that matters (`stage_events`): when it enters another
cycle (the server adopts the prefetched cycle and computes one more), after every step
when something below the picture follows the phase (the quiz, an open tab), once when stepping
pauses (so Play and Reset start from the step on screen), once more when it has stopped for a few
seconds (`pause`: the server re-runs the whole page, for the history slider outside the fragment),
and when it needs a step it does not have. The server's own moves bump `Workspace.stage_seq`, and
the component follows them.

Two ways in, one handling: a message comes as the component's trigger (a run of the stage
fragment, whose payload is the answer) or, where the process serves it, through the stage's own
route (`stage_route`: a POST answered with the payload, no script run). Both go through `handle`
and `payload`, for the session's `Channel`: the page's last `PageView` (what a route call cannot
read from a script run), the step bodies the browser holds, the requests answered.

Prefetch: when the payload says the server could compute one more cycle ahead (`can_prefetch`:
fewer than `state.PREFETCH_DEPTH` in hand), the component asks for it (`{"kind": "prefetch"}`);
the server computes it (`state.prefetch`, on a fork, under a decoding slot like any model run)
and the answer brings it. The browser keeps stepping meanwhile. Asked by the
browser rather than computed at the end of every script run: a page that nobody looks at (a test
harness, a closed tab) computes nothing ahead. The exceptions are a new run's: its first cycle,
computed with its prefill (app.py `first_cycle_ahead`), so that the first click is as quick as
the others, and the cycles after it, computed in a thread of their own while the browser draws
the page (`prefetch_in_background`; someone who just opened the page or changed a setting looks).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import secrets
import threading
import time
from functools import cache
from typing import Any

import streamlit as st

from ..errors import SpecvizError
from ..gate import ServerBusyError
from ..trace import CYCLE_PHASES
from ..viz import stage_data, stage_js
from . import stage_events, stage_route
from .session import (
    act,
    background_slot,
    callback_slot,
    quiet_slot,
    request_full_run,
    wake_note,
    wanting,
    workspace,
)
from .state import PHASES_PER_CYCLE, PREFETCH_DEPTH, Run, Workspace, can_compute_ahead, prefetch

KEY = "stage"
NAME = "specviz_stage"
CHANNEL = "_stage_channel"  # the session's `Channel`
SERVED = "_stage_served"  # when the last event's callback started and ended (epoch ms; the latency bench)
PREFETCH_WAIT_S = 60.0  # a prefetch message on the route waits this long for the one computing


@cache
def _component() -> Any:
    return st.components.v2.component(NAME, css=stage_js.stage_css(), js=stage_js.app_js(), isolate_styles=False)


@dataclasses.dataclass(frozen=True)
class PageView:
    """What the page decided about the stage on its last script run: the stage's route builds its
    payloads with it (a route call runs no script)."""

    lecture: bool
    max_rows: int
    proposer_label: str
    suffix: str
    compare: stage_data.Timeline | None  # the second picture's steps ("Compare side by side")
    quiz: bool
    tabs: bool  # the tabs under "More views" are open (`tabs_follow`)

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
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)  # around a payload's building


def channel() -> Channel:
    """This session's channel (made on first use, and then reachable by the route)."""
    ch = st.session_state.get(CHANNEL)
    if ch is None:
        ch = st.session_state[CHANNEL] = Channel(workspace())
        stage_route.register(ch)
    return ch


def on_event() -> None:
    """The component's `event` trigger: a report of where it is, or a step it asks for."""
    state = st.session_state.get(KEY)
    raw = state.get("event") if hasattr(state, "get") else getattr(state, "event", None)
    event = stage_events.parse(raw)
    if event is None:
        return
    start = time.time() * 1000
    try:
        _on_event(event)
    finally:
        st.session_state[SERVED] = served_stamp(event, start)


def served_stamp(event: dict[str, Any], start: float) -> dict[str, Any]:
    return {"kind": event["kind"], "req": event.get("req"), "event_at": round(start),
            "callback_ms": round(time.time() * 1000 - start, 1)}


def _on_event(event: dict[str, Any]) -> None:
    if handle(channel(), event):
        request_full_run()


def handle(ch: Channel, event: dict[str, Any], route: bool = False) -> bool:
    """Carry out a parsed event for the session of `ch`, from a script run's callback, or from the
    stage's route (`route`: no Streamlit state is touched, the slots are the workspace's
    `quiet_slot`). True when the whole page should be drawn again (the history slider and the open
    tabs are outside the fragment)."""
    slot, ws = (quiet_slot(ch.ws), ch.ws) if route else (callback_slot, None)
    if "have" in event:
        ch.have = event["have"]
    if event.get("req") in ch.answered:  # a request sent again that had arrived after all: done already
        return False
    if event["kind"] == "prefetch":
        prefetch_next(ch.ws, event["run"], wait=route)  # on the route: the answer brings them
        return False
    moves = stage_events.moves_server(event)
    with wanting(ch.ws) if moves else contextlib.nullcontext():  # a click waits for this one
        act(lambda r: stage_events.apply(r, event, slot), moved=moves, ws=ws)
    if "req" in event:
        ch.answered.append(event["req"])  # the payload that follows answers it
    if event["kind"] == "view":  # the browser moved on (a new cycle, a pause): the next cycle, in the same run
        prefetch_next(ch.ws, event["run"])
    return bool(event.get("pause")) or (ch.view is not None and ch.view.tabs)


def tabs_follow() -> bool:
    """Whether the tabs below the stage are open (not in lecture mode, which has none): they follow
    the phase shown, so the stage reports every step and each report re-runs the whole page."""
    ss = st.session_state
    return bool(ss.get("more")) and not ss.get("lecture")


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


def can_prefetch(run: Run, ws: Workspace) -> bool:
    """Whether one more cycle could be computed in advance now (see `prefetch_next`). A parked run
    (idle, or shown again from the run list) can: its decoder is rebuilt first, in the background."""
    if not run.live or run.finished:
        return False
    if run.dec is not None and not can_compute_ahead(run):
        return False
    if run.dec is None and run.parked is None:
        return False
    config = run.dec.config if run.dec is not None else run.parked.config
    if config.forced_outcomes:
        return False  # a what-if cycle is computed when it is asked for
    return ws.prefetch_failed != _prefetch_mark(run)


def _prefetch_mark(run: Run) -> tuple:
    """The run state a failed prefetch is remembered for (not retried until it changes)."""
    config = run.dec.config if run.dec is not None else run.parked.config
    return (run.id, len(run.traces), len(run.ahead_cycles), config)


def can_grow(run: Run) -> bool:
    """Whether the server can compute beyond the steps it has."""
    if not run.live:
        return False
    ahead = run.ahead_cycles
    if ahead:
        return not ahead[-1].finish_reason
    return not run.finished


def end_text(run: Run) -> str:
    if run.live:
        last = (*run.traces, *run.ahead_cycles)
        reason = last[-1] if last else None
        why = f" ({reason.finish_reason})" if reason is not None and reason.finish_reason else ""
        return f"Generation has finished{why}. Press Reset or change the prompt to start again."
    return (f"This run is a recording with {len(run.traces)} cycle(s) and they are all shown. "
            "Start a live run (change a setting, or Reset) to decode further.")


def quiz_steps(run: Run, steps: range, quiz: bool) -> list[int]:
    """Verify steps of unanswered quiz questions: the browser holds there once before skipping."""
    if not quiz:
        return []
    answered = {q.cycle for q in run.quiz}
    verify = CYCLE_PHASES.index("verify")
    traces = (*run.traces, *run.ahead_cycles)  # the prefetched ones too
    out = []
    for s in steps:
        c, p = divmod(s - 1, PHASES_PER_CYCLE)
        if s > 0 and p + 1 == verify and c < len(traces) and c not in answered and traces[c].k > 0:
            out.append(s)
    return out


def intro(run: Run, proposer_label: str, lecture: bool) -> str:
    """The guided start, except in lecture mode (a teacher's screen)."""
    if lecture:
        return ""
    target = run.pair.target_name if run.pair is not None else (run.pair_description.split(" + ")[0] or "target")
    return stage_data.intro_html(target, proposer_label)


def payload(ch: Channel, *, page: bool = False, served: dict[str, Any] | None = None,
            deflate: bool = True) -> dict[str, Any]:
    """What the component is sent: the steps around the one shown, for the page's last `view`
    (`deflate`: the bodies deflated, see `stage_data.pack`)."""
    start = time.time() * 1000
    ws, view = ch.ws, ch.view
    # What the payload says about the server's moves is read before the run it shows, never after:
    # an action assigns the run first, then bumps these (`session.act`, `handle`), so the run is at
    # least as new as they are. Read after it, a payload built while a request of this session was
    # carried out elsewhere said "answered" over the step before (the browser took it as the
    # answer, and the click was lost: bench.load at N = 8).
    seq, answered = ws.stage_seq, ch.answered[-1] if ch.answered else None
    with ch.lock:
        version = ws.stage_version  # read before the run: a payload is never newer than it says
        run = ws.run
        tl = timeline(ch, run)
        steps = stage_data.window(run.view, tl, PREFETCH_DEPTH)
        packed = stage_data.pack(
            stage_data.steps_payload(tl, steps, lecture=view.lecture, max_rows=view.max_rows, compare=view.compare),
            have=ch.have, shown=run.view, deflate=deflate)
    data = {
        "run": run.id,
        "seq": seq,
        "version": version,
        "view": run.view,
        "answered": answered,
        **packed,
        "more": can_grow(run),
        "end": end_text(run),
        "follow": view.follow,
        "lecture": view.lecture,
        "quiz": quiz_steps(run, steps, view.quiz),
        "prefetch": can_prefetch(run, ws),
        "intro": intro(run, view.proposer_label, view.lecture),
        "page": page,  # a whole-page run: the history slider below is drawn for `view`
        # The stage's own route, which answers without a script run (None: the page's trigger only),
        # and the channel's token: the route's key, and what `version` counts within.
        "route": stage_route.address() if view.compare is None else None,
        "channel": ch.token,
    }
    # Where the server's part of an event's round trip went (epoch ms: on one machine the browser's
    # clock compares): the callback, then this payload's building. Only after an event (a run with no
    # event sends the same data as before). Read by bench.browser_latency.
    if served is not None:
        now = time.time() * 1000
        data["served"] = {**served, "built_at": round(now), "build_ms": round(now - start, 1)}
    return data


def page_payload(view: PageView, page: bool) -> dict[str, Any]:
    """The payload of a script run, for the page's current `view`."""
    ch = channel()
    ch.view = view
    return payload(ch, page=page, served=st.session_state.pop(SERVED, None))


def show(data: dict[str, Any]) -> None:
    _component()(key=KEY, data=data, on_event_change=on_event)


def prefetch_next(ws: Workspace, run_id: int, wait: bool = False) -> bool:
    """Compute cycles ahead of the shown run until it has `PREFETCH_DEPTH` in hand; True when one
    was added. One caller per session does it (`Workspace.prefetching`): each waiter holds a place
    in the server's queue, and eight sessions' redundant waiters once kept the real ones waiting
    for 8 s. Another caller returns at once, or with `wait` (the route's prefetch message, whose
    answer should bring the cycles) when the one computing has finished.

    Each cycle is computed under the run's lock, so a click of this session that needs it waits for
    it (and adopts it) rather than computing it a second time; the lock is let go between cycles.
    It waits for a decoding slot as background work (`session.background_slot`: after every click
    and page that waits, unless the run is short of cycles in hand or a click of this session waits
    for it). A failure is remembered (not retried for this run state) and left for the click that
    asks for the cycle to report, with the usual words; a busy server is not a failure of the run
    (asked again, it may have a slot)."""
    if not (ws.prefetching.acquire(timeout=PREFETCH_WAIT_S) if wait else ws.prefetching.acquire(blocking=False)):
        return False
    try:
        added = False
        while _wants_prefetch(ws, run_id) and _prefetch_one(ws, run_id):
            added = True
        return added
    finally:
        ws.prefetching.release()


def prefetch_in_background(ws: Workspace, run_id: int) -> None:
    """Start computing a new run's cycles ahead now, in a thread of its own, while the browser
    draws the page (a new run is looked at: someone just opened the page or changed a setting).
    Asked for by the browser once the page was drawn, they came late when many pages opened at
    once: with eight, every session waited 0.5-6 s at the cycle after its first Next cycle. Only
    where a browser draws the page (`stage_route.serving`): under AppTest a script run is all
    there is, and a thread computing beside it would make what it shows depend on timing."""
    if stage_route.serving():
        threading.Thread(target=prefetch_next, args=(ws, run_id), name="specviz-prefetch", daemon=True).start()


def _prefetch_one(ws: Workspace, run_id: int) -> bool:
    slot = background_slot(ws)
    with ws.lock:  # a click of this session waits for it here, and promotes it meanwhile (`wanting`)
        if not _wants_prefetch(ws, run_id):  # the run moved on while this waited
            return False
        run, mark = ws.run, _prefetch_mark(ws.run)
        try:
            # A parked decoder is rebuilt here, not on the click that needs it (re-prefilling a long
            # context took seconds on that click).
            note = wake_note(ws, slot)
            if note:
                ws.run = run = dataclasses.replace(ws.run, notices=(note, *ws.run.notices))
            new = prefetch(run, slot)
        except ServerBusyError:
            return False
        except SpecvizError:
            ws.prefetch_failed = mark
            return False
        except Exception:  # noqa: BLE001 - the click that asks for the cycle reports it
            ws.prefetch_failed = mark
            return False
        ws.run = dataclasses.replace(ws.run, ahead=new.ahead)
        ws.stage_version += 1
    return True


def _wants_prefetch(ws: Workspace, run_id: int) -> bool:
    run = ws.run
    return run is not None and run.id == run_id and can_prefetch(run, ws)

