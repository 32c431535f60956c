"""What-if mode, scoped: force ONE cycle's verdicts, and never end the text by surprise.

What-if mode (`DecodeConfig.forced_outcomes`, docs/design.md §1) overrides chosen acceptance tests
to stage a scenario for a class. It breaks exactness on purpose, so the app keeps it on a short
leash:

* **One cycle.** The app forces the next cycle only; afterwards the decoder's forced outcomes are
  cleared (`exact_again`) and exact decoding resumes.
* **Forcing stops at an end-of-text draft.** Forcing d_i to be accepted when d_i is the
  end-of-text token would end the whole generation — a side effect nobody asked for when they
  ticked "accept d1–d3". So from the first end-of-text draft whose acceptance was forced, the
  real test decides: the outcomes forced *before* it still apply, and if the target itself accepts
  the end-of-text token the text ends exactly as plain decoding would have let it.

The engine applies forced outcomes inside `step()` and itself stops forcing at the first
end-of-text draft (`specviz.rules.accept_chain`), so `forced_step` only runs the cycle and reports
where forcing stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .trace import CycleTrace

Forced = tuple[tuple[int, bool], ...]


@dataclass(frozen=True)
class ForcedStep:
    """The outcome of one forced cycle."""

    decoder: Any  # the decoder to keep using (a SpeculativeDecoder: the fork, or the original)
    trace: CycleTrace
    stopped_at: int | None = None  # the end-of-text draft where forcing stopped, if it had to


def forced_step(dec: Any) -> ForcedStep:
    """Run one cycle with the decoder's forced outcomes (`dec.step()` when there are none);
    `stopped_at` names the end-of-text draft where the engine stopped forcing, when one was forced there or after."""
    wanted = dict(dec.config.forced_outcomes)
    trace = dec.step()
    eos_at = next((d.index for d in trace.drafts
                   if d.token_id in dec.eos_ids and wanted.get(d.index) is True and not d.forced), None)
    return ForcedStep(dec, trace, stopped_at=eos_at)


def exact_again(dec: Any) -> None:
    """Clear the decoder's forced outcomes: the next cycle is exact again."""
    if dec.config.forced_outcomes:
        dec.update_config(dec.config.replace(forced_outcomes=()))


def notices(result: ForcedStep, forced: Forced) -> tuple[str, ...]:
    """What a forced cycle did, and that what-if is over: shown once, right after the click."""
    tr = result.trace
    wanted = ", ".join(f"d{i} {'accept' if ok else 'reject'}" for i, ok in forced)
    notes = [f"What-if applied to cycle {tr.cycle + 1} only ({wanted}). Exact decoding resumes with the next "
             "cycle: the what-if toggle has switched itself off. This cycle is marked as forced and left out of the "
             "statistics."]
    if result.stopped_at is not None:
        e = result.stopped_at
        verdict = tr.drafts[e - 1].verdict
        if verdict == "accepted":
            then = "the target itself accepted it, so the text ends here — exactly as plain decoding would have let it"
        else:
            then = f"the test {'rejected' if verdict == 'rejected' else 'did not reach'} it, so the text goes on"
        notes.append(f"d{e} is the end-of-text token, so forcing stopped there: d{e} and the drafts after it got the "
                     f"real test (a forced acceptance would have ended the whole text). Here {then}.")
    return tuple(notes)
