"""One browser session's script runs: what a script run adds to `actions` (which needs no Streamlit).

The session's own `Workspace` cell (a reload's, taken over), a request to draw the whole page, a
decoding slot that shows the place in the queue while it waits, and the model pairs, loaded once
per process (a `st.cache_resource` store) and shared read-only by every session.

**One session per browser.** A workspace is bound to the Streamlit session that shows it (its
`owner`). A reload (F5) starts a new session, which takes the workspace over only with its secret
token: the page writes it into a short-lived cookie as it goes (`stage_app.js`, pagehide) and
nothing else carries it (not the page's address: a shared, bookmarked or projected address hands
nothing over), and only once the old session is disconnected. The token changes at every takeover,
and a session whose workspace was taken over gets a new one (a dropped connection that comes back
never drives the same run as another page: docs/design.md §3, "A reload comes back where it was").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import streamlit as st

from .. import heap
from ..errors import SpecvizError
from ..gate import Place
from ..server import ServerSettings
from . import actions
from .state import KEPT, Run, Workspace

RESUME_COOKIE = "specviz_resume"  # the workspace's token, written by the page as it goes (`open_workspace`)
OLD_PARAM = "session"  # where the token once was (the page's address): removed, never read
HANDOVER_WAIT_S = 1.0  # a reload's new session waits this long for the old one to be disconnected


def configure_threads(settings: ServerSettings) -> None:
    """Torch's intra-op thread count for this (whole) process: `ServerSettings.threads_per_step`."""
    import torch  # already imported by specviz; only the thread count is set here

    wanted = settings.threads_per_step()
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)


def workspace() -> Workspace:
    ws = st.session_state.get("_workspace")  # not setdefault: a new Workspace (a token) per call is waste
    return ws if ws is not None else st.session_state.setdefault("_workspace", Workspace())


def open_workspace(settings: ServerSettings | None = None) -> Workspace | None:
    """This session's workspace, before the sidebar's widgets are drawn: at its first script run the
    one the reload cookie names once that session has ended (a reload), with the page's settings as
    they were; else a new one (None when `settings` caps this server's sessions and it is full:
    `KEPT.admit`). A workspace another session has taken over since is left to it."""
    ss = st.session_state
    me = _session_id()
    ws = ss.get("_workspace")
    if ws is not None and ws.owner not in (None, me):  # its browser's reload took it: this page starts afresh
        ws = None
        ss.pop("_stage_channel", None)  # stage_component.CHANNEL: the old channel speaks for the old workspace
    if ws is None:
        if settings is not None:
            KEPT.keep = settings.restore_sessions
        token = _resume_token()
        ws = _handed_over(token, me) if token else None
        if ws is not None:
            ss.update(ws.widgets)
        else:
            lim = settings.limits if settings is not None else None
            if lim is not None and (full := KEPT.admit(lim.sessions, lim.sessions_per_client, _client(), connected)):
                st.error(full, icon=":material/group:")
                return None
            if token and token not in KEPT:  # a reload whose runs were let go (the restore list's bound, 3 h)
                st.toast(f"Your earlier runs could not be brought back: this server keeps those of the "
                         f"{KEPT.keep} most recently active pages, for up to 3 hours.", icon=":material/history:")
            ws = Workspace()
            KEPT.add(ws, me, _client())
        ss._workspace = ws
    if OLD_PARAM in st.query_params:  # an old address: it names nothing any more
        del st.query_params[OLD_PARAM]
    return ws


def _resume_token() -> str | None:
    """The token the page left in its cookie as it went (a reload), if any."""
    value = st.context.cookies.get(RESUME_COOKIE)
    return value if isinstance(value, str) and 8 <= len(value) <= 64 else None


def _client() -> str | None:
    """The browser's address as the server sees it (a classroom behind one NAT shares one)."""
    try:
        return st.context.ip_address
    except Exception:  # noqa: BLE001 - AppTest has no client
        return None


def _handed_over(token: str, me: str | None) -> Workspace | None:
    """The workspace `token` names, once its session is no longer connected (a reload's old session
    goes a moment after the new one may have started); None if it stays connected or there is none."""
    deadline = time.monotonic() + HANDOVER_WAIT_S
    while token in KEPT:
        ws = KEPT.claim(token, me, connected)
        if ws is not None or time.monotonic() > deadline:
            return ws
        time.sleep(0.1)
    return None


def _session_id() -> str | None:
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


def connected(session_id: str | None) -> bool:
    """Whether a session has a browser connected (AppTest runs no server: none is)."""
    from streamlit.runtime import Runtime

    return session_id is not None and Runtime.exists() and Runtime.instance().is_active_session(session_id)


def release_idle(ws: Workspace) -> bool:
    """The idle sweep's release (`parking`): a session that was playing when its browser went (a
    closed tab) stops playing, so its decoder is released like any idle one's."""
    if ws.playing and not connected(ws.owner):
        ws.playing = False
    return actions.park_idle(ws)


def request_full_run() -> None:
    """Ask for a run of the whole page after this callback (a button in the stage fragment re-runs
    only the fragment): the stage sees the flag and re-runs the app in the same script run, so the
    sidebar values the callback set are the ones the next run reads."""
    st.session_state._needs_full_run = True


def take_full_run_request() -> bool:
    return bool(st.session_state.pop("_needs_full_run", False))


@contextmanager
def decoding_slot() -> Iterator[None]:
    """`actions.decoding_slot` for this session, with a box showing its place in the queue while it
    waits (for a button's callback or the page; the stage's messages wait quietly: `actions.quiet_slot`)."""
    box: Any = None

    def waiting(place: Place) -> None:
        nonlocal box
        if box is None:
            box = st.empty()
        box.warning(place.message(), icon=":material/hourglass_top:")

    with actions.decoding_slot(workspace(), on_wait=waiting):
        if box is not None:
            box.empty()
        yield


def act(fn: Callable[[Run], Run]) -> None:
    """`actions.act` on this session's run (a parked decoder is rebuilt in a `decoding_slot`)."""
    actions.act(workspace(), fn, decoding_slot)


# ---------------------------------------------------------------- model loading (shared) -----


@st.cache_resource(show_spinner=False)
def _pair_store() -> dict[str, Any]:
    """Process-wide store of loaded pairs, shared read-only by every session: the store is the cached
    resource, not the loader (whose progress bar Streamlit would refuse to replay on a cache hit)."""
    return {"lock": threading.Lock(), "pairs": {}}


# Loaded pairs kept in memory; the oldest is dropped first. Four hold a classroom's whole set (the
# default and the tiny pair, in both precisions where `allow_bfloat16` is on): a dropped pair that
# sessions still use stays in memory with them, and loading it again would make one more copy.
MAX_PAIRS = 4


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
        return load_pair_cached(kind, target, draft, progress=progress, dtype=dtype)
    except SpecvizError as exc:
        st.error(f"Could not load the model pair: {exc}", icon=":material/error:")
        st.caption("Pick another pair in the sidebar (the tiny random pair always works).")
    except Exception as exc:  # unexpected loader failure: report, stay usable
        st.error(f"Could not load the model pair ({type(exc).__name__}): {exc}", icon=":material/error:")
    finally:
        bar.empty()
    return None
