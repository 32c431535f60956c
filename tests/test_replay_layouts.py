"""A recorded run replayed into another KV-cache layout equals a real run in that layout
(specviz/replay.py).

The decisions of speculative decoding (drafts, verdicts, emitted tokens) do not depend on the
cache layout, only the bookkeeping does. So: run a real decoder (the tiny random pair) in layout
A, record it, replay the record into layout B *without a model*, run a real decoder in B with the
same seed, and require the replayed prefill snapshots, events and snapshots of both caches to be
**equal** to the real ones -- for every proposer, at T=1 and T=0 (rejections happen), for A and B
over contiguous and paged pages of 1/4/16 under both policies, with a live raise of K and
max_new_tokens so that the caches grow, a one-token prompt, and explicit (small) pool caps,
where running out must give the real run's error at the real run's cycle. Token-tree runs replay
too, their compaction's "move" events included.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

import specviz
from specviz import DecodeConfig, SpeculativeDecoder
from specviz.errors import ConfigError, PoolExhaustedError
from specviz.proposers import registry
from specviz.replay import ReplayError, replay_run
from specviz.runfile import RunRecord, load_run, record_run

PROPOSERS = registry.names()  # every proposer in the table
TEMPERATURES = (1.0, 0.0)
LAYOUTS = [("contiguous", 16, "free")] + [("paged", page, policy) for page in (1, 4, 16) for policy in ("free", "keep")]
PROMPT_TEXT = "the cat sat on the mat. the cat"
CYCLES = 10


@functools.cache
def tiny_pair():
    return specviz.build_tiny_pair(seed=0)


@functools.cache
def real_run(
    proposer: str, temperature: float, layout: tuple[str, int, str], num_blocks: int | None = None,
    prompt: str = PROMPT_TEXT, tree_width: int = 1,
) -> tuple[RunRecord, PoolExhaustedError | None]:
    """A real run in `layout`: K=2 and max_new_tokens=4 at start, raised live to K=5 and 40 after the
    first cycle (so the caches outgrow what start() sized them for). Stops at a PoolExhaustedError,
    which it returns with the cycles recorded before it."""
    pair = tiny_pair()
    cache_layout, page_size, policy = layout
    config = DecodeConfig(k=2, proposer=proposer, temperature=temperature, max_new_tokens=4, seed=0,
                          cache_layout=cache_layout, page_size=page_size, free_policy=policy, num_blocks=num_blocks,
                          tree_width=tree_width, tree_nodes=8)
    dec = SpeculativeDecoder(pair, config)
    ids = pair.tokenizer.encode(prompt)
    dec.start(ids)
    prefill = (dec.target_cache.snapshot(len(ids)), dec.proposer.snapshot(len(ids)))
    traces, error = [], None
    for cycle in range(CYCLES):
        if cycle == 1:
            dec.update_config(dec.config.replace(k=5, max_new_tokens=40))
        if dec.finished:
            break
        try:
            traces.append(dec.step())
        except PoolExhaustedError as err:
            error = err
            break
    record = record_run(f"{proposer} T={temperature}", "tiny-target + tiny-draft", proposer, config, prompt, False,
                        ids, prefill, traces, dec.token_text, max_context=dec.max_context)
    return record, error


def replay(record: RunRecord, layout: tuple[str, int, str], num_blocks: int | None = None) -> RunRecord:
    cache_layout, page_size, policy = layout
    return replay_run(record, cache_layout=cache_layout, page_size=page_size, free_policy=policy, num_blocks=num_blocks)


def assert_same_bookkeeping(replayed: RunRecord, real: RunRecord) -> None:
    assert replayed.prefill == real.prefill
    assert len(replayed.traces) == len(real.traces)
    for mine, theirs in zip(replayed.traces, real.traces):
        assert mine.target_events == theirs.target_events, f"cycle {mine.cycle}"
        assert mine.draft_events == theirs.draft_events, f"cycle {mine.cycle}"
        assert mine.snapshots == theirs.snapshots, f"cycle {mine.cycle}"
    # and everything else -- the decisions -- is the run's own, untouched
    strip = dict(target_events=(), draft_events=(), snapshots=(), timings_ms={}, total_ms=None)
    assert [dataclasses.replace(t, **strip) for t in replayed.traces] == [
        dataclasses.replace(t, **strip) for t in real.traces
    ]


@pytest.mark.parametrize("layout_a", LAYOUTS, ids=lambda lay: "-".join(map(str, lay)))
@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("proposer", PROPOSERS)
def test_replay_into_every_layout_equals_a_real_run_there(proposer, temperature, layout_a):
    record, error = real_run(proposer, temperature, layout_a)
    assert error is None and len(record.traces) == CYCLES
    for layout_b in LAYOUTS:
        real_b, _ = real_run(proposer, temperature, layout_b)
        assert_same_bookkeeping(replay(record, layout_b), real_b)


def test_the_runs_cover_what_the_bookkeeping_must_get_right():
    """Rejections, full acceptances, plain target steps, growth, freed and reused blocks all occur."""
    runs = {(p, t, lay): real_run(p, t, lay)[0] for p in PROPOSERS for t in TEMPERATURES for lay in LAYOUTS}
    for proposer in PROPOSERS:
        for temperature in TEMPERATURES:
            traces = runs[proposer, temperature, LAYOUTS[0]].traces
            assert any(t.rejected_at is not None for t in traces), (proposer, temperature)
    assert any(t.k and t.rejected_at is None for t in runs["draft", 0.0, LAYOUTS[0]].traces)
    assert any(t.k == 0 for t in runs["lookup", 1.0, LAYOUTS[0]].traces)
    kinds = {e.kind for r in runs.values() for t in r.traces for e in (*t.target_events, *t.draft_events)}
    assert kinds == {"append", "truncate", "pointer", "alloc", "free", "reuse", "grow"}
    for proposer in ("draft", "feature"):  # both caches outgrow their start size, in both layouts
        for layout in (LAYOUTS[0], ("paged", 4, "keep")):
            traces = runs[proposer, 1.0, layout].traces
            assert any(e.kind == "grow" for t in traces for e in t.target_events), (proposer, layout)
    assert all(r.prefill[0].bytes_per_slot > 0 for r in runs.values())


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_one_token_prompt(proposer):
    """No prefill at all (and no bytes per slot until the first write); a feature head's first cycle
    is a plain target step."""
    layouts = [LAYOUTS[0], ("paged", 1, "keep"), ("paged", 4, "free")]
    runs = {lay: real_run(proposer, 1.0, lay, prompt="t")[0] for lay in layouts}
    assert runs[layouts[0]].prefill[0].seq_len == 0 and runs[layouts[0]].prefill[0].bytes_per_slot == 0
    for layout_a in layouts:
        for layout_b in layouts:
            assert_same_bookkeeping(replay(runs[layout_a], layout_b), runs[layout_b])


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_a_small_pool_runs_out_where_the_real_run_does(proposer):
    """Pages of 4 with a cap of 10 blocks (9 for prompt lookup, which commits one token a cycle): the
    real run's pool is exhausted at some cycle; the replay of an unconstrained run raises the same
    error there, and the cycles before it are equal."""
    small, cap = ("paged", 4, "free"), 9 if proposer == "lookup" else 10
    real_b, real_error = real_run(proposer, 1.0, small, num_blocks=cap)
    assert real_error is not None and 0 < len(real_b.traces) < CYCLES
    failing = len(real_b.traces)
    for layout_a in (LAYOUTS[0], ("paged", 16, "keep")):
        record, _ = real_run(proposer, 1.0, layout_a)
        with pytest.raises(PoolExhaustedError) as caught:
            replay(record, small, num_blocks=cap)
        assert str(real_error) in str(caught.value)
        assert f"cycle {failing + 1} " in str(caught.value)
        before = dataclasses.replace(record, traces=record.traces[:failing])
        assert_same_bookkeeping(replay(before, small, num_blocks=cap), real_b)


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_an_explicit_pool_cap_that_suffices(proposer):
    """A cap the run stays under: growth stops at it (the snapshots' max_capacity says so), same outcome."""
    for layout_b in (("paged", 4, "keep"), ("paged", 4, "free"), ("paged", 1, "free")):
        cap = 24 if layout_b[1] == 4 else 90
        real_b, error = real_run(proposer, 0.0, layout_b, num_blocks=cap)
        assert error is None
        assert real_b.traces[-1].snapshots[-1].target.max_capacity == cap * layout_b[1]
        for layout_a in (LAYOUTS[0], ("paged", 16, "free")):
            record, _ = real_run(proposer, 0.0, layout_a)
            assert_same_bookkeeping(replay(record, layout_b, num_blocks=cap), real_b)
        # and the capped run replays into an uncapped layout like a real uncapped run
        assert_same_bookkeeping(replay(real_b, LAYOUTS[0]), real_run(proposer, 0.0, LAYOUTS[0])[0])


def test_token_tree_runs_replay_with_their_moves():
    """Tree runs (width 3, 8 nodes, K raised live to 5): each proposer's run replays into every other
    layout as a real tree run there, the compaction's moves re-issued; some cycles really move K/V."""
    layouts = [LAYOUTS[0], ("paged", 1, "free"), ("paged", 4, "keep"), ("paged", 16, "free")]
    moves = 0
    for proposer in PROPOSERS:
        runs = {lay: real_run(proposer, 1.0, lay, tree_width=3)[0] for lay in layouts}
        assert all(t.tree is not None for t in runs[layouts[0]].traces)
        moves += sum(e.kind == "move" for t in runs[layouts[0]].traces for e in t.target_events)
        for layout_a in layouts:
            for layout_b in layouts:
                assert_same_bookkeeping(replay(runs[layout_a], layout_b), runs[layout_b])
        assert load_run(runs[layouts[1]].to_json()) == runs[layouts[1]]  # trees round-trip through a run file
    assert moves > 0


def test_the_bytes_per_slot_are_the_recorded_models():
    record, _ = real_run("feature", 1.0, LAYOUTS[0])
    replayed = replay(record, ("paged", 4, "keep"))
    target_bytes = {t.snapshots[-1].target.bytes_per_slot for t in replayed.traces}
    draft_bytes = {t.snapshots[-1].draft.bytes_per_slot for t in replayed.traces}
    assert target_bytes == {record.prefill[0].bytes_per_slot} and target_bytes != {0}
    assert draft_bytes == {record.prefill[1].bytes_per_slot} and draft_bytes != {0}
    assert target_bytes != draft_bytes  # 2 target layers vs the head's 1: each cache keeps its own figure


def test_replay_from_a_file_builds_no_model(monkeypatch):
    """A run file alone is enough: no model can be built while it is loaded and replayed."""
    text = real_run("draft", 1.0, ("paged", 16, "free"))[0].to_json()

    def no_model(*args, **kwargs):
        raise AssertionError("a replay must not build a model")

    monkeypatch.setattr(torch.nn.Module, "__init__", no_model)
    replayed = replay(load_run(text), ("paged", 1, "keep"))
    monkeypatch.undo()
    assert_same_bookkeeping(replayed, real_run("draft", 1.0, ("paged", 1, "keep"))[0])
    assert replayed.config.cache_layout == "paged" and replayed.config.page_size == 1
    assert replayed.config.free_policy == "keep"
    assert load_run(replayed.to_json()) == replayed  # a replayed run is a run file like any other


def test_cache_token_offsets():
    """Which token a proposer's cache entry p holds: x[p] for a draft model, x[p+1] for a feature head
    (pinned here; the replay's equality above depends on it)."""
    assert {e.name: e.cache_token_offset for e in registry.entries()} == {
        "draft": 0, "feature": 1, "lookup": None, "retrieval": None, "feature+retrieval": 1,
        "feature+lookup": 1}


def test_bad_settings_and_damaged_records():
    record, _ = real_run("draft", 1.0, LAYOUTS[0])
    with pytest.raises(ConfigError):
        replay(record, ("blocks", 4, "free"))
    with pytest.raises(ConfigError):
        replay(record, ("paged", 0, "free"))
    with pytest.raises(ConfigError):
        replay(record, ("paged", 4, "hoard"))
    skipped = dataclasses.replace(record, traces=record.traces[1:])  # the first cycle's tokens are missing
    with pytest.raises(ReplayError, match="damaged"):
        replay(skipped, ("paged", 4, "free"))
    first = record.traces[0]
    wrong_event = dataclasses.replace(first, target_events=(
        specviz.CacheEvent("append", "verify", 5, 9), *first.target_events))
    with pytest.raises(ReplayError, match="damaged"):
        replay(dataclasses.replace(record, traces=(wrong_event, *record.traces[1:])), ("paged", 4, "free"))
    with pytest.raises(ReplayError, match="unknown"):
        replay(dataclasses.replace(record, proposer="oracle"), ("paged", 4, "free"))


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_a_run_recorded_without_instrumentation(proposer):
    """instrument=False records events but no snapshots: the replay gives the real events, and no snapshots."""
    pair = tiny_pair()
    ids = pair.tokenizer.encode(PROMPT_TEXT)
    runs = {}
    for layout in (LAYOUTS[0], ("paged", 4, "keep")):
        config = DecodeConfig(k=4, proposer=proposer, temperature=1.0, instrument=False, cache_layout=layout[0],
                              page_size=layout[1], free_policy=layout[2])
        dec = SpeculativeDecoder(pair, config)
        dec.start(ids)
        prefill = (dec.target_cache.snapshot(len(ids)), dec.proposer.snapshot(len(ids)))
        traces = [dec.step() for _ in range(6)]
        assert all(not t.snapshots for t in traces)
        runs[layout] = record_run("lean", "tiny", proposer, config, PROMPT_TEXT, False, ids, prefill, traces,
                                  dec.token_text, max_context=dec.max_context)
    assert_same_bookkeeping(replay(runs[LAYOUTS[0]], ("paged", 4, "keep")), runs["paged", 4, "keep"])
    assert_same_bookkeeping(replay(runs["paged", 4, "keep"], LAYOUTS[0]), runs[LAYOUTS[0]])
