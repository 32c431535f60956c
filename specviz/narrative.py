"""Precise, numbers-filled explanations of each phase of a cycle (shared by the app and the CLI).

Every function here turns a recorded `CycleTrace` (plus the phase being shown) into a short
markdown paragraph that states what happened *with the actual numbers*: which tokens were fed,
what p, q, min(1, p/q) and u were, which cache positions were appended, truncated or freed. It
teaches the corrected version of the classic walkthrough (DESIGN §1–§2); the corrections are
listed in `MISCONCEPTIONS`.

Conventions used in the text: the committed sequence is x_1 … x_n; positions shown in the views
are 0-based, so x_i sits at position i−1. K/V for the newest committed token x_n is *not* in the
target cache at the start of a cycle ("last token separate"): it is computed by the verify pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .trace import CacheEvent, CacheSnapshot, CycleTrace
from .viz.style import fmt_p


@dataclass(frozen=True)
class Misconception:
    claim: str
    correction: str


MISCONCEPTIONS: tuple[Misconception, ...] = (
    Misconception(
        "After a rejection you resample a corrected token *and* commit a bonus token.",
        "A bonus token (sampled from p_{K+1}) exists only when **all K** drafts are accepted. After a "
        "rejection at position j there is only the corrected token, drawn from the residual "
        "norm(max(0, p_j − q_j)); the cycle commits exactly j tokens.",
    ),
    Misconception(
        "The target runs one forward pass over the K draft positions.",
        "It runs over **K+1 inputs** — the newest committed token x_n plus d_1 … d_K — and gets K+1 "
        "distributions p_1 … p_{K+1}. The extra one is what makes the bonus token free.",
    ),
    Misconception(
        "At the end of a cycle the cache holds K and V for exactly the committed sequence.",
        "It holds K/V for the committed sequence **minus its newest token**. That token's K/V is "
        "computed when it is fed as the first input of the next verify pass.",
    ),
    Misconception(
        "Only the target's cache needs rolling back.",
        "The **draft model has its own KV cache** that must be rolled back too (it holds K/V for the "
        "rejected drafts it fed). After a fully accepted cycle the draft is one token *short* — d_K was "
        "sampled but never fed — and catches up first next cycle.",
    ),
    Misconception(
        "On a paged cache (vLLM) you free the pages of the rejected positions.",
        "Freeing eagerly is one policy. vLLM v1 keeps the slots allocated and just rewinds its "
        "computed-token counter; the stale slots are overwritten next step. A block is only ever freed "
        "when it holds no valid position; the last partly-filled block keeps stale slots either way. "
        "specviz shows both policies (`free` / `keep`).",
    ),
    Misconception(
        "The draft token is accepted when the draft and target agree on the most likely token.",
        "At temperature > 0, d_i is accepted with probability min(1, p_i(d_i)/q_i(d_i)): a token the "
        "draft over-proposes (q > p) is sometimes rejected even if it is the target's favourite, and p, "
        "q must both be the *processed* distributions (temperature, top-k, top-p) sampling really uses.",
    ),
)


def misconceptions_markdown() -> str:
    return "\n".join(f"- ~~{m.claim}~~  \n  {m.correction}" for m in MISCONCEPTIONS)


def _tok(text: str) -> str:
    return "`" + repr(text)[1:-1].replace("`", "'") + "`" if text.strip() else f"`{text!r}`"


def _events(events: Sequence[CacheEvent], phase: str) -> list[str]:
    return [e.describe() for e in events if e.phase == phase]


def _blocks(snap: CacheSnapshot) -> str:
    if snap.layout != "paged":
        return f"write pointer at slot {snap.seq_len}"
    return f"block_table {list(snap.block_table)}, {snap.num_free_blocks} free blocks"


def prefill_markdown(num_prompt: int, target_len: int, draft_len: int) -> str:
    return (
        f"**Prefill.** The prompt has n = {num_prompt} tokens (positions 0–{num_prompt - 1}). Both models "
        f"processed x_1 … x_(n−1): the target cache holds **{target_len}** positions and the draft cache "
        f"**{draft_len}**. The newest token x_n (position {num_prompt - 1}) deliberately has no K/V yet — it "
        'is the first input of the first cycle ("last token separate", as in llama.cpp, HF and gpt-fast). '
        "Press **Next phase** to watch the draft propose."
    )


def phase_markdown(trace: CycleTrace, phase: str) -> str:
    """The explanation of `phase` of `trace`, with the trace's actual numbers."""
    builders = {
        "start": _start,
        "draft": _draft,
        "verify": _verify,
        "accept": _accept,
        "resolve": _resolve,
        "rollback": _rollback,
    }
    text = builders[phase](trace)
    if trace.forced and phase in ("accept", "resolve"):
        text += (
            "\n\n> ⚠️ **What-if mode:** some outcomes were *forced*, not decided by u ≤ min(1, p/q). "
            "This cycle's tokens are **not** distributed as the target's p — exactness is broken on purpose."
        )
    return text


def _start(tr: CycleTrace) -> str:
    n = tr.context_len
    snap = tr.snapshot("start")
    lag = n - 1 - snap.draft.seq_len
    return (
        f"**Cycle {tr.cycle} starts** with n = {n} committed tokens (positions 0–{n - 1}). Invariant: the "
        f"target cache holds K/V for positions 0–{n - 2} (length **{snap.target.seq_len}** = n−1); the newest "
        f"token x_n at position {n - 1} has no K/V yet. The draft cache has length **{snap.draft.seq_len}**"
        + (f", {lag} behind the target: it must catch up first." if lag > 0 else ".")
        + f" K = {tr.k}, temperature {tr.temperature:g}."
    )


def _draft(tr: CycleTrace) -> str:
    n, k = tr.context_len, tr.k
    snap = tr.snapshot("draft")
    fed = ", ".join(_tok(t.text) for t in tr.catch_up) or "nothing"
    proposals = ", ".join(f"d{d.index} = {_tok(d.text)} (q = {fmt_p(d.draft_prob)})" for d in tr.drafts)
    return (
        f"**Draft proposes.** The draft first feeds its catch-up token(s) {fed} "
        f"({len(tr.catch_up)} token{'s' if len(tr.catch_up) != 1 else ''}; two only after a fully accepted "
        f"cycle), then samples each proposal from its own processed distribution q_i and feeds it to get "
        f"the next: {proposals}. d{k} is sampled but **never fed**, so the draft cache ends at length "
        f"n+K−1 = {n + k - 1} (recorded: **{snap.draft.seq_len}**); the draft's new entries are provisional. "
        f"The target has not run yet (length still {snap.target.seq_len})."
    )


def _verify(tr: CycleTrace) -> str:
    n, k = tr.context_len, tr.k
    before, after = tr.snapshot("draft").target, tr.snapshot("verify").target
    inputs = ", ".join(["x_n"] + [f"d{d.index}" for d in tr.drafts])
    ev = _events(tr.target_events, "verify")
    return (
        f"**Target verifies.** ONE forward pass over the K+1 = {k + 1} inputs [{inputs}] at positions "
        f"{n - 1}–{n + k - 1}. Their K/V are appended **provisionally**: target cache length "
        f"{before.seq_len} → **{after.seq_len}** ({_blocks(after)}). The logits give K+1 = {k + 1} "
        f"distributions p_1 … p_{k + 1}: p_i scores d_i, and p_{k + 1} is ready for a bonus token."
        + (f" Cache events: {'; '.join(ev)}." if ev else "")
    )


def _accept(tr: CycleTrace) -> str:
    greedy = tr.temperature == 0
    lines = []
    for d in tr.drafts:
        if d.verdict == "untested":
            lines.append(f"- d{d.index} {_tok(d.text)}: **never tested** (an earlier draft was rejected)")
            continue
        if greedy:
            test = "equals argmax p" if d.verdict == "accepted" else "differs from argmax p"
            lines.append(f"- d{d.index} {_tok(d.text)}: {test} → **{d.verdict}**")
            continue
        if d.u is None:  # forced by what-if mode: no draw decided it
            test = "outcome forced"
        else:
            test = f"u = {fmt_p(d.u)} {'≤' if d.verdict == 'accepted' else '>'} {fmt_p(d.ratio)}"
        lines.append(
            f"- d{d.index} {_tok(d.text)}: p = {fmt_p(d.target_prob)}, q = {fmt_p(d.draft_prob)}, "
            f"min(1, p/q) = {fmt_p(d.ratio)}; {test} → **{d.verdict}**{' (forced)' if d.forced else ''}"
        )
    head = (
        "**Acceptance, left to right.** "
        + (
            "Greedy (T = 0): accept d_i iff it is the target's argmax. "
            if greedy
            else "Draw u_i ~ U(0,1); accept d_i iff u_i ≤ min(1, p_i(d_i)/q_i(d_i)). "
        )
        + "The first rejection ends the streak."
    )
    tail = f"\n\nResult: **{tr.num_accepted} of {tr.k} accepted**" + (
        f", first rejection at d{tr.rejected_at}." if tr.rejected_at else " — every draft passed."
    )
    return head + "\n\n" + "\n".join(lines) + tail


def _resolve(tr: CycleTrace) -> str:
    n = tr.context_len
    if tr.rejected_at is not None:
        j = tr.rejected_at
        c = tr.corrected_token
        how = (
            "argmax p_j (greedy)" if tr.temperature == 0 else f"a sample from the residual norm(max(0, p_{j} − q_{j}))"
        )
        ctext = _tok(c.text) if c else "?"
        prob = next((tp.prob for tp in tr.residual_top if c and tp.token_id == c.token_id), None)
        return (
            f"**Corrected token.** d{j} was rejected, so the corrected token {ctext} is {how}"
            + (f" (residual probability {fmt_p(prob)})" if prob is not None else "")
            + f", placed at position {n + j - 1}. **No bonus token** after a rejection. The cycle commits "
            f"j = {j} token(s): {', '.join(_tok(e.text) + ' (' + e.kind + ')' for e in tr.emitted)}."
        )
    b = tr.bonus_token
    prob = next((tp.prob for tp in tr.bonus_top if b and tp.token_id == b.token_id), None)
    return (
        f"**Bonus token.** All K = {tr.k} drafts were accepted, so one extra token "
        f"{_tok(b.text) if b else '?'} is sampled from p_{tr.k + 1}"
        + (f" (probability {fmt_p(prob)})" if prob is not None else "")
        + f" — the verify pass computed it for free. The cycle commits K+1 = {tr.k + 1} tokens "
        f"(positions {n}–{n + tr.k})."
    )


def _rollback(tr: CycleTrace) -> str:
    n, k = tr.context_len, tr.k
    before = tr.snapshot("resolve")
    after = tr.snapshot("rollback")
    new_n = n + len(tr.emitted)
    t_ev = _events(tr.target_events, "rollback")
    d_ev = _events(tr.draft_events, "rollback")
    if tr.rejected_at is not None:
        j = tr.rejected_at
        what = (
            f"drops the K/V of d{j} … d{k} (K−j+1 = {k - j + 1} entries): they belong to tokens that are "
            f"not in the sequence"
        )
    else:
        what = "removes nothing: every provisional entry belongs to an accepted token"
    layout = after.target.layout
    if layout == "paged":
        mech = (
            "Under policy **free**, blocks holding only removed positions go back to the pool; the last "
            "partly filled block keeps stale slots past the new length."
            if after.target.policy != "keep"
            else "Under policy **keep** (vLLM v1), blocks stay reserved and the stale slots are simply "
            "overwritten next cycle."
        )
    else:
        mech = "Contiguous buffer: the write pointer rewinds; stale values stay in memory until overwritten."
    lag = (new_n - 1) - after.draft.seq_len
    return (
        f"**Rollback & commit.** The target cache goes {before.target.seq_len} → **{after.target.seq_len}**; it "
        f"{what}. The draft cache goes {before.draft.seq_len} → **{after.draft.seq_len}**"
        + (f" — one short of the target, because d{k} was never fed; it catches up next cycle." if lag > 0 else ".")
        + f" {mech}"
        + (f"\n\nTarget: {'; '.join(t_ev)}." if t_ev else "")
        + (f" Draft: {'; '.join(d_ev)}." if d_ev else "")
        + f"\n\nCommitted length is now n = {new_n}; the target cache holds n−1 = {after.target.seq_len} "
        "positions — exactly what a plain autoregressive decoder would hold, so the next cycle computes the "
        "same p."
        + (
            " Invariant check (max |ΔK/V| vs a fresh prefill): "
            + ", ".join(f"{m} {v:.2e}" for m, v in tr.invariant_max_abs_diff.items())
            + "."
            if tr.invariant_max_abs_diff
            else ""
        )
        + (f"\n\n**Generation finished:** {tr.finish_reason}." if tr.finish_reason else "")
    )
