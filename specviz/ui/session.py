"""One browser session on a shared server: its workspace, the gate, parking and the model store.

Sharing one server (`specviz.server`, `specviz.gate`, `specviz.parking`): every model run (a
cycle, a prefill, the baseline, the lab) takes a slot of a process-wide gate, so at most
`max_decoding` sessions decode at once and a waiting page says how many are ahead of it; a
session idle for `idle_seconds` has its decoder parked (caches freed, history kept) and rebuilt
exactly on its next action. The model pair is loaded once per process (a `st.cache_resource`
store) and shared read-only by every session; each session has its own decoders and runs.

State discipline: every click computes a new immutable `Run` first (specviz.ui.state) and
assigns it to the session's `Workspace` in one statement, under the workspace's lock, so an
error (or a click arriving mid-step) never leaves a half-updated state.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import streamlit as st

from .. import heap, parking
from ..errors import DecodingFinishedError, SpecvizError
from ..gate import shared_gate
from ..server import ServerSettings
from .state import Run, Slot, Workspace, wake


def server_settings() -> ServerSettings:
    """This server's settings (environment over .streamlit/specviz.toml; read on every run, cheap)."""
    return ServerSettings.load()


def configure_threads(settings: ServerSettings) -> None:
    """Torch's intra-op thread count for this server process (process-wide: every script thread
    picks it up). Up to `max_decoding` sessions decode at once, each with its own team of this
    many threads, so the cores are divided among them (`ServerSettings.threads_per_step`): 1 on
    ≤ 2 cores, where OpenMP's busy-waiting made a 5-token verify pass ~6 s on 2 threads vs
    ~0.16 s on 1 under load (bench/threads.py). SPECVIZ_THREADS=N overrides."""
    import torch  # already imported by specviz; only the thread count is set here

    wanted = settings.threads_per_step()
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)


def workspace() -> Workspace:
    return st.session_state.setdefault("_workspace", Workspace())


def request_full_run() -> None:
    """Ask for a run of the whole page after this callback. A button inside the stage fragment
    re-runs only the fragment, but some actions change what the rest of the page shows: another
    run (its settings go back into the sidebar), a scenario, a reset. The stage sees the flag and
    re-runs the app — in the same script run, so the sidebar values set by the callback are the
    ones the next run reads (the browser never sends back its stale copies)."""
    st.session_state._needs_full_run = True


def take_full_run_request() -> bool:
    return bool(st.session_state.pop("_needs_full_run", False))


@contextmanager
def decoding_slot(show_wait: bool = True, ws: Workspace | None = None,
                  urgent: Callable[[], bool] | None = None) -> Iterator[None]:
    """Hold one of the server's decoding slots while a model runs (`specviz.gate`). While the
    slots are taken the page says so, with the session's place in the queue, instead of freezing;
    after `busy_timeout` the action fails with a clear message and nothing changes. With `ws`
    given and `show_wait` off it touches no Streamlit state (the stage's route, `stage_route`);
    with `urgent`, it waits as background work (`background_slot`)."""
    settings = server_settings()
    box: Any = None

    def waiting(place: Any) -> None:
        nonlocal box
        if not show_wait:
            return
        if box is None:
            box = st.empty()
        box.warning(place.message(), icon=":material/hourglass_top:")

    gate = shared_gate(settings.max_decoding)
    with gate.slot(on_wait=waiting, timeout=settings.busy_timeout, urgent=urgent) as waited:
        if box is not None:
            box.empty()
        if waited >= 1.0 and urgent is None:  # not for work nobody waited for
            (ws or workspace()).waited_note = (
                f"Waited {waited:.0f} s for a free decoding slot: this server decodes at most "
                f"{settings.max_decoding} session(s) at once."
            )
        yield


def quiet_slot(ws: Workspace) -> Slot:
    """A decoding slot that waits without drawing and without Streamlit (the stage's route)."""
    return lambda: decoding_slot(show_wait=False, ws=ws)


URGENT_IN_HAND = 2  # fewer cycles computed ahead than this: a click or two from waiting


def background_slot(ws: Workspace) -> Slot:
    """A quiet slot for work nobody waits for yet (a cycle computed ahead): every session's click
    or page that waits for a slot goes first (`specviz.gate`, "Someone waiting goes first"). It
    becomes urgent itself when the run has fewer than `URGENT_IN_HAND` cycles in hand (Next cycle
    and the click after it would wait) or one of this session's clicks waits (`wanting`)."""

    def urgent() -> bool:
        run = ws.run
        return bool(ws.wanted) or (run is not None and len(run.ahead_cycles) < URGENT_IN_HAND)

    return lambda: decoding_slot(show_wait=False, ws=ws, urgent=urgent)


@contextmanager
def wanting(ws: Workspace) -> Iterator[None]:
    """A click of this session waits for the server: its background work becomes urgent."""
    mark = object()
    ws.wanted.add(mark)
    shared_gate(server_settings().max_decoding).nudge()  # a queued prefetch of ours moves up now
    try:
        yield
    finally:
        ws.wanted.discard(mark)


def act(fn: Callable[[Run], Run], moved: bool = True, ws: Workspace | None = None) -> None:
    """Run an action on the shown run; assign the result only if it succeeded. `moved=False`: the
    browser already shows the result (the stage component said where it is), so it is not told to
    follow (`Workspace.stage_seq`). `ws` given: outside a script run (the stage's route), where a
    parked decoder is rebuilt under a `quiet_slot`."""
    slot = decoding_slot if ws is None else quiet_slot(ws)
    ws = ws or workspace()  # fetched before the (possibly slow) action: see Workspace
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
        except DecodingFinishedError as exc:  # not a failure: the text is complete
            ws.error, ws.finished_note, ws.playing = None, str(exc), False
            return
        except SpecvizError as exc:
            ws.error, ws.playing = str(exc), False
            return
        except Exception as exc:  # keep the app usable whatever happens, but say what it was
            ws.error, ws.playing = f"{type(exc).__name__}: {exc}", False
            return
        if new.notices and new.notices == ws.run.notices:
            new = dataclasses.replace(new, notices=())  # a notice is shown once, until the next action
        if woke:
            new = dataclasses.replace(new, notices=(woke, *new.notices))
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
    _swap(ws, dataclasses.replace(run, dec=None, parked=parking.park(run.dec), ahead=(), parked_idle=True))
    return True


def wake_note(ws: Workspace, slot: Slot = decoding_slot) -> str | None:
    """Rebuild a parked run's decoder, exactly where it was; returns a note saying so."""
    run = ws.run
    if run is None or run.parked is None:
        return None
    _swap(ws, dataclasses.replace(wake(run, slot), parked_idle=False))
    away = time.time() - run.parked.parked_at
    # Parked by the idle sweep: it had been idle for the timeout before; parked because another run
    # was shown: only the time since.
    idle = away + (server_settings().idle_seconds if run.parked_idle else 0.0)
    idle_text = f"{idle / 60:.0f} min" if idle >= 90 else f"{idle:.0f} s"
    why = (f"This run was idle for about {idle_text}" if run.parked_idle
           else f"Another run was shown for the last {idle_text}")
    return (
        f"{why}, so its KV caches were released. They were rebuilt now from the {len(run.parked.committed)} "
        "committed tokens: the run continues exactly where it was, and the recorded history is unchanged."
    )


# ---------------------------------------------------------------- model loading (shared) -----


@st.cache_resource(show_spinner=False)
def _pair_store() -> dict[str, Any]:
    """Process-wide store of loaded pairs, shared read-only by every browser session.

    A plain `st.cache_resource` on the loader itself cannot show progress: Streamlit would try to
    replay the progress bar (created outside the function) on cache hits and refuses to. So the
    store is the cached resource, and loading happens outside the cache, under a lock (a second
    session asking for the same pair waits for the first load instead of loading it twice).
    """
    return {"lock": threading.Lock(), "pairs": {}}


MAX_PAIRS = 3  # loaded pairs kept in memory; the oldest is dropped first


def load_pair_cached(kind: str, target: str = "", draft: str = "", progress: Any = None,
                     dtype: str = "float32") -> Any:
    """The pair `kind` (tiny, default or custom target + draft) in precision `dtype`, loaded once per
    server process and shared; one pair per dtype (a bfloat16 pair is a second copy, not a view)."""
    import specviz
    from specviz.precision import dtype_name

    dtype = dtype_name(dtype)
    store = _pair_store()
    tiny_eos = kind == "tiny" and os.environ.get("SPECVIZ_TINY_EOS") == "1"
    key = (kind, target, draft, tiny_eos, dtype)
    with store["lock"]:
        pairs: dict = store["pairs"]
        if key not in pairs:
            if kind == "tiny":
                pair = specviz.build_tiny_pair(seed=0, with_eos=tiny_eos, dtype=dtype)
            elif kind == "default":
                pair = specviz.load_default_pair(dtype=dtype, progress=progress)
            else:
                pair = specviz.load_pair(target=target, draft=draft, dtype=dtype, progress=progress)
            while len(pairs) >= MAX_PAIRS:
                pairs.pop(next(iter(pairs)))
            pairs[key] = pair  # errors raise before this line: failures are never cached
            heap.settle()  # the pair (and what loading it imported) joins the frozen heap; a dropped one leaves it
        return pairs[key]


def load_pair_with_progress(kind: str, target: str, draft: str, dtype: str = "float32") -> Any:
    """The pair, with a progress bar while it loads; None (and a clear error) when it cannot."""
    bar = st.empty()

    def progress(msg: str, fraction: float | None = None) -> None:
        bar.progress(min(max(fraction or 0.0, 0.0), 1.0), text=f"Loading models: {msg}")

    try:
        pair = load_pair_cached(kind, target, draft, progress=progress, dtype=dtype)
    except SpecvizError as exc:
        bar.empty()
        st.error(f"Could not load the model pair: {exc}", icon=":material/error:")
        st.caption("Pick another pair in the sidebar (the tiny random pair always works).")
        return None
    except Exception as exc:  # unexpected loader failure: report, stay usable
        bar.empty()
        st.error(f"Could not load the model pair ({type(exc).__name__}): {exc}", icon=":material/error:")
        return None
    bar.empty()
    return pair


def callback_slot() -> AbstractContextManager[None]:
    """`decoding_slot` for the stage component's callbacks: it waits without drawing. An element
    drawn in a callback lands at the top of the page and shifts everything after it, and a shifted
    stage component can be remounted (its steps lost, a click waiting for an answer it no longer
    expects); the stage says "Computing…" itself, and a long wait is reported after it
    (`Workspace.waited_note`). The buttons' callbacks (the page without JavaScript, AppTest) keep
    the waiting box with the session's place in the queue."""
    return decoding_slot(show_wait=False)
