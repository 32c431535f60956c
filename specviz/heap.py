"""The server's Python heap, frozen once it is built: what keeps each script run's garbage collection cheap.

Streamlit runs a full garbage collection (`gc.collect(2)`) at the end of every script run
(`runner.postScriptGC`), so that objects caught in reference cycles -- a dropped decoder and its KV
caches among them -- are freed at once. A full collection walks every object the collector
tracks: with a model pair loaded, hundreds of thousands (torch, transformers, pandas, plotly, the
tokenizer), while holding the GIL, so the server cannot even send what the run drew meanwhile --
and every round trip of the stage is a script run.

`settle()` collects once and freezes what survives (`gc.freeze`): frozen objects are never walked
again, so the collection after a script run sees only what was made since. The price: garbage
among frozen objects waits for the next `settle()` (which unfreezes first, so that collection sees
everything). So settle whenever frozen garbage may have appeared: at a process's first script run
and after a pair is loaded or dropped (the bulk of the heap, built before any run exists), and
after the idle sweep released decoders or sessions went away (`settle_if_sessions_left`).
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_state = {"settled": False, "sessions": 0}


def settle() -> int:
    """Collect everything (frozen objects included), then freeze what is left; returns how many
    objects are frozen."""
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
