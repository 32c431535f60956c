"""A session's work on a shared server, without Streamlit: decoding slots, actions on its run, parking.

Every model run takes a slot of the process-wide gate (`specviz.gate`); an idle session's decoder is
parked (`specviz.parking`) and rebuilt exactly on its next action. An action computes a new
immutable `Run` (`state`) and assigns it to the `Workspace` in one statement, under its lock, so an
error or a click arriving mid-step never leaves a half-updated state. Everything takes the
workspace as an argument: the stage's route acts outside any script run (`session` adds that side).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .. import parking
from ..errors import DecodingFinishedError, SpecvizError
from ..gate import Place, shared_gate
from ..server import ServerSettings
from .state import Run, Slot, Workspace, park, wake

URGENT_IN_HAND = 2  # fewer cycles computed ahead than this: a click or two from waiting


@contextmanager
def decoding_slot(ws: Workspace, on_wait: Callable[[Place], None] | None = None,
                  urgent: Callable[[], bool] | None = None) -> Iterator[None]:
    """Hold one of the server's decoding slots while a model runs (`specviz.gate`); `on_wait` is told
    the session's place while it waits. After `busy_timeout` the action fails with a clear message
    and nothing changes. With `urgent`, it waits as background work (`background_slot`)."""
    settings = ServerSettings.load()
    gate = shared_gate(settings.max_decoding)
    with gate.slot(on_wait=on_wait, timeout=settings.busy_timeout, urgent=urgent) as waited:
        if waited >= 1.0 and urgent is None:  # not for work nobody waited for
            ws.waited_note = (f"Waited {waited:.0f} s for a free decoding slot: this server decodes at most "
                              f"{settings.max_decoding} session(s) at once.")
        yield


def quiet_slot(ws: Workspace) -> Slot:
    """A decoding slot that waits without drawing (the stage's messages, from either path)."""
    return lambda: decoding_slot(ws)


def background_slot(ws: Workspace) -> Slot:
    """A quiet slot for work nobody waits for yet (a cycle computed ahead), behind every waiting click
    or page (`specviz.gate`); urgent itself once the run has fewer than `URGENT_IN_HAND` cycles in
    hand or one of this session's clicks waits (`wanting`)."""

    def urgent() -> bool:
        run = ws.run
        return bool(ws.wanted) or (run is not None and len(run.ahead_cycles) < URGENT_IN_HAND)

    return lambda: decoding_slot(ws, urgent=urgent)


@contextmanager
def wanting(ws: Workspace) -> Iterator[None]:
    """A click of this session waits for the server: its background work becomes urgent."""
    mark = object()
    ws.wanted.add(mark)
    shared_gate(ServerSettings.load().max_decoding).nudge()  # a queued prefetch of ours moves up now
    try:
        yield
    finally:
        ws.wanted.discard(mark)


def act(ws: Workspace, fn: Callable[[Run], Run], slot: Slot, moved: bool = True) -> None:
    """Run an action on the shown run; assign the result only if it succeeded (a parked decoder is
    rebuilt first, in `slot`). `moved=False`: the browser already shows the result (the stage
    component said where it is), so it is not told to follow (`Workspace.stage_seq`)."""
    parking.shared_registry().touch(ws)
    try:
        _act(ws, fn, slot)
    finally:
        ws.stage_version += 1  # whatever it did: payloads built before it are out of date
        if moved:  # also after an error: the stage stops waiting and shows where the server is
            ws.stage_seq += 1


def _act(ws: Workspace, fn: Callable[[Run], Run], slot: Slot) -> None:
    with ws.lock:
        if ws.run is None:
            return
        ws.waited_note = None
        try:
            woke = wake_note(ws, slot)  # a parked (idle) run's decoder is rebuilt first
            forcing = ws.run.dec is not None and bool(ws.run.dec.config.forced_outcomes)
            new = fn(ws.run)
        except Exception as exc:  # keep the app usable whatever happens, but say what it was
            ws.playing = False
            if isinstance(exc, DecodingFinishedError):  # not a failure: the text is complete
                ws.error, ws.finished_note = None, str(exc)
            else:
                ws.error = str(exc) if isinstance(exc, SpecvizError) else f"{type(exc).__name__}: {exc}"
            return
        if new is ws.run and woke is None:
            # Nothing happened (a message about a run no longer shown, which a new run replaced while
            # it waited for the lock). Not an action: the new run's notices stay for the page to draw.
            return
        kept = () if new.notices == ws.run.notices else new.notices  # a notice is shown once, until the next action
        new = dataclasses.replace(new, notices=(woke, *kept) if woke else kept)
        if forcing and len(new.traces) > len(ws.run.traces):
            ws.whatif_spent = True  # what-if forced this one cycle: switch the toggle off
        ws.run, ws.reset_asked = new, None  # the user moved on: a pending Reset question is withdrawn
        ws.error, ws.finished_note = None, None


def _swap(ws: Workspace, new: Run) -> None:
    """Replace the shown run; a pending Reset question follows it."""
    if ws.reset_asked is ws.run:
        ws.reset_asked = new
    ws.run = new


def park_idle(ws: Workspace) -> bool:
    """Release an idle session's decoder (its KV caches); the history stays (specviz.parking).
    Called by another session's sweep, under this session's lock."""
    run = ws.run
    if run is None or run.dec is None or ws.playing:
        return False
    # The session's earlier texts stay (a few KB, specviz.suffix_store.SessionStore): the resumed
    # retrieval proposer must find what the uninterrupted one would.
    _swap(ws, dataclasses.replace(park(run), parked_idle=True))
    return True


def wake_shown(ws: Workspace, slot: Slot) -> None:
    """Rebuild the shown run's parked decoder (if it is parked), saying so in its notices."""
    if note := wake_note(ws, slot):
        ws.run = dataclasses.replace(ws.run, notices=(note, *ws.run.notices))


def wake_note(ws: Workspace, slot: Slot) -> str | None:
    """Rebuild a parked run's decoder, exactly where it was; returns a note saying so."""
    run = ws.run
    if run is None or run.parked is None:
        return None
    _swap(ws, dataclasses.replace(wake(run, slot), parked_idle=False))
    away = time.time() - run.parked.parked_at
    # Parked by the idle sweep: it had been idle for the timeout before; parked because another run
    # was shown: only the time since.
    idle = away + (ServerSettings.load().idle_seconds if run.parked_idle else 0.0)
    idle_text = f"{idle / 60:.0f} min" if idle >= 90 else f"{idle:.0f} s"
    why = (f"This run was idle for about {idle_text}" if run.parked_idle
           else f"Another run was shown for the last {idle_text}")
    return (f"{why}, so its KV caches were released. They were rebuilt now from the {len(run.parked.committed)} "
            "committed tokens: the run continues exactly where it was, and the recorded history is unchanged.")
