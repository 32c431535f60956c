"""Acceptance statistics from recorded traces, and the theory they should match (docs/design.md §1,
"Expected gain" and "What the statistics count").

`acceptance_stats` measures α, tokens per cycle, accepted lengths and acceptance by position;
`cost_ratio` estimates c, and `pass_costs` measures each piece of a cycle in plain autoregressive
steps of the same target (verify: v(K)), so `measured_speedup` decomposes the textbook's
E / (K·c + 1) one measured factor at a time, down to the run's own wall time. Forced cycles are
left out; plain steps (k = 0) and token-tree cycles are counted on their own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .trace import CycleTrace


def expected_tokens_per_cycle(alpha: float, k: int) -> float:
    """(1 − α^(K+1)) / (1 − α); equals K+1 at α = 1 and 1 at α = 0."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """(1 − α^(K+1)) / ((1 − α)(K·c + 1)): expected tokens per cycle over the cycle's cost."""
    return expected_tokens_per_cycle(alpha, k) / (k * c + 1.0)


@dataclass(frozen=True)
class AcceptanceStats:
    cycles: int
    tokens: int  # committed by those cycles
    tested: int  # drafts whose acceptance test ran
    accepted: int
    accepted_hist: tuple[int, ...]  # accepted_hist[a] = cycles that accepted exactly a drafts
    tested_by_position: tuple[int, ...]  # index i-1: how often d_i was tested
    accepted_by_position: tuple[int, ...]
    mean_k: float
    forced_cycles: int = 0
    plain_cycles: int = 0  # cycles with no proposal (k = 0): one plain target step each
    tree_cycles: int = 0  # token-tree cycles: outside α, the histogram and the per-position rates
    tree_nodes: int = 0  # nodes those trees held (verified in their one pass each)
    tree_path_tokens: int = 0  # nodes on their accepted paths

    @property
    def alpha(self) -> float:
        """Per-token acceptance rate: accepted / tested."""
        return self.accepted / self.tested if self.tested else 0.0

    @property
    def tokens_per_cycle(self) -> float:
        """Tokens per cycle = tokens per verify pass (every cycle runs the target once)."""
        return self.tokens / self.cycles if self.cycles else 0.0

    @property
    def chain_cycles(self) -> int:
        """Cycles whose drafts form a chain (the ones α and the theory describe); plain steps included."""
        return self.cycles - self.tree_cycles

    def acceptance_by_position(self) -> list[float | None]:
        return [a / t if t else None for a, t in zip(self.accepted_by_position, self.tested_by_position, strict=True)]


def acceptance_stats(traces: Sequence[CycleTrace]) -> AcceptanceStats:
    used = [t for t in traces if not t.forced]
    trees = [t for t in used if t.tree is not None]
    chains = [t for t in used if t.tree is None]
    max_k = max((t.k for t in chains), default=0)
    hist = Counter(t.num_accepted for t in chains if t.k)  # k = 0: nothing proposed, a plain step
    tested = [d for t in chains for d in t.drafts if d.verdict != "untested"]
    accepted = [d for d in tested if d.verdict == "accepted"]
    tested_pos, accepted_pos = Counter(d.index for d in tested), Counter(d.index for d in accepted)
    return AcceptanceStats(
        cycles=len(used), tokens=sum(len(t.emitted) for t in used), tested=len(tested), accepted=len(accepted),
        accepted_hist=tuple(hist[a] for a in range(max_k + 1)),
        tested_by_position=tuple(tested_pos[i] for i in range(1, max_k + 1)),
        accepted_by_position=tuple(accepted_pos[i] for i in range(1, max_k + 1)),
        mean_k=sum(t.k for t in chains) / len(chains) if chains else 0.0, forced_cycles=len(traces) - len(used),
        plain_cycles=sum(1 for t in chains if t.k == 0), tree_cycles=len(trees), tree_nodes=sum(t.k for t in trees),
        tree_path_tokens=sum(t.num_accepted for t in trees),
    )


CYCLE_PHASES_TIMED = ("draft", "verify", "accept", "resolve", "rollback")


def cycle_ms(trace: CycleTrace) -> float:
    """Wall time of one cycle: its own total; an older run file's, the sum of the decoding phases (never
    every key: the invariant check is not decoding, and a key added later would be counted twice)."""
    if trace.total_ms is not None:
        return float(trace.total_ms)
    return float(sum(trace.timings_ms.get(p, 0.0) for p in CYCLE_PHASES_TIMED))


def cost_ratio(traces: Sequence[CycleTrace]) -> float | None:
    """c ≈ (draft time per draft forward) / (target verify time): about K draft passes per cycle
    (catch-up with q_1, then d_1 … d_{K−1}), one verify pass (on a memory-bound device, one decode step)."""
    traces = [t for t in traces if t.tree is None]  # a tree's nodes are not one forward each
    draft = sum(t.timings_ms.get("draft", 0.0) for t in traces)
    forwards = sum(t.k for t in traces)
    verify = sum(t.timings_ms.get("verify", 0.0) for t in traces)
    if not traces or verify <= 0 or forwards == 0:
        return None
    return (draft / forwards) / (verify / len(traces))


BOOKKEEPING_PHASES = ("accept", "resolve", "rollback")  # cheap next to the passes, but never free


@dataclass(frozen=True)
class CycleCost:
    """Where one cycle's wall time went, in ms (from `CycleTrace.timings_ms`)."""

    number: int  # the cycle as people count it: from 1
    draft_ms: float  # the proposer's passes: catch-up and drafting
    verify_ms: float  # the target's one pass over [x_n, d_1 … d_K]
    bookkeeping_ms: float  # acceptance tests, resolve, rollback (and the snapshots of each phase)
    check_ms: float  # the optional invariant check: not decoding, but it was timed with the cycle
    tokens: int  # committed by the cycle
    forced: bool  # what-if: shown, but left out of every statistic


def cycle_costs(traces: Sequence[CycleTrace]) -> list[CycleCost]:
    """One `CycleCost` per trace, forced cycles included (marked)."""
    return [
        CycleCost(number=t.cycle + 1, draft_ms=t.timings_ms.get("draft", 0.0),
                  verify_ms=t.timings_ms.get("verify", 0.0),
                  bookkeeping_ms=sum(t.timings_ms.get(p, 0.0) for p in BOOKKEEPING_PHASES),
                  check_ms=t.timings_ms.get("invariant_check", 0.0), tokens=len(t.emitted), forced=t.forced)
        for t in traces
    ]


@dataclass(frozen=True)
class PassCosts:
    """The mean cost of one cycle's pieces, in plain autoregressive steps of the same target: `verify`
    is v(K) (1.0 is the textbook's assumption), `draft` is K·c measured the same way."""

    draft: float
    verify: float
    bookkeeping: float
    check: float
    plain_ms_per_token: float

    @property
    def passes(self) -> float:
        return self.draft + self.verify

    @property
    def total(self) -> float:
        return self.draft + self.verify + self.bookkeeping + self.check


def pass_costs(traces: Sequence[CycleTrace], baseline_ms_per_token: float | None) -> PassCosts | None:
    """Mean per-cycle costs of the exact (not forced) cycles ÷ the plain ms/token; None without a baseline."""
    costs = [c for c in cycle_costs(traces) if not c.forced]
    if not costs or not baseline_ms_per_token or baseline_ms_per_token <= 0:
        return None

    def steps(piece: str) -> float:
        return sum(getattr(c, f"{piece}_ms") for c in costs) / len(costs) / baseline_ms_per_token

    return PassCosts(draft=steps("draft"), verify=steps("verify"), bookkeeping=steps("bookkeeping"),
                     check=steps("check"), plain_ms_per_token=baseline_ms_per_token)


@dataclass(frozen=True)
class SpeedupReport:
    alpha: float
    k: float
    c: float | None
    expected_tokens_per_cycle: float
    measured_tokens_per_cycle: float
    theoretical_speedup: float | None  # the textbook: a verify pass costs one plain step
    spec_ms_per_token: float
    measured_speedup: float | None
    # With a baseline: the measured costs in plain steps, and the theory re-evaluated with them.
    costs: PassCosts | None = None
    theory_with_pass_costs: float | None = None  # E / (draft + v(K))
    theory_with_bookkeeping: float | None = None  # E / (draft + v(K) + bookkeeping + check)
    tree_cycles: int = 0  # token-tree cycles in the run: the textbook theory is then not evaluated

    @property
    def verify_cost(self) -> float | None:
        """v(K): the measured verify pass in plain autoregressive steps."""
        return self.costs.verify if self.costs else None


def measured_speedup(traces: Sequence[CycleTrace], baseline_ms_per_token: float | None) -> SpeedupReport:
    """Theory (Leviathan formula with measured α, K, c; plain cycles by their share) next to the
    measured wall-time speedup."""
    st = acceptance_stats(traces)
    used = [t for t in traces if not t.forced]
    c = cost_ratio(used)
    proposing = [t for t in used if t.k > 0]
    k = round(sum(t.k for t in proposing) / len(proposing)) if proposing else 0
    share = len(proposing) / len(used) if used else 0.0  # s: the share of cycles that proposed
    chain = used and not st.tree_cycles  # the textbook models chains: no theory for a run with trees
    expected = share * expected_tokens_per_cycle(st.alpha, k) + (1.0 - share) if chain else 0.0
    theory = expected / (share * (k * c + 1.0) + (1.0 - share)) if (chain and k and c is not None) else None
    spec_per_token = sum(cycle_ms(t) for t in used) / st.tokens if st.tokens else 0.0
    measured = baseline_ms_per_token / spec_per_token if baseline_ms_per_token and spec_per_token > 0 else None
    costs = pass_costs(used, baseline_ms_per_token)
    return SpeedupReport(
        alpha=st.alpha, k=st.mean_k, c=c, expected_tokens_per_cycle=expected,
        measured_tokens_per_cycle=st.tokens_per_cycle, theoretical_speedup=theory,
        spec_ms_per_token=spec_per_token, measured_speedup=measured, costs=costs,
        theory_with_pass_costs=expected / costs.passes if costs and costs.passes > 0 and chain else None,
        theory_with_bookkeeping=expected / costs.total if costs and costs.total > 0 and chain else None,
        tree_cycles=st.tree_cycles,
    )


def cycle_rows(traces: Sequence[CycleTrace]) -> list[dict[str, object]]:
    """One row per cycle for a history table: what was proposed, what survived, what it cost."""
    return [
        {
            "cycle": t.cycle + 1,  # numbered from 1 wherever a person reads it
            "n": t.context_len,
            "proposer": t.proposer,
            "K": t.k if t.tree is None else t.tree.depth,  # a tree's K is its depth
            "tree": "" if t.tree is None else f"width {t.tree.width}, {t.k} nodes",
            "T": t.temperature,
            "accepted": t.num_accepted,
            # text in every row ("d3" or "—"): a column of numbers and dashes is no Arrow type
            "rejected at": f"d{t.rejected_at}" if t.rejected_at is not None else "—",
            "committed": "".join(e.text for e in t.emitted),
            "last token": t.emitted[-1].kind if t.emitted else "—",
            "note": "no proposal: plain target step" if t.k == 0 else "",
            "forced": "what-if: not in the statistics" if t.forced else "",
            "ms": round(cycle_ms(t), 1),
        }
        for t in traces
    ]
