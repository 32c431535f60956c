"""The server's Python heap, frozen once built, so each script run's garbage collection stays cheap.

Streamlit runs `gc.collect(2)` after every script run, walking every tracked object under the GIL.
`settle()` collects once and freezes what survives (`gc.freeze`; docs/design.md §3), so later
collections see only what was made since. Frozen garbage waits for the next `settle()`: at a
process's first script run, after a pair is loaded or dropped, and when the idle sweep released
decoders or sessions went away (`settle_if_sessions_left`).
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_state = {"settled": False, "sessions": 0}


def settle() -> int:
    """Collect everything (frozen objects included), then freeze what is left; returns how many objects are frozen."""
    with _lock:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _state["settled"] = True
        return gc.get_freeze_count()


def settle_once() -> None:
    """`settle()` the first time a process asks (its first script run: imports done)."""
    if not _state["settled"]:
        settle()


def settle_if_sessions_left(sessions: int, released: int) -> bool:
    """After the idle sweep: settle when it released decoders (`released` > 0) or the process knows
    fewer sessions than at the last look (a closed session's objects may be frozen). True if it did."""
    with _lock:
        before, _state["sessions"] = _state["sessions"], sessions
    if released > 0 or sessions < before:
        settle()
        return True
    return False
