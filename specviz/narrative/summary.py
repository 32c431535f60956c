"""The run in one line and the speedup in words: the stage's status line and the statistics tab's
explanation of why the measured speedup differs from the textbook's."""

from __future__ import annotations

from collections.abc import Sequence

from .. import costlaw
from ..stats import SpeedupReport
from ..trace import CycleTrace
from ..viz.style import PHASE_TITLES


def explain_speedup(report: SpeedupReport) -> str:
    """Why the measured speedup differs from the textbook theory, one measured factor at a time
    (docs/design.md §1, "Expected gain"): the last step is exactly the measured speedup."""
    theory, measured, costs = report.theoretical_speedup, report.measured_speedup, report.costs
    if costs is None or measured is None:
        return ("Run the **autoregressive baseline** below to measure a plain step of the target: the verify cost "
                "v(K) and the measured speedup are both counted in plain steps.")
    ms = costs.plain_ms_per_token
    parts = [f"**Measured {measured:.2f}× vs theory {theory:.2f}×.**" if theory else f"**Measured {measured:.2f}×.**",
             f"The textbook formula counts the verify pass over K+1 tokens as **one** plain step; here it took "
             f"**v(K) = {costs.verify:.2f}** plain steps ({costs.verify * ms:.1f} ms vs {ms:.1f} ms per plain token), "
             f"and the proposer's passes {costs.draft:.2f} steps per cycle."]
    if report.theory_with_pass_costs:
        parts.append(f"With these measured costs the formula predicts **{report.theory_with_pass_costs:.2f}×**.")
    extra = costs.bookkeeping + costs.check
    if report.theory_with_bookkeeping:
        check = f", plus {costs.check * ms:.1f} ms for the invariant check" if costs.check > 0.005 else ""
        parts.append(f"Each cycle also spent {costs.bookkeeping * ms:.1f} ms on bookkeeping the formula leaves out — "
                     f"the acceptance tests, resolve, rollback and the snapshots these views draw{check} — "
                     f"{extra:.2f} steps, which gives **{report.theory_with_bookkeeping:.2f}×**.")
    if report.tree_cycles:  # the formula models a chain of K drafts; a tree's figure is tokens per pass
        parts.append(f"This run drafted token trees ({report.tree_cycles} cycle(s)): the textbook formula models a "
                     f"chain, so no theory is drawn. It committed **{report.measured_tokens_per_cycle:.2f} tokens per "
                     f"verify pass**, at {costs.total:.2f} plain steps per cycle: that is the measured "
                     f"**{measured:.2f}×**.")
        return " ".join(parts)
    parts.append(f"Last, this run committed {report.measured_tokens_per_cycle:.2f} tokens per cycle where α = "
                 f"{report.alpha:.2f} predicts {report.expected_tokens_per_cycle:.2f}: that is the measured "
                 f"**{measured:.2f}×**.")
    return " ".join(parts)


def explain_law(law: costlaw.CostLaw, proposer: str, traces: Sequence[CycleTrace]) -> str:
    """In one sentence, which K the machine's cost law picks for this run now, and why."""
    acceptance = costlaw.run_acceptance(traces, proposer)
    pick = costlaw.choose(law, proposer, acceptance, costlaw.AUTO_MAX_K)
    seen = sum(t.auto is not None for t in traces)
    ran = f" (auto ran {seen} of these {len(traces)} cycles)" if seen else ""
    costs = (f"one verify over 2 tokens costs v(2) = {law.v(2):.2f} plain steps and a draft "
             f"c = {law.cost_of(proposer):.3f}")
    if pick.k == 0:
        return (f"**The law picks a plain step here**{ran}: {costs}, so one draft pays only if accepted more than "
                f"{costlaw.break_even(law, proposer, 1):.0%} of the time, and this run's a1 is {acceptance[0]:.0%}.")
    return (f"**The law picks K = {pick.k}**{ran}: {costs}; with the acceptance seen (a1 = {acceptance[0]:.0%}) "
            f"K = {pick.k} should commit {pick.expected_tokens:.2f} tokens for {pick.cycle_cost:.2f} plain steps, "
            f"**{pick.expected_speedup:.2f}×** a plain step.")


def status_markdown(num_prompt: int, traces: Sequence[CycleTrace], cycle: int | None, phase: str, proposer: str) -> str:
    """The one line above the views, counted from the recorded traces. The finish reason only from
    resolve on (where the cut happens): earlier it would give the outcome away."""
    before = num_prompt + sum(len(t.emitted) for t in traces[: (cycle or 0)])
    where = "before the first cycle" if cycle is None else f"cycle **{cycle + 1}** of {len(traces)}"
    line = (f"{where} · phase **{PHASE_TITLES.get(phase, phase)}** · {before} tokens committed before this cycle "
            f"({num_prompt} prompt) · proposer: {proposer}")
    tr = traces[cycle] if cycle is not None and cycle < len(traces) else None
    if tr is not None and tr.forced:
        line += " · ⚠️ **what-if cycle** (forced, not in the statistics)"
    if tr is not None and tr.finish_reason and phase in ("resolve", "rollback"):
        last = tr.emitted[-1] if tr.emitted else None
        line += f" · **finished: {tr.finish_reason}**" + (f" at position {last.position}" if last else "")
    return line
