"""What the stage component says, and what the run does about it (no Streamlit).

The browser steps through the phases it has by itself and tells the server only when it matters
(docs/design.md §3, "The stage"). Each message is one dict, sent as the component's `event`
trigger:

    {"kind": "view", "run": 3, "step": 7}                     # where the browser is now
    {"kind": "view", "run": 3, "step": 7, "pause": true}      # ... and stepping has paused
    {"kind": "prefetch", "run": 3, "step": 7}                 # compute the next cycle in advance
    {"kind": "next_phase" | "next_cycle" | "back" | "seek",   # a step the browser does not have
     "run": 3, "step": 10, "target": 11}

A request (a step the browser does not have) carries an id, `"req": "mount:n"`, that the payload
answering it echoes (`answered`): a trigger value can be lost on its way, so an unanswered request
is sent again with the same id, and applying one twice changes nothing (the run moves to the
browser's step first, then steps).

Every message may also say which step bodies the browser holds (`"have": [signatures]`,
`viz.stage_data.pack`): the payloads that follow leave those out (except the shown step's). A
browser that lacks a body it was not sent (a remounted stage starts empty) lacks that step, and
asks for it like any other.

`step` is always the step the browser shows. The run first moves there (adopting the prefetched
cycles up to the one the step lies in), then does what was asked, with the same state-machine functions the
page's buttons use, so a click answered by the server and one answered locally cannot disagree.
A message from a page that shows another run is ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from .state import Run, Slot, advance_cycle, advance_phase, back, prefetch, seek, show_step

KINDS = ("view", "prefetch", "next_phase", "next_cycle", "back", "seek")
MAX_HAVE = 256  # signatures a message may list (the browser keeps a few dozen)


def parse(event: Any) -> dict[str, Any] | None:
    """A well-formed message, or None (a stale or foreign value is ignored, never an error)."""
    if not isinstance(event, dict) or event.get("kind") not in KINDS:
        return None
    try:
        out = {"kind": event["kind"], "run": int(event["run"]), "step": int(event["step"])}
        if "target" in event:
            out["target"] = int(event["target"])
        if "req" in event:
            out["req"] = str(event["req"])[:40]
        if event.get("pause") is True:
            out["pause"] = True
        if "have" in event:
            out["have"] = frozenset(int(h) for h in list(event["have"])[:MAX_HAVE])
    except (KeyError, TypeError, ValueError):
        return None
    return out


def moves_server(event: dict[str, Any]) -> bool:
    """False for a report: the browser already shows that step, so it need not be told to follow."""
    return event["kind"] not in ("view", "prefetch")


def apply(run: Run, event: dict[str, Any], slot: Slot = nullcontext) -> Run:
    """The run after `event` (parsed). Raises what the state machine raises (e.g. a finished text)."""
    if event["run"] != run.id:
        return run
    run = show_step(run, event["step"])
    actions: dict[str, Callable[[Run], Run]] = {
        "view": lambda r: r,
        "prefetch": lambda r: prefetch(r, slot),
        "next_phase": lambda r: advance_phase(r, slot),
        "next_cycle": lambda r: advance_cycle(r, slot),
        "back": back,
        "seek": lambda r: seek(r, event.get("target", r.view)),
    }
    return actions[event["kind"]](run)
