"""A student's own try of a live lecture's cycle: a fork of the room's run on the student's decoder.

The follower page (`viz/follower`) links to the app with `?fork=<room code>&cycle=<c>`. Opened, the
app puts the lecturer's settings into the sidebar (`Room.fork_basis`: the prompt, the pair, the
proposer, K, the temperature, the seed…; `live.FORK_SETTINGS`), starts a run of the student's own
with them, and computes the cycles before `c` with the lecturer's seed, so the text so far is the
lecture's; from cycle `c` on, the decoder draws with a seed of its own (`SpeculativeDecoder.fork`):
the same cycle, the student's own random draws, stepped through at the student's pace. The history
is compared with the room's cycles, and a difference is said (a setting the lecturer changed during
the run, or a proposer that drafts from the session's own earlier texts).

A fork is an ordinary page of the app: every classroom limit applies to it (pages open at once and per
address, decoding slots, the sidebar's bounds). A cycle whose question is open cannot be forked
before the reveal, or a greedy run would show the answer (`Room.fork_basis`).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from typing import Any

import streamlit as st

from ..room import RoomError
from ..timeline import end_of
from ..trace import CycleTrace
from . import live, sidebar
from .state import Run, compute_cycle

ROOM, CYCLE = "fork", "cycle"  # the address's parameters
MAX_CYCLE = 10_000


@dataclasses.dataclass(frozen=True)
class Fork:
    code: str
    cycle: int  # 0-based
    lecture: tuple[CycleTrace, ...]  # the room's cycles when the fork was asked for (to compare with)


def take() -> str | None:
    """At a script run: a fork the address asks for (once) puts the lecture's settings in the sidebar
    and asks for a new run (`start` carries it out); the reason when it cannot be done."""
    params = st.query_params
    if ROOM not in params:
        return None
    code, cycle = params.get(ROOM, ""), params.get(CYCLE, "")
    del params[ROOM]
    if CYCLE in params:
        del params[CYCLE]
    if not cycle.isdigit() or int(cycle) > MAX_CYCLE:
        return "This link to try a lecture's cycle is not complete: open it again from the lecture's page."
    try:
        room = live.rooms().find(code)
        settings = room.fork_basis(int(cycle))
    except RoomError as no:
        return f"Cannot try this cycle of the lecture: {no}."
    sidebar.restore_widgets(settings)
    ss = st.session_state
    ss._pending_fork, ss._force_new_run = Fork(room.code, int(cycle), room.traces), True
    return None


def start(run: Run, slot: Any) -> Run:
    """A new run asked for by `take`: the lecture's cycles before the fork's, then the student's own
    random draws from it on; the run shows the start of that cycle."""
    fork = st.session_state.pop("_pending_fork", None)
    if fork is None:
        return run
    while len(run.traces) < fork.cycle and not run.dec.finished:
        run = compute_cycle(run, slot)
    with slot():
        dec = run.dec.fork(seed=secrets.randbelow(2**31))  # the student's own draws from here on
    step = end_of(len(run.traces))
    note = (f"Your own try of cycle {fork.cycle + 1} of the live lecture {fork.code}: the text so far is the "
            "lecture's, the random draws from here on are yours. Step through it at your own pace.")
    differs = first_difference(run.traces, fork.lecture)
    if differs is not None:
        note += (f" Your run's history differs from the lecture's from cycle {differs + 1} (a setting changed during "
                 "the lecture, or the proposer drafts from the lecturer's earlier texts).")
    return dataclasses.replace(run, dec=dec, ahead=(), view=step, revealed=step, before=None,
                               title=f"{fork.code} cycle {fork.cycle + 1}: your try", notices=(note,))


def first_difference(mine: Sequence[CycleTrace], lecture: Sequence[CycleTrace]) -> int | None:
    """The first cycle whose committed tokens differ between two runs (None: the same, as far as both go)."""
    for i, (a, b) in enumerate(zip(mine, lecture, strict=False)):
        if [e.token_id for e in a.emitted] != [e.token_id for e in b.emitted]:
            return i
    return None
