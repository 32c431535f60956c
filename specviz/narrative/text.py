"""The small pieces of text every phase's narrative shares: a token, a cache's events and layout,
a range of entries, the proposer's own note, and the closing check of the cycle invariant."""

from __future__ import annotations

from collections.abc import Sequence

from .. import precision
from ..outcome import Truncation, freed_blocks
from ..proposers import registry
from ..trace import CacheEvent, CacheSnapshot, CycleTrace, EmittedToken, TokenProb, TreeTrace
from ..viz.style import fmt_p


def tree_of(tr: CycleTrace) -> TreeTrace | None:
    """The cycle's token tree, or None for a chain (and for a tree cycle with no node: a plain step)."""
    return tr.tree if tr.tree is not None and tr.tree.nodes else None


def tok(text: str) -> str:
    return "`" + repr(text)[1:-1].replace("`", "'") + "`" if text.strip() else f"`{text!r}`"


def events_sentence(label: str, evs: Sequence[CacheEvent], phase: str) -> str:
    """' Target: append …; free ….' for the phase's events, '' when there are none."""
    said = [e.describe() for e in evs if e.phase == phase]
    return f" {label}: {'; '.join(said)}." if said else ""


def blocks(snap: CacheSnapshot) -> str:
    if snap.layout != "paged":
        return f"write pointer at slot {snap.seq_len}"
    return f"block_table {list(snap.block_table)}, {snap.num_free_blocks} free blocks"


def entries(lo: int, hi: int) -> str:
    """Cache entries lo..hi (inclusive) in words."""
    return f"entry {lo}" if lo == hi else f"entries {lo}–{hi}"


def auto_sentence(tr: CycleTrace) -> str:
    """What k="auto" chose before this cycle, by this machine's cost law (specviz.costlaw)."""
    a = tr.auto
    if a is None:
        return ""
    if a.k == 0:
        return "**Auto** (this machine's cost law) chose **a plain step**."
    what = f"a **{a.k}-node tree**" if tr.tree is not None else f"**K = {a.k}**"
    return (f"**Auto** (this machine's cost law) chose {what}: {a.expected_tokens:.2f} tokens expected for "
            f"{a.cycle_cost:.2f} plain steps, {a.expected_speedup:.2f}× a plain step.")


def note(tr: CycleTrace) -> str:
    """The proposer's own sentence about this cycle, capitalised (empty when it said nothing)."""
    said = tr.proposer_note.strip()
    return registry.cap(said) + ("" if said.endswith(".") else ".") if said else ""


def proposals(tr: CycleTrace) -> str:
    return ", ".join(f"d{d.index} = {tok(d.text)} (q = {fmt_p(d.draft_prob)})" for d in tr.drafts)


def listed(tokens: Sequence[EmittedToken]) -> str:
    return ", ".join(f"{tok(e.text)} (position {e.position}, {e.kind})" for e in tokens) or "nothing"


def prob_of(token: EmittedToken | None, top: Sequence[TokenProb]) -> float | None:
    return next((tp.prob for tp in top if token is not None and tp.token_id == token.token_id), None)


def mechanism(tr: CycleTrace, snap: CacheSnapshot, truncated: bool) -> str:
    """How this layout rolled back, with the blocks freed counted from the recorded events."""
    if tr.k == 0 and not truncated:
        return ""
    if snap.layout != "paged":
        return "Contiguous buffer: the write pointer rewinds; stale values stay in memory until overwritten."
    if snap.policy == "keep":
        return ("Under policy **keep** (vLLM v1), blocks stay reserved (no block is freed) and the stale slots are "
                "simply overwritten next cycle.")
    freed = freed_blocks(tr.target_events)
    returned = (f"{len(freed)} block{'s' if len(freed) != 1 else ''} {list(freed)} went back to the pool" if freed
                else "no block held only removed positions, so none went back to the pool")
    return (f"Under policy **free**, blocks holding only removed positions go back to the pool: {returned}; the "
            "last partly filled block keeps stale slots past the new length.")


def invariant(tr: CycleTrace, target_len: int) -> str:
    """The invariant, checked against the recorded length rather than asserted (a bookkeeping bug
    shows), then the invariant check's numbers when the run measured them."""
    new_n = tr.context_len + len(tr.emitted)
    if target_len == new_n - 1:
        text = (f"\n\nCommitted length is now n = {new_n}; the target cache holds n−1 = {target_len} positions — "
                "exactly what a plain autoregressive decoder would hold, so the next cycle computes the same p.")
    else:
        text = (f"\n\nCommitted length is now n = {new_n}, but the target cache holds **{target_len}** positions, "
                f"not n−1 = {new_n - 1}: **the invariant is broken** — the next cycle would not compute plain "
                "decoding's p.")
    if tr.invariant_max_abs_diff:
        names = {"draft": registry.get(tr.proposer).words.noun}
        text += (" Invariant check (max |ΔK/V| vs a fresh prefill): "
                 + precision.invariant_words(tr.invariant_max_abs_diff, tr.dtype, names) + ".")
    return text


WHY_DROPPED = {
    "rejected": "rejected",
    "untested": "never tested",
    "cut": "accepted, then cut off by the end of the text",
    "newest": "committed, but now the newest token: its K/V is left for the next verify pass",
}


def drop_sentence(cut: Truncation, textbook: bool = False) -> str:
    """'drops the K/V of d3 … d5 (positions 46–48: **3** entries) — d3 rejected; d4, d5 never tested'."""
    names = [e.name for e in cut.entries]
    span = names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}"
    lo, hi = cut.length_to, cut.length_from - 1
    positions = f"position {lo}" if lo == hi else f"positions {lo}–{hi}"
    count = f"**{cut.count}** entr{'y' if cut.count == 1 else 'ies'}" + (f", K−j+1 = {cut.count}" if textbook else "")
    groups: dict[str, list[str]] = {}  # the dropped entries by reason: 'd3 rejected; d4, d5 never tested'
    for e in cut.entries:
        groups.setdefault(e.reason, []).append(e.name)
    why = "; ".join(f"{', '.join(names)} {WHY_DROPPED[reason]}" for reason, names in groups.items())
    return f"drops the K/V of {span} ({positions}: {count}) — {why}"
