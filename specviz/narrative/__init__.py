"""Precise, numbers-filled explanations of each phase of a cycle (shared by the app and the CLI).

Every phase of a recorded `CycleTrace` becomes a short markdown paragraph that states what happened
*with the actual numbers*: which tokens were fed, what p, q, min(1, p/q) and u were, which cache
positions were appended, truncated, moved or freed. It teaches the corrected version of the classic
walkthrough (DESIGN §1–§2); the corrections are listed in `MISCONCEPTIONS`.

Conventions used in the text: the committed sequence is x_1 … x_n; positions shown in the views
are 0-based, so x_i sits at position i−1. K/V for the newest committed token x_n is *not* in the
target cache at the start of a cycle ("last token separate"): it is computed by the verify pass.
A cycle with no proposal (k = 0: lookup found no match, or a feature head without any target
feature yet) is one plain target step: one token "generated" from p_1, nothing to test.

Cache lengths, entries and positions are quoted from the trace itself (its snapshots, events and
draft records), not from a formula that assumes how the cache ought to have moved: the text must
stay true when the bookkeeping is wrong, so that it exposes the bug instead of hiding it. Where a
formula of DESIGN §1 is taught (n+K−1, K−j+1), the recorded value stands next to it.

The modules, one job each:

* `cycle.py` — the phases of a cycle, a token tree's (DESIGN §1c) and a chain's, its width-1 case;
* `verdict.py` — the acceptance tests and the token drawn after them;
* `proposer.py` — the proposer's own cache, in its words from the proposer table (DESIGN §1b);
* `text.py` — the small pieces they share; `misconceptions.py`; `summary.py` — the status line and
  the speedup explained.
"""

from .cycle import phase_markdown, prefill_markdown
from .misconceptions import MISCONCEPTIONS, Misconception, misconceptions_markdown
from .summary import explain_speedup, status_markdown

__all__ = ["MISCONCEPTIONS", "Misconception", "explain_speedup", "misconceptions_markdown", "phase_markdown",
           "prefill_markdown", "status_markdown"]
