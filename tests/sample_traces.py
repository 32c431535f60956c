"""Hand-built example traces for the views' tests: made-up decisions on real caches (no model).

`demo_traces()` makes up what each cycle decides -- the drafts, their q and p, the verdicts, the
corrected or bonus token -- and makes the cache calls a run with those decisions makes, on real
`specviz.kv` caches (DESIGN §1): the target `n-1 → n+K → n+j-1`, the draft cache's catch-up then
`→ n+K-1 → n+j-1`. As in `specviz.replay`, a write is `reserve()` plus a layer `update()` with
dummy K/V, so the snapshots and events are the layout's own (blocks allocated on demand, freed
or kept on rollback, stale slots); only the probabilities are invented.

`proposer="lookup"` stands for prompt lookup: no proposer cache (the snapshots' `draft` is None)
and one-hot q (q = 1 on each copied token, so min(1, p/q) = p). An accepted count of None makes
that cycle propose nothing (k = 0): the target takes one plain step and the token is "generated".
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from specviz.kv import ContiguousKVCache, PagedKVCache, SpecvizCache
from specviz.trace import CYCLE_PHASES, CycleTrace, DraftStep, EmittedToken, PhaseSnapshot, TokenProb

WORDS = (
    " the", " cat", " sat", " on", " a", " mat", ".", " It", " was", " warm", ",", " and", " soft",
    " light", " fell", " across", " floor", " quiet", " room", "\n",
)  # fmt: skip
NUM_BLOCKS = 64  # a pool large enough that the free list is drawn with its head and tail
TIMINGS_MS = {"verify": 60.0, "accept": 0.3, "resolve": 0.2, "rollback": 0.1}  # draft: 8 ms per draft


def demo_token_text(token_id: int) -> str:
    """The token text used by `demo_traces` (stands in for a tokenizer)."""
    return WORDS[token_id % len(WORDS)]


def _cache(layout: str, page_size: int, policy: str) -> SpecvizCache:
    slots = NUM_BLOCKS * page_size
    if layout == "contiguous":
        return ContiguousKVCache(1, max_len=slots, initial_len=slots)
    return PagedKVCache(1, max_len=slots, page_size=page_size, policy=policy, num_blocks=NUM_BLOCKS, initial_len=slots)


def _write(cache: SpecvizCache, tokens: Sequence[int], phase: str) -> None:
    """A forward's writes: reserve the entries, then every layer writes its K/V (dummies here)."""
    if not tokens:
        return
    cache.reserve(tokens, phase)
    kv = torch.zeros(1, 1, len(tokens), 1)  # [B, H, T, D]
    for layer in cache.layers:
        layer.update(kv, kv)


def _top(rng: random.Random, first: int, first_prob: float, n: int = 5) -> tuple[TokenProb, ...]:
    probs = [first_prob]
    rest = 1.0 - first_prob
    for _ in range(n - 1):
        share = rest * rng.uniform(0.2, 0.6)
        probs.append(share)
        rest -= share
    ids = [first] + [(first + 3 + 7 * i) % 50 for i in range(n - 1)]
    items = [TokenProb(t, p, demo_token_text(t)) for t, p in zip(ids, probs, strict=True)]
    return tuple(sorted(items, key=lambda tp: -tp.prob))


def _draft_step(rng: random.Random, i: int, tok: int, n: int, n_acc: int, lookup: bool, temperature: float):
    """Draft d_i with made-up q and p that give the verdict `n_acc` asks for."""
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
    text = demo_token_text(tok)
    draft_top = (TokenProb(tok, 1.0, text),) if lookup else _top(rng, tok, q)
    return DraftStep(i, n + i - 1, tok, text, q, p, ratio, u, verdict, False, draft_top, _top(rng, tok, p))  # type: ignore[arg-type]


def _resolve(rng: random.Random, proposals: list[int], n: int, n_acc: int):
    """(emitted, residual_top, bonus_top): the accepted drafts, then the corrected or bonus token."""
    k = len(proposals)
    emitted = [EmittedToken(t, demo_token_text(t), n + i, "accepted") for i, t in enumerate(proposals[:n_acc])]
    if n_acc < k:
        corrected = (proposals[n_acc] + 11) % 50
        emitted.append(EmittedToken(corrected, demo_token_text(corrected), n + n_acc, "corrected"))
        return emitted, _top(rng, corrected, 0.55), ()
    # all accepted (a bonus from p_{K+1}), or no proposal (a token generated from p_1)
    bonus = rng.randrange(50)
    bonus_top = _top(rng, bonus, 0.4)
    emitted.append(EmittedToken(bonus, demo_token_text(bonus), n + k, "bonus" if k else "generated"))
    return emitted, (), bonus_top


def _cycle(rng, cycle: int, count: int | None, k: int, committed: list[int], target: SpecvizCache,
           draft: SpecvizCache | None, temperature: float, proposer: str) -> CycleTrace:
    """One cycle: its made-up decisions, and the cache calls they imply, phase by phase."""
    k_here, n_acc, n = (0 if count is None else k), (count or 0), len(committed)
    snaps: list[PhaseSnapshot] = []

    def snap(phase: str, committed_len: int) -> None:
        proposer_snap = draft.snapshot(committed_len) if draft is not None else None
        snaps.append(PhaseSnapshot(phase, target.snapshot(committed_len), proposer_snap))

    snap("start", n)
    catch_up_start = draft.seq_len if draft is not None else n
    catch_up = committed[catch_up_start:] if k_here else []
    proposals = [rng.randrange(50) for _ in range(k_here)]
    if draft is not None and k_here:
        _write(draft, catch_up + proposals[:-1], "draft")  # d_K is sampled, never fed
    snap("draft", n)
    _write(target, [committed[-1]] + proposals, "verify")
    snap("verify", n)
    steps = [_draft_step(rng, i, tok, n, n_acc, draft is None, temperature) for i, tok in enumerate(proposals, 1)]
    snap("accept", n)
    emitted, residual_top, bonus_top = _resolve(rng, proposals, n, n_acc)
    snap("resolve", n + n_acc)
    target.truncate(n + n_acc, "rollback")
    if draft is not None:
        draft.truncate(min(draft.seq_len, n + n_acc), "rollback")
    snap("rollback", n + len(emitted))  # the new x_n gets its K/V when it is fed next cycle
    assert [s.phase for s in snaps] == list(CYCLE_PHASES)
    return CycleTrace(
        cycle=cycle, context_len=n, k=k_here, temperature=temperature, top_k=0, top_p=1.0,
        catch_up=tuple(EmittedToken(t, demo_token_text(t), catch_up_start + i, "prompt")
                       for i, t in enumerate(catch_up)),
        drafts=tuple(steps), num_accepted=n_acc, rejected_at=None if n_acc == k_here else n_acc + 1,
        residual_top=residual_top, bonus_top=bonus_top, emitted=tuple(emitted),
        target_events=tuple(target.drain_events()),
        draft_events=tuple(draft.drain_events()) if draft is not None else (),
        snapshots=tuple(snaps),
        timings_ms={"draft": 0.0 if draft is None else 8.0 * k_here, **TIMINGS_MS},
        proposer=proposer,
        proposer_note="no earlier occurrence of the last n-gram: no proposal" if not k_here else "",
    )  # fmt: skip


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
    if proposer not in ("draft", "lookup"):  # a feature head's cache entries are not made up here
        raise ValueError(f"demo_traces makes up 'draft' and 'lookup' cycles, not {proposer!r}")
    if any(count is not None and not 0 <= count <= k for count in accepted_counts):
        raise ValueError(f"accepted counts must be 0..K = {k} (or None), got {list(accepted_counts)}")
    rng = random.Random(seed)
    committed = [rng.randrange(50) for _ in range(prompt_len)]
    prompt = list(committed)
    target = _cache(layout, page_size, policy)
    draft = None if proposer == "lookup" else _cache(layout, page_size, policy)
    for cache in (target, draft):
        if cache is not None:
            _write(cache, committed[:-1], "prefill")
            cache.drain_events()  # a trace's events begin with its cycle
    traces = []
    for cycle, count in enumerate(accepted_counts):
        trace = _cycle(rng, cycle, count, k, committed, target, draft, temperature, proposer)
        traces.append(trace)
        committed = committed + [e.token_id for e in trace.emitted]
    return prompt, traces
