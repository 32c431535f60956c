"""The browser-run stage without a browser: prefetch, the component's messages, its payload.

* **Prefetch is exact and single.** A cycle computed in advance on a fork of the decoder is the
  cycle the decoder computes on demand (same tokens, verdicts, draws, cache events), run after run;
  reaching it adopts it (the fork becomes the decoder: nothing is computed twice), and a live
  setting change drops it (the next cycle runs under the new setting, as without prefetch).
* **Messages** (`specviz.ui.stage_protocol`): malformed or foreign ones are ignored; a report moves the
  server to the browser's step (adopting the prefetched cycle when the step lies in it); a request
  moves there first, then steps with the same functions the buttons use.
* **Payload** (`specviz.viz.stage_data`): the window of steps (the shown cycle, the step before it,
  the next cycle when known), each with the picture whose title names the step, the status line,
  the narrative and the strip; the hooks tests rely on (`data-role="verdict"` from the accept phase
  on, `data-role="action"` on changed rows, `role="figure"` with the cycle and phase in its label);
  nothing imports Streamlit.
* **One script** (`specviz.viz.stage_js`): the component's module is morphdom + core + glue, and the
  standalone page embeds the same core.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

import specviz
from specviz.config import DecodeConfig
from specviz.ui import stage_protocol
from specviz.ui.state import (
    PHASES_PER_CYCLE,
    PREFETCH_DEPTH,
    Run,
    advance_cycle,
    advance_phase,
    compute_cycle,
    prefetch,
    start_live_run,
)
from specviz.viz import stage_data, stage_js

ROOT = Path(__file__).resolve().parent.parent
PROMPT = [3, 9, 4, 12, 7, 1, 30, 22, 5, 8]


@pytest.fixture(scope="module")
def pair():
    return specviz.build_tiny_pair(seed=0)


def live(pair, run_id: int = 1, **cfg) -> Run:
    config = DecodeConfig(**{"k": 4, "temperature": 1.0, "page_size": 4, "max_new_tokens": 64, **cfg})
    return start_live_run(run_id, "test", ("key", run_id), pair, config, PROMPT)


def essence(tr) -> dict:
    """Everything a cycle decided and recorded, without its timings."""
    d = tr.to_dict()
    d.pop("timings_ms", None), d.pop("total_ms", None)
    return d


# ---- prefetch --------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_prefetched_cycles_are_the_cycles_computed_on_demand(pair, layout):
    plain, ahead = live(pair, cache_layout=layout), live(pair, cache_layout=layout)
    for _ in range(PREFETCH_DEPTH):  # each one computed on a fork of the one before's fork
        ahead = prefetch(ahead)
    assert len(ahead.ahead_cycles) == PREFETCH_DEPTH == 3
    for _ in range(4):
        plain = compute_cycle(plain)
        assert ahead.next_cycle is not None and len(ahead.traces) == len(plain.traces) - 1
        fork, then = ahead.ahead[0].decoder, ahead.ahead[1:]
        ahead = compute_cycle(ahead)  # adopts: the fork is now the run's decoder, nothing recomputed
        assert ahead.dec is fork and ahead.ahead == then
        assert essence(ahead.traces[-1]) == essence(plain.traces[-1])
        ahead = prefetch(ahead)  # one more on the last one's fork, the first untouched
        assert ahead.ahead[: len(then)] == then and len(ahead.ahead) == PREFETCH_DEPTH
    assert ahead.dec.committed == plain.dec.committed


def test_prefetch_leaves_the_shown_run_alone_and_never_computes_twice(pair):
    run = live(pair)
    before = run.dec
    run = prefetch(run)
    assert run.dec is before and run.traces == () and run.view == 0  # the run itself did not move
    twice = prefetch(run)
    assert twice.dec is before and twice.ahead[0] is run.ahead[0] and len(twice.ahead) == 2
    full = prefetch(twice)
    assert len(full.ahead) == PREFETCH_DEPTH and prefetch(full) is full  # PREFETCH_DEPTH in hand: nothing more
    shown = advance_phase(full)  # Next phase: the first prefetched cycle is adopted and its draft shown
    first = run.ahead[0]
    assert shown.view == 1 and shown.traces == (first.trace,) and shown.dec is first.decoder
    assert shown.ahead == full.ahead[1:]  # the others stay in hand


def test_a_setting_change_discards_the_prefetched_cycles(pair):
    run = prefetch(prefetch(live(pair)))
    assert run.next_cycle is not None and run.next_cycle.k == 4 and len(run.ahead_cycles) == 2
    run.dec.update_config(run.dec.config.replace(k=2))  # a live setting (the sidebar's sync_config)
    assert run.next_cycle is None and run.ahead_cycles == ()  # computed under K = 4: never shown
    redone = prefetch(run)  # the stale ones are dropped, a fresh one computed under K = 2
    assert len(redone.ahead) == 1 and redone.next_cycle is not None and redone.next_cycle.k == 2
    fresh = live(pair)
    fresh.dec.update_config(fresh.dec.config.replace(k=2))
    assert essence(compute_cycle(run).traces[-1]) == essence(compute_cycle(fresh).traces[-1])


def test_a_setting_changed_while_a_cycle_is_computed_ahead_drops_that_cycle(pair):
    """The page's script run applies a new setting (`sync_config`) while the prefetch thread computes:
    the cycle computed under the old one must not be labelled with the new one and shown as its."""
    import contextlib

    run = live(pair)

    @contextlib.contextmanager
    def slot_meanwhile_k2():  # the decoding slot is entered; the sidebar's K changes meanwhile
        run.dec.update_config(run.dec.config.replace(k=2))
        yield

    ahead = prefetch(run, slot_meanwhile_k2)
    assert ahead.ahead[0].trace.k == 4 and ahead.ahead[0].config.k == 4  # computed, and labelled, under K = 4
    assert ahead.next_cycle is None and ahead.ahead_cycles == ()  # so never shown under K = 2
    assert compute_cycle(ahead).traces[-1].k == 2


def test_prefetch_does_nothing_for_a_what_if_cycle_or_a_finished_text(pair):
    run = live(pair)
    run.dec.update_config(run.dec.config.replace(forced_outcomes=((1, True),)))
    assert prefetch(run).ahead == ()  # forcing applies when the cycle is asked for
    short = live(pair, max_new_tokens=1)
    short = compute_cycle(short)
    assert short.finished and prefetch(short).ahead == ()
    ending = prefetch(live(pair, max_new_tokens=1))  # the text ends within the prefetched cycle
    assert ending.next_cycle.finish_reason and prefetch(ending) is ending  # nothing computed past the end


# ---- the component's messages ------------------------------------------------------------------------


def test_malformed_or_foreign_messages_are_ignored(pair):
    assert stage_protocol.parse(None) is None
    assert stage_protocol.parse({"kind": "explode", "run": 1, "step": 0}) is None
    assert stage_protocol.parse({"kind": "view", "run": "x", "step": 0}) is None
    assert stage_protocol.parse({"kind": "view", "run": 1}) is None
    # A pause is said with `pause: true` and nothing else (a stray value is not a pause).
    assert stage_protocol.parse({"kind": "view", "run": 1, "step": 2, "pause": True})["pause"] is True
    assert "pause" not in stage_protocol.parse({"kind": "view", "run": 1, "step": 2, "pause": "yes"})
    # `sent` (the page's clock, ms since it opened) orders the messages; a message whose numbers are not
    # finite, integral where they count, and in range is no message (the route answers 400).
    assert stage_protocol.parse({"kind": "view", "run": 1, "step": 2, "sent": 1234.5})["sent"] == 1234.5
    for bad in ("inf", "soon", 1e300, -1, float("nan"), True):
        assert stage_protocol.parse({"kind": "view", "run": 1, "step": 2, "sent": bad}) is None, bad
    for bad in (1e999, float("nan"), 2.5, "3", -1, True, 10**12):
        assert stage_protocol.parse({"kind": "view", "run": 1, "step": bad}) is None, bad
        assert stage_protocol.parse({"kind": "next_cycle", "run": 1, "step": 2, "target": bad}) is None, bad
        if bad != 10**12:  # a signature may be that large (a counter of the server process)
            assert stage_protocol.parse({"kind": "view", "run": 1, "step": 2, "have": [1, bad]}) is None, bad
    assert stage_protocol.parse({"kind": "view", "run": 1, "step": 2.0})["step"] == 2  # JSON's 2.0 is 2
    run = prefetch(live(pair))
    other = stage_protocol.parse({"kind": "view", "run": run.id + 1, "step": 3})
    assert stage_protocol.apply(run, other) is run


def test_a_report_moves_the_server_to_the_browsers_step_adopting_the_prefetched_cycle(pair):
    run = prefetch(live(pair))
    event = stage_protocol.parse({"kind": "view", "run": run.id, "step": 3, "seq": 0})
    assert not stage_protocol.moves_server(event)
    moved = stage_protocol.apply(run, event)
    assert moved.view == moved.revealed == 3 and len(moved.traces) == 1 and moved.dec is run.ahead[0].decoder
    # A step past everything known is clamped to what exists.
    far = stage_protocol.apply(run, {"kind": "view", "run": run.id, "step": 40})
    assert far.view == PHASES_PER_CYCLE * len(far.traces)


def test_a_browser_two_cycles_on_moves_the_server_through_both(pair):
    """The browser holds two prefetched cycles and may reach the second before the server heard of the
    first (its report still on the way, or never sent in a burst of clicks): a request from there
    adopts both, then steps; it must not pull the browser back a cycle."""
    run = prefetch(prefetch(live(pair)))
    second = run.ahead[1]
    got = stage_protocol.apply(run, {"kind": "next_phase", "run": run.id, "step": 10, "target": 11, "req": "m:1"})
    assert len(got.traces) >= 3 and got.traces[1] is second.trace and (got.before, got.view) == (10, 11)
    seen = stage_protocol.apply(run, {"kind": "view", "run": run.id, "step": 9})
    assert seen.view == 9 and len(seen.traces) == 2 and seen.dec is second.decoder


def test_a_request_moves_first_then_steps_like_the_buttons(pair):
    run = prefetch(live(pair))
    browser_at = 5  # the browser showed cycle 1 to its rollback without telling the server
    event = stage_protocol.parse({"kind": "next_phase", "run": run.id, "step": browser_at})
    assert stage_protocol.moves_server(event)
    got = stage_protocol.apply(run, event)
    assert (got.before, got.view) == (browser_at, 6) and len(got.traces) == 2
    cycle = stage_protocol.apply(run, {"kind": "next_cycle", "run": run.id, "step": 2})
    button = advance_cycle(dataclasses.replace(advance_phase(advance_phase(run)), before=None))
    assert cycle.view == button.view == 5
    back = stage_protocol.apply(got, {"kind": "back", "run": run.id, "step": 6})
    assert back.view == 5
    seek = stage_protocol.apply(got, {"kind": "seek", "run": run.id, "step": 6, "target": 2})
    assert seek.view == 2


# ---- the payload ------------------------------------------------------------------------------------------


def timeline_of(run: Run) -> stage_data.Timeline:
    return stage_data.Timeline(
        prompt_ids=run.prompt_ids, prefill=run.prefill, traces=(*run.traces, *run.ahead_cycles),
        texts=run.texts, proposer=run.proposer, proposer_label="draft model", real=len(run.traces),
    )


def test_the_window_holds_the_shown_cycle_the_step_before_and_the_next_cycles(pair):
    run = prefetch(prefetch(compute_cycle(compute_cycle(live(pair)))))  # two cycles adopted, two in hand
    tl = timeline_of(run)
    assert tl.last_step == 20
    assert list(stage_data.window(7, tl, 2)) == list(range(5, 21))  # cycle 2, its start, cycles 3 and 4
    assert list(stage_data.window(0, tl, 2)) == list(range(0, 16))  # the start, cycles 1 to 3
    assert list(stage_data.window(2, tl, 2)) == list(range(0, 16))
    assert list(stage_data.window(12, tl, 2)) == list(range(10, 21))  # nothing known past cycle 4
    assert list(stage_data.window(0, tl, 3)) == list(range(0, 21))  # the start, cycles 1 to 4


def test_each_step_carries_its_picture_words_and_hooks(pair):
    run = prefetch(live(pair))
    tl = timeline_of(run)
    steps = stage_data.steps_payload(tl, stage_data.window(0, tl, PREFETCH_DEPTH), lecture=True, max_rows=3)
    assert list(steps) == [str(s) for s in range(6)]
    assert steps["0"]["title"] == "Prefill" and steps["0"]["cycle"] is None  # before adoption: the prefill
    tr = tl.traces[0]
    for step, phase in zip(range(1, 6), ("draft", "verify", "accept", "resolve", "rollback"), strict=True):
        s = steps[str(step)]
        (kv,) = s["kv"]
        assert s["phase"] == phase and s["cycle"] == 0
        assert re.findall(r"<div class='svkv-phase'>(.*?)</div>", kv) == [s["title"].replace("&", "&amp;")]
        label = re.search(r"<div class='svkv svkv-lecture' role='figure' aria-label='([^']*)'", kv).group(1)
        assert f"Cycle 1 · {s['title'].split(' · ', 1)[1]}".replace("&", "&amp;") in label
        verdicts = re.findall(r"data-role='verdict'", kv)
        assert len(verdicts) == (tr.k if phase in ("accept", "resolve", "rollback") else 0)  # no spoiler
        assert "<style>" not in kv  # one stylesheet for every step (the component's)
        assert "committed before this cycle" in s["status"] and s["story"].startswith("<p>")
        assert "<script" not in s["story"]
    # The rows a phase changed are marked: the verify pass appends to the target cache.
    assert "data-role='action'" in steps["2"]["kv"][0]
    # Every cache cell and row has a key that stays with it from step to step.
    keys = [set(re.findall(r"data-key='([^']+)'", steps[str(s)]["kv"][0])) for s in (1, 2)]
    assert {"t-ptr"} <= keys[0] | keys[1] and len(keys[0] & keys[1]) > 10


def test_a_steps_body_travels_once_and_comes_back_whole(pair):
    run = prefetch(compute_cycle(live(pair)))
    tl = timeline_of(run)
    steps = stage_data.steps_payload(tl, stage_data.window(3, tl, PREFETCH_DEPTH), lecture=False, max_rows=None)
    again = stage_data.steps_payload(tl, stage_data.window(3, tl, PREFETCH_DEPTH), lecture=False, max_rows=None)
    assert [d["sig"] for d in steps.values()] == [d["sig"] for d in again.values()]  # the same body, the same sig
    assert len({d["sig"] for d in steps.values()}) == len(steps)
    whole = stage_data.pack(steps)
    assert all(set(h) & set(stage_data.body_keys()) == set() for h in whole["steps"].values())  # heads carry no HTML
    assert stage_data.unpack(whole) == steps
    # The browser holds the first cycle's bodies: only the others travel, and it rebuilds every step.
    held = {str(d["sig"]): {k: d[k] for k in stage_data.body_keys()} for s, d in steps.items() if int(s) <= 5}
    part = stage_data.pack(steps, have={int(sig) for sig in held})
    assert len(part["bodies"]) < len(whole["bodies"]) < len(str(steps)) / 5  # deflated: several times smaller
    assert stage_data.unpack(part, held) == steps
    assert set(stage_data.unpack(part)) == {s for s in steps if int(s) > 5}  # without them, those are missing
    # The shown step's body always comes, held or not: a remounted stage can always draw it.
    shown = stage_data.pack(steps, have={d["sig"] for d in steps.values()}, shown=3)
    assert set(stage_data.unpack(shown)) == {"3"} and stage_data.unpack(shown)["3"] == steps["3"]
    # A new cycle's steps get new signatures; the old steps keep theirs.
    later = timeline_of(prefetch(compute_cycle(run)))
    moved = stage_data.steps_payload(later, range(5, 16), lecture=False, max_rows=None)
    assert moved["5"]["sig"] != steps["5"]["sig"] or moved["5"]["kv"] == steps["5"]["kv"]
    assert {moved[s]["sig"] for s in map(str, range(11, 16))}.isdisjoint(d["sig"] for d in steps.values())


def test_messages_say_which_bodies_the_browser_holds():
    event = stage_protocol.parse({"kind": "view", "run": 2, "step": 4, "have": [3, 7, 9.0]})
    assert event == {"kind": "view", "run": 2, "step": 4, "have": frozenset({3, 7, 9})}
    assert not stage_protocol.moves_server(event)
    assert stage_protocol.parse({"kind": "view", "run": 2, "step": 4, "have": ["x"]}) is None
    assert stage_protocol.parse({"kind": "view", "run": 2, "step": 4, "have": ["7"]}) is None  # numbers are numbers
    # A request carries the id that the payload answering it echoes (sent again until answered).
    asked = stage_protocol.parse({"kind": "next_phase", "run": 2, "step": 4, "target": 5, "req": "k3x:7"})
    assert asked["req"] == "k3x:7" and stage_protocol.moves_server(asked)
    many = stage_protocol.parse({"kind": "view", "run": 2, "step": 4, "have": list(range(10_000))})
    assert len(many["have"]) == stage_protocol.MAX_HAVE


def test_the_stage_modules_import_no_streamlit():
    code = ("import sys, specviz.viz.stage_data, specviz.viz.stage_js, specviz.ui.stage_protocol, specviz.timeline; "
            "print('streamlit' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_one_script_for_the_app_and_the_standalone_page():
    app = stage_js.app_js()
    assert "function morphdom" in app or "var morphdom" in app
    assert "export default morphdom" not in app and app.count("export default") == 1  # the glue's only
    assert stage_js.core_js() in app and "function createStage" in stage_js.core_js()
    assert (ROOT / "specviz/viz/static/morphdom.LICENSE").read_text().startswith("The MIT License")
    # fflate's UMD build runs in a closure that hands back its exports: no global is set.
    assert "const svFflate = (function () { const self = {};" in app and "svFflate.unzlibSync" in app
    assert (ROOT / "specviz/viz/static/fflate.LICENSE").read_text().startswith("MIT License")


def test_the_first_screen_names_both_models_and_what_to_press():
    html = stage_data.intro_html("SmolLM2-135M-Instruct", "feature head")
    assert "SmolLM2-135M-Instruct" in html and "feature head" in html
    assert "<strong>Next phase</strong>" in html and "→" in html and "Scenario gallery" in html
    assert "<script" not in html
