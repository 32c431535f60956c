"""Predict, then reveal: a quiz asked after the verify pass, before the outcome is shown.

A chain's cycle asks how many drafts will be accepted and which positions the rollback drops from
the target's cache, a token tree's (docs/design.md §1c) which path the target accepts; both ask, on
a paged cache with policy "free", which blocks return to the pool. Scored against the recorded trace
(`specviz.outcome`), so right even when the end of the text cuts a cycle short. No Streamlit here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..outcome import dropped_entries, freed_blocks
from ..trace import CycleTrace


@dataclass(frozen=True)
class QuizTruth:
    """What the cycle really did, read from its trace."""

    k: int
    accepted: int
    dropped: tuple[int, ...]  # target-cache positions the rollback removed
    freed: tuple[int, ...]  # physical blocks the target's rollback returned to the pool
    candidates: tuple[int, ...]  # positions one could guess: the target's entries after verify
    candidate_blocks: tuple[int, ...]  # the target's blocks after verify (paged), else ()
    path_end: int | None = None  # a tree: the accepted path's last node (0: none passed); None for a chain
    path_labels: tuple[str, ...] = ()  # a tree: label of the path ending at node i (0: "none")


@dataclass(frozen=True)
class QuizResult:
    cycle: int
    guessed_accepted: int
    guessed_dropped: tuple[int, ...]
    guessed_freed: tuple[int, ...]
    truth: QuizTruth
    guessed_path_end: int | None = None

    def marks(self) -> list[tuple[str, str, str, bool]]:
        """(question, your answer, the truth, right?) per question asked."""
        t = self.truth
        if t.path_end is not None:
            g = self.guessed_path_end if self.guessed_path_end is not None else -1
            yours = t.path_labels[g] if 0 <= g < len(t.path_labels) else "no answer"
            rows = [("path the target accepts", yours, t.path_labels[t.path_end], g == t.path_end)]
        else:
            ok = self.guessed_accepted == t.accepted
            rows = [("drafts accepted", str(self.guessed_accepted), str(t.accepted), ok),
                    _set_row("positions dropped from the target cache", self.guessed_dropped, t.dropped)]
        if t.candidate_blocks:
            rows.append(_set_row("blocks returned to the pool", self.guessed_freed, t.freed))
        return rows

    @property
    def score(self) -> tuple[int, int]:
        marks = self.marks()
        return sum(ok for *_, ok in marks), len(marks)


def truth(trace: CycleTrace) -> QuizTruth:
    """The quiz's answers for `trace`, from its recorded events and snapshots."""
    n_after = trace.context_len + len(trace.emitted)
    dropped = tuple(e.position for t in dropped_entries(trace, trace.target_events, n_after) for e in t.entries)
    verify = trace.snapshot("verify").target
    blocks = tuple(verify.block_table) if verify.layout == "paged" and verify.policy == "free" else ()
    tree = trace.tree
    return QuizTruth(
        k=trace.k, accepted=trace.num_accepted, dropped=dropped, freed=freed_blocks(trace.target_events),
        candidates=tuple(range(trace.context_len - 1, verify.seq_len)), candidate_blocks=blocks,
        path_end=None if tree is None else (tree.path[-1] if tree.path else 0),
        path_labels=() if tree is None else path_labels(trace),
    )  # fmt: skip


def path_labels(trace: CycleTrace) -> tuple[str, ...]:
    """A tree's candidate answers: label i names the root-to-node-i path ("none" for 0)."""
    labels = ["none: no child of the root passes"]
    for node in trace.tree.nodes:  # parents precede children (docs/design.md §1c): extend the parent's path
        head = labels[node.parent] + " → " if node.parent else ""
        labels.append(f"{head}{node.index} {node.text!r}")
    return tuple(labels)


def answer(trace: CycleTrace, accepted: int, dropped: Sequence[int], freed: Sequence[int] = (),
           path_end: int | None = None) -> QuizResult:
    """Score a prediction for `trace` (`path_end`: a tree's guessed path, by its last node)."""
    return QuizResult(trace.cycle, int(accepted), tuple(sorted(dropped)), tuple(sorted(freed)), truth(trace),
                      None if path_end is None else int(path_end))


def tally(results: Sequence[QuizResult]) -> tuple[int, int]:
    """Right answers and questions asked over a run."""
    return sum(r.score[0] for r in results), sum(r.score[1] for r in results)


def _set_row(question: str, yours: Sequence[int], truth: Sequence[int]) -> tuple[str, str, str, bool]:
    """A question whose answer is a set of numbers: (question, your answer, the truth, right?)."""
    listed = [", ".join(str(i) for i in items) if items else "none" for items in (yours, truth)]
    return question, listed[0], listed[1], set(yours) == set(truth)
