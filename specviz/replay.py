"""The same run in another KV-cache layout: its cache bookkeeping replayed without a model.

The layout and the rollback policy change only the *bookkeeping* (where each K/V lives, which
blocks are taken, freed, reused or added), never a decision, so a recorded run can be shown in
every layout without running a model again (docs/design.md §4, `replay_run`). The replay invents
nothing: each trace's layout-independent events ("append" for every `reserve()`, "truncate", a
tree's "move"s) are the calls made on each cache, and the replay makes them again, in order, on real
`specviz.kv` caches of the requested layout, sized as the decoder sizes them, through the layers' own
`update()` with dummy K/V. The result is the same `RunRecord` with new events and snapshots;
tests/test_replay_layouts.py checks it against real decoders in each layout. A pool too small runs
out where a real run would (`PoolExhaustedError`, the cycle named).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from .errors import CacheCapacityError, SpecvizError
from .kv import SpecvizCache
from .proposers import registry
from .runfile import RunRecord
from .runtime import sized_cache
from .trace import CYCLE_PHASES, CacheEvent, CacheSnapshot, CycleTrace, PhaseSnapshot, TreeTrace

# Phases of a cycle in which caches change (every phase but "start"), in order.
_WORK_PHASES = CYCLE_PHASES[1:]


class ReplayError(SpecvizError):
    """A recorded run cannot be replayed: its cache log does not fit its own tokens (a damaged file)."""


def replay_run(record: RunRecord, *, cache_layout: str, page_size: int = 16, free_policy: str = "free",
               num_blocks: int | None = None) -> RunRecord:
    """`record` with its cache bookkeeping re-run in another layout / page size / policy / pool cap. Raises
    ConfigError (bad setting), PoolExhaustedError / CacheCapacityError (does not fit), ReplayError (damaged)."""
    config = record.config.replace(cache_layout=cache_layout, page_size=page_size, free_policy=free_policy,
                                   num_blocks=num_blocks)  # validated: ConfigError for a bad value
    if record.proposer not in registry.names():
        raise ReplayError(f"this run's proposer {record.proposer!r} is unknown to this version of specviz")
    offset = registry.get(record.proposer).cache_token_offset or 0  # entry p holds x[p + offset]
    target_snap, draft_snap = record.prefill

    def new_cache(recorded: Sequence[CacheSnapshot | None]) -> SpecvizCache:
        cache = sized_cache(1, config, record.max_context, record.cache_reach)  # as the decoder sizes its own
        per_slot = max((s.bytes_per_slot for s in recorded if s is not None), default=0)
        # Its snapshots count the recorded model's bytes per slot, not the dummy K/V's (0 until written).
        cache.bytes_per_position = lambda: per_slot if cache.layers[0].is_initialized else 0
        return cache

    target = new_cache([target_snap, *_snapshots_of(record.traces, "target")])
    draft = None if draft_snap is None else new_cache([draft_snap, *_snapshots_of(record.traces, "draft")])
    committed = list(record.prompt_ids)
    try:
        prefill = _replay_prefill(committed, target, target_snap, draft, draft_snap, offset)
    except CacheCapacityError as err:
        raise type(err)(f"the prompt's prefill does not fit {_layout_words(config)}: {err}") from None
    traces = []
    for trace in record.traces:
        try:
            traces.append(_replay_cycle(trace, committed, target, draft, offset))
        except CacheCapacityError as err:
            raise type(err)(f"cycle {trace.cycle + 1} does not fit {_layout_words(config)}: {err}") from None
        committed.extend(tok.token_id for tok in trace.emitted)
    return dataclasses.replace(record, config=config, prefill=prefill, traces=tuple(traces),
                               notes=(*record.notes, f"cache bookkeeping replayed into {_layout_words(config)}"))


def _snapshots_of(traces: Sequence[CycleTrace], role: str) -> list[CacheSnapshot | None]:
    return [getattr(snap, role) for t in traces for snap in t.snapshots]


def _layout_words(config) -> str:
    if config.cache_layout == "contiguous":
        return "a contiguous buffer"
    pool = "" if config.num_blocks is None else f", a pool of at most {config.num_blocks} blocks"
    return f"pages of {config.page_size} ({config.free_policy!r} policy{pool})"


def _replay_prefill(prompt: list[int], target: SpecvizCache, target_snap: CacheSnapshot, draft: SpecvizCache | None,
                    draft_snap: CacheSnapshot | None, offset: int) -> tuple[CacheSnapshot, CacheSnapshot | None]:
    """Each cache prefilled with the prompt positions it held after start(), as recorded."""
    _append(target, prompt, 0, target_snap.seq_len, "prefill", 0)
    target.drain_events()  # start() drains them too: a trace's events begin with its cycle
    if draft is None:
        return target.snapshot(target_snap.num_committed), None
    _append(draft, prompt, 0, draft_snap.seq_len, "prefill", offset)
    draft.drain_events()
    return target.snapshot(target_snap.num_committed), draft.snapshot(draft_snap.num_committed)


def _replay_cycle(trace: CycleTrace, committed: list[int], target: SpecvizCache, draft: SpecvizCache | None,
                  offset: int) -> CycleTrace:
    """One cycle's recorded cache calls made again, phase by phase, with a snapshot wherever the run took one."""
    if trace.context_len != len(committed):
        raise ReplayError(f"cycle {trace.cycle + 1} starts from {trace.context_len} tokens, but the cycles before it "
                          f"committed {len(committed)}: the record is damaged")
    if draft is None and (trace.draft_events or any(s.draft is not None for s in trace.snapshots)):
        raise ReplayError(f"cycle {trace.cycle + 1} records a proposer cache, but the run's prefill has none")
    sequence = committed + [step.token_id for step in trace.drafts]  # what each entry holds this cycle
    # A tree cycle's proposer wrote the candidates it fed past the committed prefix, not the nodes.
    draft_sequence = sequence if trace.tree is None else committed + list(trace.tree.proposer_fed)
    target_log = _by_phase(trace, trace.target_events)
    draft_log = _by_phase(trace, trace.draft_events)
    recorded = {snap.phase: snap for snap in trace.snapshots}
    snapshots = []
    tree = trace.tree
    for phase in CYCLE_PHASES:
        if phase != "start":
            _apply(target, target_log[phase], sequence, 0, trace)
            if draft is not None:
                _apply(draft, draft_log[phase], draft_sequence, offset, trace)
        if phase == "verify" and tree is not None:  # where this layout put each node in the verify pass
            tree = _tree_slots(tree, target, trace)
        if phase in recorded:
            snap = recorded[phase]
            proposer = None if draft is None or snap.draft is None else draft.snapshot(snap.draft.num_committed)
            snapshots.append(PhaseSnapshot(phase, target.snapshot(snap.target.num_committed), proposer))
    draft_events = () if draft is None else tuple(draft.drain_events())
    return dataclasses.replace(trace, tree=tree, target_events=tuple(target.drain_events()), draft_events=draft_events,
                               snapshots=tuple(snapshots))


def _tree_slots(tree: TreeTrace, target: SpecvizCache, trace: CycleTrace) -> TreeTrace:
    """The tree's record with each node's physical slot in this layout (entry root + index)."""
    root = tree.root_position
    if root + len(tree.nodes) >= target.get_seq_length():
        raise ReplayError(f"cycle {trace.cycle + 1}: its tree has more nodes than its verify pass wrote: "
                          "the record is damaged")
    slots = target.slots(range(root, root + len(tree.nodes) + 1))
    nodes = tuple(dataclasses.replace(node, slot=slots[node.index]) for node in tree.nodes)
    return dataclasses.replace(tree, root_slot=slots[0], nodes=nodes)


def _by_phase(trace: CycleTrace, events: Sequence[CacheEvent]) -> dict[str, list[CacheEvent]]:
    """The recorded calls (appends, truncates, moves) grouped by the phase that made them, in order."""
    log: dict[str, list[CacheEvent]] = {phase: [] for phase in _WORK_PHASES}
    for event in events:
        if event.kind not in ("append", "truncate", "move"):
            continue  # what the layout made of the calls: the replay's own cache makes it anew
        if event.phase not in log:
            raise ReplayError(f"cycle {trace.cycle + 1} records a cache {event.kind} in phase {event.phase!r}, "
                              "which is not a phase of a cycle: the record is damaged")
        log[event.phase].append(event)
    return log


def _apply(cache: SpecvizCache, events: list[CacheEvent], sequence: list[int], offset: int, trace: CycleTrace) -> None:
    for event in events:
        if event.kind == "move":
            if not 0 <= event.end < event.start < cache.get_seq_length():
                raise ReplayError(f"cycle {trace.cycle + 1}: a recorded move {event.start} -> {event.end} does not "
                                  f"fit the cache's {cache.get_seq_length()} entries: the record is damaged")
            cache.move([(event.start, event.end)], event.phase)
            continue
        if event.start != cache.get_seq_length():
            raise ReplayError(f"cycle {trace.cycle + 1}: a recorded {event.kind} starts at length {event.start}, but "
                              f"the cache holds {cache.get_seq_length()} positions there: the record is damaged")
        if event.kind == "append":
            _append(cache, sequence, event.start, event.end, event.phase, offset)
        else:
            cache.truncate(event.end, event.phase)


def _append(cache: SpecvizCache, sequence: list[int], start: int, end: int, phase: str, offset: int) -> None:
    """reserve() entries start..end-1 and write them through every layer, as a model's forward would."""
    if end <= start:
        return
    tokens = sequence[start + offset : end + offset]
    if len(tokens) != end - start:
        raise ReplayError(f"a recorded append of positions {start}..{end - 1} goes past the run's {len(sequence)} "
                          "tokens: the record is damaged")
    cache.reserve(tokens, phase)
    dummy = torch.zeros(1, 1, len(tokens), 1)  # [B, H, T, D]: the bookkeeping needs no real K/V
    with torch.no_grad():
        for layer in cache.layers:
            layer.update(dummy, dummy)
