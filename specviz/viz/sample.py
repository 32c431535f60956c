"""Hand-built, self-consistent example traces (no models, no torch).

`demo_traces()` simulates the *bookkeeping* of speculative decoding exactly as DESIGN §1 states
it — target cache `n-1 → n+K → n+j-1`, draft cache catch-up then `→ n+K-1 → n+j-1`, paged blocks
allocated on demand and freed (or kept) on rollback — with made-up probabilities. The figures,
the narrative and the statistics can therefore be developed, demonstrated and tested without
loading a model; the real engine produces the same record types.

`proposer="lookup"` simulates prompt lookup: no proposer cache (the snapshots' `draft` is None)
and one-hot q (q = 1 on each copied token, so min(1, p/q) = p). An accepted count of None makes
that cycle propose nothing (k = 0): the target takes one plain step and the token is "generated".
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..trace import (
    CYCLE_PHASES,
    CacheEvent,
    CacheSnapshot,
    CycleTrace,
    DraftStep,
    EmittedToken,
    PhaseSnapshot,
    TokenProb,
)

WORDS = [
    " the",
    " cat",
    " sat",
    " on",
    " a",
    " mat",
    ".",
    " It",
    " was",
    " warm",
    ",",
    " and",
    " soft",
    " light",
    " fell",
    " across",
    " floor",
    " quiet",
    " room",
    "\n",
]


def _text(token_id: int) -> str:
    return WORDS[token_id % len(WORDS)]


class _SimCache:
    """A toy cache that records exactly what a real one would show in a CacheSnapshot."""

    def __init__(self, layout: str, page_size: int, num_blocks: int, policy: str) -> None:
        self.layout, self.page_size, self.num_blocks, self.policy = layout, page_size, num_blocks, policy
        self.capacity = num_blocks * page_size
        self.seq_len = 0
        self.slot_positions: dict[int, int] = {}
        self.slot_tokens: dict[int, int] = {}
        self.block_table: list[int] = []
        self.free: list[int] = list(range(num_blocks))
        self.events: list[CacheEvent] = []

    def _slot(self, pos: int, phase: str) -> int:
        if self.layout == "contiguous":
            return pos
        logical = pos // self.page_size
        while logical >= len(self.block_table):
            block = self.free.pop(0)
            self.block_table.append(block)
            self.events.append(CacheEvent("alloc", phase, blocks=(block,)))
        return self.block_table[logical] * self.page_size + pos % self.page_size

    def append(self, tokens: Sequence[int], phase: str) -> None:
        start = self.seq_len
        for offset, tok in enumerate(tokens):
            slot = self._slot(start + offset, phase)
            self.slot_positions[slot], self.slot_tokens[slot] = start + offset, tok
        self.seq_len = start + len(tokens)
        self.events.append(CacheEvent("append", phase, start, self.seq_len))
        if self.layout == "contiguous":
            self.events.append(CacheEvent("pointer", phase, start, self.seq_len))

    def truncate(self, new_len: int, phase: str) -> None:
        if new_len >= self.seq_len:
            return
        kind = "pointer" if self.layout == "contiguous" else "truncate"
        self.events.append(CacheEvent(kind, phase, self.seq_len, new_len))
        self.seq_len = new_len
        if self.layout == "paged" and self.policy == "free":
            keep = -(-new_len // self.page_size)
            freed = tuple(self.block_table[keep:])
            if freed:
                del self.block_table[keep:]
                self.free.extend(freed)
                self.events.append(CacheEvent("free", phase, blocks=freed))

    def snapshot(self, num_committed: int) -> CacheSnapshot:
        touched = max(self.slot_positions, default=-1) + 1
        if self.layout == "paged":
            touched = -(-touched // self.page_size) * self.page_size
        positions = tuple(self.slot_positions.get(s, -1) for s in range(touched))
        tokens = tuple(self.slot_tokens.get(s, -1) for s in range(touched))
        return CacheSnapshot(
            layout=self.layout,  # type: ignore[arg-type]
            seq_len=self.seq_len,
            num_committed=min(num_committed, self.seq_len),
            capacity=self.capacity,
            page_size=self.page_size if self.layout == "paged" else 0,
            num_blocks=self.num_blocks if self.layout == "paged" else 0,
            block_table=tuple(self.block_table) if self.layout == "paged" else (),
            free_blocks=tuple(self.free) if self.layout == "paged" else (),
            policy=self.policy if self.layout == "paged" else "",
            slot_positions=positions,
            slot_tokens=tokens,
        )


def _top(rng: random.Random, first: int, first_prob: float, n: int = 5) -> tuple[TokenProb, ...]:
    probs = [first_prob]
    rest = 1.0 - first_prob
    for _ in range(n - 1):
        share = rest * rng.uniform(0.2, 0.6)
        probs.append(share)
        rest -= share
    ids = [first] + [(first + 3 + 7 * i) % 50 for i in range(n - 1)]
    items = [TokenProb(t, p, _text(t)) for t, p in zip(ids, probs, strict=True)]
    return tuple(sorted(items, key=lambda tp: -tp.prob))


def demo_traces(
    accepted_counts: Sequence[int | None] = (3, 5, 0, 2),
    k: int = 5,
    prompt_len: int = 10,
    layout: str = "paged",
    page_size: int = 4,
    policy: str = "free",
    temperature: float = 1.0,
    seed: int = 0,
    proposer: str = "draft",
) -> tuple[list[int], list[CycleTrace]]:
    """(prompt ids, traces) for cycles whose accepted counts are `accepted_counts` (K = all;
    None = no proposal that cycle)."""
    if proposer not in ("draft", "lookup"):  # a feature head's bookkeeping is not simulated here
        raise ValueError(f"demo_traces simulates the 'draft' and 'lookup' proposers, not {proposer!r}")
    rng = random.Random(seed)
    prompt = [rng.randrange(50) for _ in range(prompt_len)]
    committed = list(prompt)
    num_blocks = 64
    lookup = proposer == "lookup"
    target = _SimCache(layout, page_size, num_blocks, policy)
    draft = None if lookup else _SimCache(layout, page_size, num_blocks, policy)
    target.append(committed[:-1], "prefill")
    if draft is not None:
        draft.append(committed[:-1], "prefill")
    traces: list[CycleTrace] = []
    for cycle, count in enumerate(accepted_counts):
        k_here = 0 if count is None else k
        n_acc = count or 0
        target.events = []
        if draft is not None:
            draft.events = []
        n = len(committed)
        snaps: list[PhaseSnapshot] = []

        def snap(phase: str, committed_len: int, out: list[PhaseSnapshot] = snaps) -> None:
            proposer_snap = draft.snapshot(committed_len) if draft is not None else None
            out.append(PhaseSnapshot(phase, target.snapshot(committed_len), proposer_snap))

        snap("start", n)
        catch_up_start = draft.seq_len if draft is not None else n
        catch_up = committed[catch_up_start:] if k_here else []
        proposals = [rng.randrange(50) for _ in range(k_here)]
        if draft is not None and k_here:
            draft.append(catch_up + proposals[:-1], "draft")
        snap("draft", n)
        target.append([committed[-1]] + proposals, "verify")
        snap("verify", n)
        steps: list[DraftStep] = []
        for i, tok in enumerate(proposals, start=1):
            q = 1.0 if lookup else rng.uniform(0.2, 0.9)  # lookup: one-hot q on the copied token
            if i <= n_acc:
                p, verdict = q * rng.uniform(0.7 if not lookup else 0.3, 1.5), "accepted"
            elif i == n_acc + 1:
                p, verdict = q * rng.uniform(0.05, 0.5), "rejected"
            else:
                p, verdict = rng.uniform(0.0, 0.5), "untested"
            p = min(p, 0.99)
            ratio = 0.0 if temperature == 0 and verdict == "rejected" else min(1.0, p / q)
            if temperature == 0:
                ratio = 1.0 if verdict == "accepted" else 0.0 if verdict == "rejected" else ratio
            u = None
            if verdict != "untested" and temperature > 0:
                u = rng.uniform(0, ratio) if verdict == "accepted" else rng.uniform(ratio, 1.0)
            steps.append(
                DraftStep(
                    i,
                    n + i - 1,
                    tok,
                    _text(tok),
                    q,
                    p,
                    ratio,
                    u,
                    verdict,
                    False,  # type: ignore[arg-type]
                    (TokenProb(tok, 1.0, _text(tok)),) if lookup else _top(rng, tok, q),
                    _top(rng, tok, p),
                )
            )
        snap("accept", n)
        emitted = [EmittedToken(t, _text(t), n + i, "accepted") for i, t in enumerate(proposals[:n_acc])]
        residual_top: tuple[TokenProb, ...] = ()
        bonus_top: tuple[TokenProb, ...] = ()
        if n_acc < k_here:
            corrected = (proposals[n_acc] + 11) % 50
            residual_top = _top(rng, corrected, 0.55)
            emitted.append(EmittedToken(corrected, _text(corrected), n + n_acc, "corrected"))
        else:  # all accepted (a bonus from p_{K+1}), or no proposal (a token generated from p_1)
            bonus = rng.randrange(50)
            bonus_top = _top(rng, bonus, 0.4)
            emitted.append(EmittedToken(bonus, _text(bonus), n + k_here, "bonus" if k_here else "generated"))
        snap("resolve", n + n_acc)
        new_committed = committed + [e.token_id for e in emitted]
        target.truncate(n + n_acc, "rollback")
        if draft is not None:
            draft.truncate(min(draft.seq_len, n + n_acc), "rollback")
        # A real cache's rollback overwrites nothing: committed positions keep their K/V, and the
        # corrected/bonus token (the new x_n) gets its K/V when it is fed next cycle.
        snap("rollback", len(new_committed))
        assert [s.phase for s in snaps] == list(CYCLE_PHASES)
        traces.append(
            CycleTrace(
                cycle=cycle,
                context_len=n,
                k=k_here,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                catch_up=tuple(EmittedToken(t, _text(t), catch_up_start + i, "prompt") for i, t in enumerate(catch_up)),
                drafts=tuple(steps),
                num_accepted=n_acc,
                rejected_at=None if n_acc == k_here else n_acc + 1,
                residual_top=residual_top,
                bonus_top=bonus_top,
                emitted=tuple(emitted),
                target_events=tuple(target.events),
                draft_events=tuple(draft.events) if draft is not None else (),
                snapshots=tuple(snaps),
                timings_ms={
                    "draft": 0.0 if lookup else 8.0 * k_here,
                    "verify": 60.0,
                    "accept": 0.3,
                    "resolve": 0.2,
                    "rollback": 0.1,
                },
                proposer=proposer,
                proposer_note=("no earlier occurrence of the last n-gram: no proposal" if not k_here else ""),
            )
        )
        committed = new_committed
    return prompt, traces


def demo_token_text(token_id: int) -> str:
    """The token text used by `demo_traces` (stands in for a tokenizer)."""
    return _text(token_id)
