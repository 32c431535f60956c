"""The run/session state machine, without Streamlit (docs/design.md §3, "The stage").

A **run** (live, imported from a run file, or a replay into another cache layout) is a timeline of
steps (`specviz.timeline`): `revealed` is the furthest step shown so far, `view` the step shown now,
`before` the one before the last move. Stepping past `revealed` reveals the next phase, past the last
cycle runs the decoder (live runs only). `prefetch` computes the next cycles ahead on forks of the
decoder (`Run.ahead`), and `adopt` makes the first one the run's next cycle, so no cycle is computed
twice; cycles computed under another config are dropped. A `Workspace` holds a browser session's
runs. Every function returns a new `Run`, swapped in by one assignment: a failed step changes nothing.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import parking, precision, whatif
from ..config import DecodeConfig
from ..errors import DecodingFinishedError, SpecvizError
from ..suffix_store import SessionStore
from ..timeline import PHASES_PER_CYCLE, at, end_of
from ..trace import CacheSnapshot, CycleTrace

RunSource = Literal["live", "imported", "replay"]
Slot = Callable[[], AbstractContextManager]  # a decoding slot of the server's gate (specviz.gate)
MAX_RUNS = 8  # runs kept per browser session; the oldest is dropped first
PREFETCH_DEPTH = 3  # cycles computed ahead: Next cycle jumps a whole one, the click after it needs the next


class RecordingEndError(SpecvizError):
    """A recorded (imported or replayed) run has no more cycles to show."""


@dataclass(frozen=True)
class Ahead:
    """A cycle computed before it was asked for: its trace, the forked decoder that computed it
    (now past it) and the config it ran under."""

    trace: CycleTrace
    decoder: Any
    config: DecodeConfig


@dataclass(frozen=True)
class Run:
    """Everything one run shows. Replaced as a whole, never mutated in place (the one mutable object,
    a live run's decoder, changes only inside `step()`, which leaves it untouched when it raises)."""

    id: int
    title: str
    source: RunSource
    restart_key: tuple  # the settings that started it; other settings start a new run
    config: DecodeConfig
    prompt_ids: tuple[int, ...]
    prefill: tuple[CacheSnapshot, CacheSnapshot | None]  # target, proposer (None: lookup keeps no cache)
    texts: Callable[[int], str]  # token id -> display text (the tokenizer's, or the run file's table)
    pair: Any = None  # the loaded model pair (live runs)
    dec: Any = None  # the live SpeculativeDecoder; None while parked and for recorded runs
    parked: parking.ParkedDecoder | None = None  # what rebuilds `dec` exactly (specviz.parking)
    widgets: dict[str, Any] | None = None  # sidebar values that re-create this run's settings
    prompt_text: str = ""
    chat: bool = False
    pair_description: str = ""
    max_context: int | None = None  # positions a sequence may hold (the config's, capped by the models)
    traces: tuple[CycleTrace, ...] = ()
    revealed: int = 0  # furthest step of the timeline shown so far
    view: int = 0  # the step shown now
    before: int | None = None  # the step shown before the last move (the picture animates from it)
    baseline_ms_per_token: float | None = None
    baseline_tokens: int = 0
    lab: Any = None  # specviz.lab.LabResult of the last exactness lab
    notices: tuple[str, ...] = ()
    quiz: tuple[Any, ...] = ()  # specviz.ui.quiz.QuizResult per answered cycle
    ahead: tuple[Ahead, ...] = ()  # the next cycles, prefetched in order (not yet part of `traces`)
    parked_idle: bool = False  # parked by the idle sweep (not because another run was shown)
    cost_law: Any = None  # a run file's specviz.costlaw.CostLaw: the recording machine's (None: this machine's)
    polls: tuple = ()  # a recorded live lecture's questions and the class's counts (`RunRecord.polls`)

    @property
    def live(self) -> bool:
        return self.source == "live"

    @property
    def law(self) -> Any:
        """The cost law its statistics draw: the recording machine's for a run file that carries one,
        else this machine's for the run's pair (measured once per machine); None for neither."""
        if self.cost_law is not None or self.pair is None:
            return self.cost_law
        from ..costlaw import law_for

        return law_for(self.pair)

    @property
    def proposer(self) -> str:
        return self.dec.config.proposer if self.dec is not None else self.config.proposer

    @property
    def finished(self) -> bool:
        """No more cycles: the text ended, or a recording has shown all it holds."""
        if self.dec is not None:
            return bool(self.dec.finished)
        if self.parked is not None:
            return bool(self.traces and self.traces[-1].finish_reason)
        return True

    @property
    def ahead_cycles(self) -> tuple[CycleTrace, ...]:
        """The prefetched cycles, in order, if they still match the decoder's settings."""
        if not self.ahead or self.dec is None or self.dec.config != self.ahead[0].config:
            return ()
        return tuple(a.trace for a in self.ahead)

    @property
    def next_cycle(self) -> CycleTrace | None:
        """The prefetched next cycle, if it still matches the decoder's settings."""
        return next(iter(self.ahead_cycles), None)

    @property
    def cycles_shown(self) -> int:
        """Cycles whose rollback has been revealed (what the statistics count)."""
        return self.revealed // PHASES_PER_CYCLE

    @property
    def dtype(self) -> str:
        """The precision the run's pair ran in (specviz.precision): the decoder's, else what its cycles recorded."""
        if self.dec is not None:
            return self.dec.dtype
        if self.traces:
            return self.traces[0].dtype
        return precision.run_dtype(self.pair.target) if self.pair is not None else precision.DEFAULT_DTYPE

    def label(self, count: bool = True) -> str:
        """One line naming the run in the run selector. `count=False` for the run on screen: the list
        sits outside the stage, which steps without redrawing it, so a count there would go stale."""
        c = self.config
        cache = f"paged {c.page_size}/{c.free_policy}" if c.cache_layout == "paged" else "contiguous"
        cycles = f"{len(self.traces)} cycle{'s' if len(self.traces) != 1 else ''}" if count else "shown now"
        return f"#{self.id} · {self.title} · {c.proposer} · {self.dtype} · {cache} · seed {c.seed} · {cycles}"


def view_of(step: int, run: Run) -> tuple[int | None, str]:
    """(cycle index or None before the first cycle, phase name) of a timeline step."""
    return at(step, bool(run.traces))


def step_label(step: int, run: Run, phase_titles: dict[str, str]) -> str:
    """A history position as people count it: 'cycle 3 · 2 · Target verifies' (cycles from 1)."""
    cycle, phase = view_of(step, run)
    if cycle is None:
        return "prefill"
    forced = " (what-if)" if cycle < len(run.traces) and run.traces[cycle].forced else ""
    return f"cycle {cycle + 1}{forced} · {phase_titles.get(phase, phase)}"


def committed_ids(run: Run, cycle: int | None) -> list[int]:
    """The committed sequence at the start of `cycle` (the prompt before the first)."""
    return list(run.prompt_ids) + [e.token_id for t in run.traces[: (cycle or 0)] for e in t.emitted]


# ---------------------------------------------------------------- moving along the timeline ----


def _moved(run: Run, view: int, **changes: Any) -> Run:
    return dataclasses.replace(run, before=run.view, view=view, **changes)


def seek(run: Run, step: int) -> Run:
    """Show an already revealed step (the history slider)."""
    return _moved(run, max(0, min(step, run.revealed)))


def back(run: Run) -> Run:
    return _moved(run, max(0, run.view - 1))


def advance_phase(run: Run, slot: Slot = nullcontext) -> Run:
    """Show the next phase: replay a revealed one, reveal a recorded one, or run a new cycle."""
    if run.view < run.revealed:
        return _moved(run, run.view + 1)
    if run.revealed < end_of(len(run.traces)):
        return _moved(run, run.revealed + 1, revealed=run.revealed + 1)
    return compute_cycle(run, slot)


def advance_cycle(run: Run, slot: Slot = nullcontext) -> Run:
    """Show the end (rollback) of the current cycle, or of the next one when at a cycle end."""
    target_cycle = run.view // PHASES_PER_CYCLE  # at a cycle's end (its rollback), the next one
    grown = compute_cycle(run, slot) if target_cycle >= len(run.traces) else run
    end = end_of(target_cycle + 1)
    return dataclasses.replace(grown, before=run.view, view=end, revealed=max(grown.revealed, end))


def compute_cycle(run: Run, slot: Slot = nullcontext) -> Run:
    """Run one real cycle (or adopt the prefetched one); returns the run showing its draft phase.
    Forced outcomes (what-if) apply to this one cycle only (`whatif.forced_step`), as its notice says."""
    adopted = adopt(run)
    if len(adopted.traces) > len(run.traces):
        return _at_draft(adopted, run.view, notices=())
    run = adopted
    if not run.live:
        raise RecordingEndError(recording_end_text(len(run.traces)))
    if run.dec.finished:
        raise DecodingFinishedError(finished_text(run.dec.finish_reason))
    forced = run.dec.config.forced_outcomes
    try:
        with slot():
            result = whatif.forced_step(run.dec)
    finally:
        whatif.exact_again(run.dec)  # also when the step failed: forcing never outlives its one cycle
    whatif.exact_again(result.decoder)
    grown = dataclasses.replace(run, dec=result.decoder, traces=(*run.traces, result.trace), ahead=())
    return _at_draft(grown, run.view, notices=whatif.notices(result, forced) if forced else ())


def _at_draft(run: Run, before: int, **changes: Any) -> Run:
    """`run` showing its last cycle's draft phase (revealed up to there)."""
    step = end_of(len(run.traces) - 1) + 1
    return dataclasses.replace(run, revealed=step, before=before, view=step, **changes)


def finished_text(reason: str | None) -> str:
    why = f" ({reason})" if reason else ""
    return f"Generation has finished{why}. Press Reset or change the prompt to start again."


def recording_end_text(cycles: int) -> str:
    return (f"This run is a recording with {cycles} cycle(s) and they are all shown. "
            "Start a live run (change a setting, or Reset) to decode further.")


def prefetch(run: Run, slot: Slot = nullcontext) -> Run:
    """Compute one more cycle ahead, on a fork of the decoder that computed the last one (the run's
    own, or the last prefetched one's), without showing it, unless `can_compute_ahead` says no or
    the next cycle is a what-if one (forcing is asked for at the moment it runs). Cycles computed
    under other settings are dropped first. Errors propagate; the run is unchanged."""
    if not run.live or not can_compute_ahead(run) or run.dec.config.forced_outcomes:
        return run
    ahead = run.ahead if run.ahead_cycles else ()
    twin = (ahead[-1].decoder if ahead else run.dec).fork()  # caches and random streams copied: the same next cycle
    with slot():
        trace = twin.step()
    # Labelled with the fork's own settings: the page may change the run's (`sync_config`) meanwhile.
    return dataclasses.replace(run, ahead=(*ahead, Ahead(trace, twin, twin.config)))


def can_compute_ahead(run: Run) -> bool:
    """Whether `prefetch` may compute a cycle: a decoder (not parked, not a recording), fewer than
    `PREFETCH_DEPTH` cycles in hand, the text not ended (the run's decoder, or the last prefetched cycle's)."""
    cycles = run.ahead_cycles
    if run.dec is None or len(cycles) >= PREFETCH_DEPTH:
        return False
    return not (cycles[-1].finish_reason if cycles else run.dec.finished)


def adopt(run: Run) -> Run:
    """The first prefetched cycle becomes the run's next one (the view does not move); cycles
    computed under other settings are dropped."""
    if not run.ahead:
        return run
    if run.next_cycle is None:
        return dataclasses.replace(run, ahead=())
    first, *rest = run.ahead
    return dataclasses.replace(run, dec=first.decoder, traces=(*run.traces, first.trace), ahead=tuple(rest))


def show_step(run: Run, step: int) -> Run:
    """Show a step the browser already showed (it steps locally and says where it is): adopt the
    prefetched cycles up to the one the step lies in (the browser may be two cycles on, its report
    of the first one still on its way or never sent), reveal up to it."""
    while step > end_of(len(run.traces)) and run.next_cycle is not None:
        run = adopt(run)
    step = max(0, min(step, end_of(len(run.traces))))
    return dataclasses.replace(run, before=run.view, view=step, revealed=max(run.revealed, step))


def run_to_cycle(run: Run, cycle: int, slot: Slot = nullcontext) -> Run:
    """Compute (without revealing) cycles until `cycle` exists, then show its start."""
    while len(run.traces) <= cycle:
        if run.dec.finished:
            raise DecodingFinishedError(f"Generation finished after {len(run.traces)} cycle(s).")
        run = compute_cycle(run, slot)
    start = end_of(cycle)
    return dataclasses.replace(run, view=start, revealed=start, before=None)


# ---------------------------------------------------------------- starting and sleeping ----------


def start_live_run(run_id: int, title: str, restart_key: tuple, pair: Any, cfg: DecodeConfig, prompt_ids: list[int],
                   *, slot: Slot = nullcontext, session_texts: SessionStore | None = None, **fields: Any) -> Run:
    """Build and prefill a decoder (drafting from `session_texts`, the session's earlier texts);
    raises SpecvizError and leaves nothing behind."""
    from ..engine import SpeculativeDecoder  # torch-heavy: only live runs need it

    dec = SpeculativeDecoder(pair, cfg, session_texts)
    with slot():
        dec.start(prompt_ids)
    n = len(dec.committed)
    prefill = (dec.target_cache.snapshot(n), dec.proposer.snapshot(n))
    return Run(id=run_id, title=title, source="live", restart_key=restart_key, config=cfg,
               prompt_ids=tuple(prompt_ids), prefill=prefill, texts=dec.token_text, pair=pair, dec=dec,
               max_context=dec.max_context, **fields)


def sync_config(run: Run, cfg: DecodeConfig, live_fields: tuple[str, ...]) -> None:
    """Apply changed live fields (K, temperature, top-k/p, ...) from the next cycle on."""
    cur = run.dec.config
    if any(getattr(cur, f) != getattr(cfg, f) for f in live_fields):
        run.dec.update_config(cur.replace(**{f: getattr(cfg, f) for f in live_fields}))


def park(run: Run) -> Run:
    """Release a live run's decoder (its KV caches); the history stays."""
    if run.dec is None:
        return run
    return dataclasses.replace(run, dec=None, parked=parking.park(run.dec), ahead=())


def wake(run: Run, slot: Slot = nullcontext) -> Run:
    """Rebuild a parked run's decoder, exactly where it was."""
    if run.parked is None:
        return run
    with slot():
        dec = parking.resume(run.pair, run.parked)
    return dataclasses.replace(run, dec=dec, parked=None)


# ---------------------------------------------------------------- the workspace ----------------


@dataclass
class Workspace:
    """One browser session's runs and the lock around them: its one mutable cell. Actions assign a new
    `Run` to `run` in one statement, under `lock`, through the cell fetched *before* a slow step: a
    script run abandoned mid-step can still write through it, so the decoder and history agree."""

    run: Run | None = None  # the run shown
    others: tuple[Run, ...] = ()  # earlier runs, newest last, parked
    next_id: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)
    error: str | None = None  # the last action's error, shown until the next action
    finished_note: str | None = None
    playing: bool = False
    whatif_spent: bool = False  # a forced cycle ran: the what-if toggle switches off on the next run
    reset_asked: Run | None = None  # the run a Reset question is shown for
    last_active: float = 0.0  # time.monotonic() of the last script run (specviz.parking)
    waited_note: str | None = None
    stage_seq: int = 0  # bumped by each move the server makes on its own: the stage then follows it
    stage_version: int = 0  # bumped by every action and cycle computed ahead: older payloads are ignored
    prefetch_failed: Any = None  # (run id, cycles, config) whose prefetch failed: not retried
    wanted: set = field(default_factory=set)  # this session's clicks waiting for the server (`actions.wanting`)
    prefetching: threading.Lock = field(default_factory=threading.Lock)  # held by the one computing ahead
    # What this session's runs wrote (retrieval drafts from it): never shared, cleared when parked idle.
    session_texts: SessionStore = field(default_factory=SessionStore)
    # The page's address names the workspace (`Kept`): a reload, which starts a new session, finds it.
    token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    owner: str | None = None  # the session that shows it (a reloaded page's new session takes it over)
    client: str | None = None  # the browser's address as the server saw it (`Kept.admit`)
    uploads: int = 0  # run files this page opened (a classroom server caps them: `ServerSettings.check_upload`)
    widgets: dict = field(default_factory=dict)  # the owner's page settings at its last script run
    live: Any = None  # the live lecture this session gives (`ui/live.Lecture`), or None

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def runs(self) -> list[Run]:
        """Every run, oldest first, the shown one included."""
        return [*self.others, *([self.run] if self.run is not None else [])]

    def add(self, run: Run | None) -> None:
        """Show `run` (None: no run until the page starts one); the one shown so far stays
        selectable (parked) when it recorded anything."""
        if self.run is not None and self.run.traces:
            self.others = (*self.others, park(self.run))[-(MAX_RUNS - 1) :]
        self.run, self.reset_asked = run, None

    def select(self, run_id: int) -> Run:
        """Show an earlier run; the current one joins the others."""
        chosen = next((r for r in self.others if r.id == run_id), None)
        if chosen is None:
            raise SpecvizError(f"There is no run #{run_id} in this session.")
        rest = tuple(r for r in self.others if r.id != run_id)
        if self.run is not None:
            rest = (*rest, park(self.run))
        self.others, self.run, self.reset_asked = rest, chosen, None
        return chosen


class Kept(dict[str, Workspace]):
    """The workspaces of this process's sessions by their secret token: a reload (F5) starts a new
    session, which takes its runs over from here at the step shown (`session.open_workspace`). At
    most `keep` of them (the least recently active dropped first: that page's reload then starts
    afresh), none idle for longer than `keep_s`. Handed over only once its owner's session is gone
    (`active`), and under a new token each time: a token seen once opens nothing again.

    Every workspace added is also counted while it lives (weakly), for `admit`."""

    def __init__(self, keep: int = 64, keep_s: float = 3 * 3600) -> None:
        super().__init__()
        self.keep, self.keep_s = keep, keep_s
        self._lock = threading.Lock()
        self._live: weakref.WeakValueDictionary[int, Workspace] = weakref.WeakValueDictionary()

    def add(self, ws: Workspace, owner: str | None, client: str | None = None) -> None:
        with self._lock:
            ws.owner, ws.client, ws.last_active = owner, client, ws.last_active or time.monotonic()
            self[ws.token] = ws
            self._live[id(ws)] = ws
            now = time.monotonic()
            for token in [t for t, w in self.items() if w.last_active and now - w.last_active > self.keep_s]:
                del self[token]
            by_age = sorted(self, key=lambda t: self[t].last_active)
            for token in by_age[: max(0, len(by_age) - self.keep)]:
                del self[token]

    def claim(self, token: str, owner: str | None, active: Callable[[str], bool]) -> Workspace | None:
        """The workspace `token` names, now owned by `owner` and named by a new token; None when there
        is none, or its owner is still connected."""
        with self._lock:
            ws = self.get(token)
            if ws is None or (ws.owner not in (None, owner) and active(ws.owner)):
                return None
            del self[token]
            ws.token = secrets.token_urlsafe(16)
            self[ws.token] = ws
            ws.owner, ws.playing = owner, False
            return ws

    def admit(self, most: int | None, most_per_client: int | None, client: str | None,
              active: Callable[[str | None], bool]) -> str | None:
        """Why a new session may not have a workspace (at most `most` connected sessions, and at most
        `most_per_client` from one browser address), or None when it may."""
        with self._lock:
            live = [ws for ws in self._live.values() if active(ws.owner)]
        if most is not None and len(live) >= most:
            return (f"This classroom server is full: {len(live)} pages are open, and it serves at most {most} "
                    "at once. Try again in a few minutes (a page closed frees its place).")
        mine = sum(ws.client == client for ws in live) if client is not None else 0
        if most_per_client is not None and mine >= most_per_client:
            return (f"{mine} pages of this server are already open from your address, the most this classroom "
                    f"server allows ({most_per_client}). Close one of them (or use its tab) and reload.")
        return None


KEPT = Kept()  # this process's
