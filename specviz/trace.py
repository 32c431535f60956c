"""Typed, JSON-serialisable records of one speculative-decoding cycle (docs/design.md §5).

A `CycleTrace` is everything one draft → verify → accept → resolve → rollback cycle did, as frozen
dataclasses of ints, floats and strings: no tensors, so the views, the CLI and the JSON export never
touch torch. Cache bookkeeping is recorded as `CacheEvent`s (what happened) and `CacheSnapshot`s
(the layout after each phase), for the target's cache and the proposer's alike. Positions are
0-based: `x_i` sits at position `i - 1`. Terminology (as in vLLM's rejection sampler):

  * accepted  — a draft token that passed the test `u <= min(1, p/q)`;
  * corrected — the token sampled from the residual `norm(max(0, p - q))` at the first
                rejection (vLLM calls it "recovered");
  * bonus     — the extra token sampled from the target's `p_{K+1}` when all K drafts pass.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

# The phases of one cycle, in order ("start": the state it begins from); every phase name anywhere
# (views, narrative, app) is one of these or "prefill"/"decode".
CyclePhase = Literal["start", "draft", "verify", "accept", "resolve", "rollback"]
Phase = Literal[CyclePhase, "prefill", "decode"]
CYCLE_PHASES: tuple[str, ...] = get_args(CyclePhase)

EventKind = Literal["append", "truncate", "alloc", "free", "pointer", "reuse", "grow", "move"]
TokenKind = Literal["prompt", "accepted", "corrected", "bonus", "generated"]
Verdict = Literal["accepted", "rejected", "untested"]
SlotState = Literal["committed", "provisional", "stale", "free"]


@dataclass(frozen=True)
class CacheEvent:
    """One change to a KV cache: its `kind` says what `start`, `end` and `blocks` mean (docs/design.md §5);
    `describe()` says it in words."""

    kind: EventKind
    phase: str
    start: int = -1
    end: int = -1
    blocks: tuple[int, ...] = ()

    def describe(self) -> str:
        """A one-line, human-readable account of the event."""
        ids = ", ".join(str(b) for b in self.blocks)
        if self.kind == "grow" and self.blocks:  # the paged pool; without blocks, the contiguous buffer
            added = ids if len(self.blocks) <= 4 else f"{self.blocks[0]}..{self.blocks[-1]}"
            return (f"grow the block pool from {self.start} to {self.end} blocks "
                    f"(new block(s) [{added}] join the free list; old blocks copied)")
        where = f" (block {self.blocks[0]} -> block {self.blocks[1]})" if len(self.blocks) == 2 else ""
        return {
            "append": f"append K/V for positions {self.start}..{self.end - 1} (provisional)",
            "truncate": f"truncate length {self.start} -> {self.end} (drop positions {self.end}..{self.start - 1})",
            "pointer": f"write pointer {self.start} -> {self.end}",
            "alloc": f"allocate block(s) [{ids}] from the free pool",
            "free": f"free block(s) [{ids}] back to the pool",
            "grow": f"grow the buffer from {self.start} to {self.end} rows (old rows copied)",
            "move": f"move K/V of entry {self.start} to entry {self.end}{where}",
        }.get(self.kind, f"reuse reserved block(s) [{ids}]")


@dataclass(frozen=True)
class CacheSnapshot:
    """The layout of one model's KV cache at one moment (cheap: no tensors).

    Slots are physical: buffer row s, or offset `s % page_size` of block `s // page_size`.
    `slot_positions[s]` / `slot_tokens[s]` are what was last written there (-1: never); only the
    slots ever touched are listed (whole blocks), the rest are free.
    """

    layout: Literal["contiguous", "paged"]
    seq_len: int  # valid positions 0 .. seq_len-1
    num_committed: int  # positions < num_committed are committed; the rest up to seq_len provisional
    capacity: int  # slots in the buffer / the whole pool
    page_size: int  # paged: tokens per block; contiguous: 0
    num_blocks: int  # paged: blocks in the pool; contiguous: 0
    block_table: tuple[int, ...] = ()  # paged: logical block -> physical block id
    free_blocks: tuple[int, ...] = ()  # paged: the free list, in the order they will be handed out
    policy: str = ""  # paged rollback policy: "free" or "keep"
    slot_positions: tuple[int, ...] = ()
    slot_tokens: tuple[int, ...] = ()
    # Memory: `capacity` slots are allocated now; storage grows on demand up to `max_capacity`
    # slots (the context, or the pool's cap). 0 = not recorded (traces from before growth).
    max_capacity: int = 0
    bytes_per_slot: int = 0  # keys + values of one slot over all layers (0: not recorded / not written yet)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    @property
    def allocated_bytes(self) -> int:
        """Bytes of K/V storage that exist (the buffer / the whole pool, as grown so far)."""
        return self.capacity * self.bytes_per_slot

    @property
    def held_bytes(self) -> int:
        """Bytes the sequence owns: the whole buffer, or its block-table blocks (valid + stale)."""
        slots = len(self.block_table) * self.page_size if self.layout == "paged" else self.capacity
        return slots * self.bytes_per_slot

    @property
    def valid_bytes(self) -> int:
        """Bytes of positions 0..seq_len-1, the only ones ever read."""
        return self.seq_len * self.bytes_per_slot

    @functools.cached_property
    def logical_blocks(self) -> dict[int, int]:
        """Physical block id -> its (first) logical index in the block table: one lookup per slot, not
        a search of the table (a view classifies every slot it draws)."""
        return {block: i for i, block in reversed(list(enumerate(self.block_table)))}

    def slot_state(self, slot: int) -> SlotState:
        """committed / provisional / stale (written, but past the valid length) / free."""
        pos = self.slot_positions[slot] if slot < len(self.slot_positions) else -1
        here = slot  # the position this slot stands for now (paged: through the block table; -1: a free block)
        if self.layout == "paged":
            block, offset = divmod(slot, self.page_size)
            logical = self.logical_blocks.get(block)
            here = -1 if logical is None else logical * self.page_size + offset
        if pos < 0 or pos != here:  # never written (since its block was (re)assigned)
            return "free"
        if pos < self.num_committed:
            return "committed"
        return "provisional" if pos < self.seq_len else "stale"


@dataclass(frozen=True)
class TokenProb:
    """A token with its probability under some distribution (for top-N lists)."""

    token_id: int
    prob: float
    text: str = ""


@dataclass(frozen=True)
class DraftStep:
    """Draft position i (1-based) of a cycle: the proposal and its acceptance test."""

    index: int  # i, 1..K
    position: int  # sequence position of d_i
    token_id: int
    text: str
    draft_prob: float  # q_i(d_i)
    target_prob: float  # p_i(d_i)
    ratio: float  # min(1, p/q); at temperature 0: 1.0 if d_i == argmax p_i else 0.0
    u: float | None  # the uniform draw; None when untested or greedy
    verdict: Verdict
    forced: bool  # True when what-if mode forced the outcome (breaks exactness)
    draft_top: tuple[TokenProb, ...]
    target_top: tuple[TokenProb, ...]
    # sum_x min(p_i(x), q_i(x)): the probability that a draft sampled from q_i passes (alpha_i)
    overlap: float | None = None
    # a merged proposer's: which of its sources proposed d_i ("feature head", "retrieval", "both" =
    # feature head and retrieval, "prompt lookup", "feature head + prompt lookup")
    source: str = ""


@dataclass(frozen=True)
class ContextMatch:
    """The context's suffix a retrieval proposer keyed its drafts on, and where it occurred before."""

    first: int  # position of the suffix's first token: it spans positions first..first+len(tokens)-1
    tokens: tuple[int, ...]  # the matched suffix of the committed sequence
    source: str  # "datastore" or "session" (this session's earlier texts)
    where: int  # the first occurrence's start in that store
    occurrences: int  # how often the suffix occurs there
    # The source text around that first occurrence (up to suffix_store.AROUND tokens each side): what
    # came before the matched suffix there, and what followed it (what the drafts copy). Empty in
    # runs recorded before it was kept.
    before: tuple[int, ...] = ()
    after: tuple[int, ...] = ()


@dataclass(frozen=True)
class EmittedToken:
    token_id: int
    text: str
    position: int
    kind: TokenKind


@dataclass(frozen=True)
class TreeNode:
    """One draft node of a token tree (docs/design.md §1c). The root (node 0) is the newest
    committed token and is not listed."""

    index: int  # 1..N, depth-first order: also its verify slot offset (cache entry L + index)
    parent: int  # 0 = the root
    depth: int  # 1..D
    token_id: int
    text: str
    position: int  # sequence (RoPE) position in the verify pass: root's + depth; siblings share it
    slot: int  # physical slot its K/V were written to in the verify pass (paged: through the block table)
    draft_prob: float  # the proposer's probability of the token given the parent (it ranked the node)
    target_prob: float  # p(token) under the parent's target distribution
    accept_prob: float | None  # T > 0: the p'(x) it was accepted with (None: untested or greedy)
    u: float | None  # T > 0: its uniform draw (None: untested or greedy)
    verdict: Verdict


@dataclass(frozen=True)
class TreeTrace:
    """What a token-tree cycle drafted, verified and moved (docs/design.md §1c, §5)."""

    width: int  # children kept per expanded node
    depth: int  # the depth the proposer was asked for (the tree may be shallower)
    budget: int  # the node budget it was asked for (clipped near the end of the context)
    root_position: int  # the root's position (n-1) = its cache entry L
    root_slot: int  # the root's physical slot in the verify pass
    nodes: tuple[TreeNode, ...]
    path: tuple[int, ...]  # accepted node indices, the root's child first
    # The compaction: (from entry, to entry) copies done after acceptance, in order; empty when the
    # committed path was already in place (`in_place`: nothing copied).
    moves: tuple[tuple[int, int], ...] = ()
    in_place: bool = True
    proposer_fed: tuple[int, ...] = ()  # tokens the proposer fed past its prefix while growing the tree


@dataclass(frozen=True)
class AutoChoice:
    """What k="auto" chose before a cycle by the machine's cost law (specviz.costlaw), and why."""

    k: int  # drafts asked for (a tree: its node budget); 0 = a plain target step
    expected_tokens: float  # E(k): tokens the cycle should commit
    cycle_cost: float  # T(k): what it costs, in plain target steps
    expected_speedup: float  # E(k) / T(k)
    reason: str  # the choice in one sentence


@dataclass(frozen=True)
class PhaseSnapshot:
    phase: str
    target: CacheSnapshot
    draft: CacheSnapshot | None  # the proposer's cache; None when it has none (prompt lookup)


@dataclass(frozen=True)
class CycleTrace:
    """Everything one cycle did. See docs/design.md §5."""

    cycle: int  # 0-based cycle index
    context_len: int  # n: committed length when the cycle started
    k: int  # drafts actually proposed this cycle (clamped near the end; 0 = a plain target step)
    temperature: float
    top_k: int
    top_p: float
    catch_up: tuple[EmittedToken, ...]  # committed tokens the proposer was fed before proposing (kind = origin)
    drafts: tuple[DraftStep, ...]
    num_accepted: int
    rejected_at: int | None  # 1-based draft index of the first rejection, None if all accepted
    residual_top: tuple[TokenProb, ...]  # top of norm(max(0, p_j - q_j)) at the rejection
    bonus_top: tuple[TokenProb, ...]  # top of p_{K+1} when all were accepted
    emitted: tuple[EmittedToken, ...]  # what this cycle committed, in order
    target_events: tuple[CacheEvent, ...]
    draft_events: tuple[CacheEvent, ...]
    snapshots: tuple[PhaseSnapshot, ...]  # one per phase in CYCLE_PHASES
    timings_ms: dict[str, float] = field(default_factory=dict)  # per phase (plus "invariant_check")
    total_ms: float | None = None  # the cycle's own wall time, draft to rollback (None: an older run file)
    invariant_max_abs_diff: dict[str, float] | None = None  # {"target": .., "draft": ..}
    finish_reason: str | None = None  # "eos", "max_new_tokens" or "context_full" if the cycle ended it
    forced: bool = False  # some outcome was forced by what-if mode
    proposer: str = "draft"  # who proposed: "draft", "feature" or "lookup" (specviz.proposers)
    proposer_note: str = ""  # what the proposer did this cycle, in words
    matched: ContextMatch | None = None  # retrieval: the context suffix its drafts followed
    # A token-tree cycle (tree_width > 1): the tree, its verdicts and the compaction. Then `drafts`
    # lists the tree's nodes in node order, `k` their number, `num_accepted` the accepted path's
    # length and `rejected_at` the depth where no child passed (None: a leaf was reached).
    tree: TreeTrace | None = None
    # The precision the pair ran in (specviz.precision): it sets the invariant check's tolerance.
    dtype: str = "float32"
    auto: AutoChoice | None = None  # k="auto": what the cost law chose for this cycle and why (None: a fixed K)

    @property
    def corrected_token(self) -> EmittedToken | None:
        return next((t for t in self.emitted if t.kind == "corrected"), None)

    @property
    def bonus_token(self) -> EmittedToken | None:
        return next((t for t in self.emitted if t.kind == "bonus"), None)

    def snapshot(self, phase: str) -> PhaseSnapshot:
        return next(s for s in self.snapshots if s.phase == phase)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CycleTrace:
        """The trace from `to_dict()`'s form, as this process made it: unchecked. Data from outside
        (a file) goes through `runfile.load_run` / `runfile.traces_from_json`, which validate it."""
        return record_from_dict(cls, data)


# ---- from_dict: rebuild nested frozen dataclasses from plain dicts/lists ----


@functools.cache
def _nested(cls: type) -> dict[str, type]:
    """The fields of record `cls` that hold another record (or a tuple of them), read from its type hints."""
    return {name: inner for name, hint in typing.get_type_hints(cls).items() for inner in (hint, *get_args(hint))
            if dataclasses.is_dataclass(inner)}


def record_from_dict(cls: type, data: dict[str, Any]) -> Any:
    """A trace record of class `cls` from its `dataclasses.asdict` form (keys it does not know are ignored).
    It checks nothing: give it this process's own dicts or data `run_schema` has validated."""
    nested = _nested(cls)
    return cls(**{f.name: _value(nested.get(f.name), data[f.name]) for f in dataclasses.fields(cls) if f.name in data})


def _value(record: type | None, value: Any) -> Any:
    """A field's JSON value as it was: a record or a tuple of records; other lists back to tuples (nested too)."""
    if record is None or value is None:
        return tuple(_value(None, v) for v in value) if isinstance(value, list) else value
    if isinstance(value, dict):
        return record_from_dict(record, value)
    return tuple(record_from_dict(record, v) for v in value)


def traces_to_json(traces: list[CycleTrace]) -> str:
    return json.dumps([t.to_dict() for t in traces])

