"""A cycle's phases in words, for a chain and for a token tree (docs/design.md §1, §1c).

A chain is the tree of width 1, so one story serves both; a tree adds several nodes per depth,
verify entries L+i at positions L + depth, and the rollback's compaction. The tests and the token
drawn after them are told in `verdict.py`, the proposer's own cache in `proposer.py`.
"""

from __future__ import annotations

import itertools
from operator import attrgetter

from ..outcome import FINISH_WORDS, Truncation, dropped_entries
from ..proposers import registry
from ..proposers.registry import cap
from ..trace import CycleTrace, TreeNode, TreeTrace
from ..viz.style import fmt_p
from . import verdict
from .proposer import NoCache, story
from .text import auto_sentence, blocks, drop_sentence, events_sentence, invariant, mechanism, note, tok, tree_of


def phase_markdown(trace: CycleTrace, phase: str) -> str:
    """The explanation of `phase` of `trace`, with the trace's actual numbers."""
    text = PHASES[phase](trace)
    if trace.forced and phase in ("accept", "resolve"):
        text += ("\n\n> ⚠️ **What-if mode:** some outcomes were *forced*, not decided by u ≤ min(1, p/q). "
                 "This cycle's tokens are **not** distributed as the target's p — exactness is broken on purpose.")
    return text


def prefill_markdown(num_prompt: int, target_len: int, draft_len: int | None, proposer: str = "draft") -> str:
    """The state after prefill; `draft_len` is the proposer's cache length (None: it has no cache)."""
    return (f"**Prefill.** The prompt has n = {num_prompt} tokens (positions 0–{num_prompt - 1}). "
            f"{story(proposer).prefill(target_len, draft_len)} The newest token x_n (position {num_prompt - 1}) "
            'deliberately has no K/V in the target yet — it is the first input of the first cycle ("last token '
            'separate", as in llama.cpp, HF and gpt-fast). '
            f"Press **Next phase** to watch the {registry.get(proposer).words.noun} propose.")


def depth(tree: TreeTrace) -> int:
    return max((n.depth for n in tree.nodes), default=0)


def start(tr: CycleTrace) -> str:
    n, tree, target_len = tr.context_len, tree_of(tr), tr.snapshot("start").target.seq_len
    held = f"positions 0–{target_len - 1}" if target_len else "no position"  # as recorded
    if tree:
        shape = (f" This cycle drafts a **token tree** instead of a chain: up to **{tree.width}** children per "
                 f"node, depth up to **{tree.depth}** (K), at most **{tree.budget}** nodes — all verified in one "
                 "target pass. Temperature")
    else:
        plain = " (no proposal this cycle: a plain target step)" if tr.k == 0 else ""
        shape = f" K = {tr.k}{plain}, temperature"
    if tr.auto is not None:
        shape = f" {auto_sentence(tr)}{shape}"
    return (f"**Cycle {tr.cycle + 1} starts** with n = {n} committed tokens (positions 0–{n - 1}). Invariant: the "
            f"target cache holds K/V for {held} (length **{target_len}** = n−1); the newest token x_n at position "
            f"{n - 1} has no K/V yet. {story(tr.proposer).start(tr)}{shape} {tr.temperature:g}.")


def draft(tr: CycleTrace) -> str:
    tree = tree_of(tr)
    if tree:
        body = _grown(tr, tree)
    elif tr.auto is not None and tr.auto.k == 0:
        body = (f"**Auto chose a plain step.** {note(tr)} So the proposer is not asked this cycle (it catches up "
                "next time it drafts): the target will run over x_n alone, and its p_1 gives the next token — "
                "nothing to accept or reject.")
    elif tr.k == 0:
        body = (f"**No proposal this cycle.** {note(tr) or 'The proposer proposed nothing.'} The cycle is one **plain "
                "target step**: the target will run over x_n alone, and its p_1 gives the next token — nothing to "
                "accept or reject." + registry.get(tr.proposer).words.idle)
    elif copier := copied_by(tr):  # a merged proposer copied this chain: its own model was not run
        body = (NoCache(registry.get(copier)).draft(tr) + f" {cap(registry.get(tr.proposer).words.short)} picked the "
                "copy before anything was drafted; the feature head is not run this cycle and catches up from the "
                "target's real features the next time it drafts.")
    else:
        body = story(tr.proposer).draft(tr)
    return body + f" The target has not run yet (length still {tr.snapshot('draft').target.seq_len})."


def copied_by(tr: CycleTrace) -> str | None:
    """The proposer-table name of the copier (a proposer without a cache, named by its noun) that proposed
    every draft of a merged proposer's chain (None: not a copy)."""
    sources = {d.source for d in tr.drafts}
    if len(sources) != 1 or not registry.get(tr.proposer).has_cache:
        return None
    source = sources.pop()
    return next((e.name for e in registry.entries() if not e.has_cache and e.words.noun == source), None)


def _grown(tr: CycleTrace, tree: TreeTrace) -> str:
    by_depth = itertools.groupby(sorted(tree.nodes, key=attrgetter("depth")), key=attrgetter("depth"))
    levels = "; ".join(f"depth {d}: " + ", ".join(f"{n.index} {tok(n.text)} (q {fmt_p(n.draft_prob)})" for n in nodes)
                       for d, nodes in by_depth)
    said = note(tr)
    return (f"**The {registry.get(tr.proposer).words.noun} grows a token tree** of **{len(tree.nodes)}** nodes over "
            f"{depth(tree)} depths. {story(tr.proposer).tree_how(tr)} {said + ' ' if said else ''}Nodes are numbered "
            f"depth-first, best child first, so nodes 1…{depth(tree)} along the first branch are its most likely "
            f"chain. {levels}. A tree is chosen by rank, not sampled.")


def verify(tr: CycleTrace) -> str:
    n, k, tree = tr.context_len, tr.k, tree_of(tr)
    before, after = tr.snapshot("draft").target, tr.snapshot("verify").target
    events = events_sentence("Cache events", tr.target_events, "verify")
    grown = f"target cache length {before.seq_len} → **{after.seq_len}** ({blocks(after)})"
    if tree:
        L, N = tree.root_position, len(tree.nodes)
        return (f"**The target verifies the whole tree in ONE pass** over N+1 = {N + 1} inputs: x_n and the {N} nodes. "
                f"Node i is written to cache entry L+i (entries {L}–{L + N}) but runs at position L + depth (positions "
                f"{L}–{L + depth(tree)}): **entry ≠ position**.{_shared_position(tree)} A tree attention mask (an "
                "additive float mask: 0 where allowed, the dtype's minimum elsewhere) lets each node attend to the "
                "committed prefix, its ancestors and itself only, so row i of the logits is exactly what a chain pass "
                f"over node i's path would give. {registry.cap(grown)}.{events} The distribution at a node scores its "
                "children; at a leaf it is ready for a bonus token.")
    if k == 0:
        return (f"**Target runs a plain step.** No drafts to verify: ONE forward pass over x_n alone at position "
                f"{n - 1}. Its K/V is appended: {grown}. The logits give p_1, the distribution of the next "
                f"token.{events}")
    inputs = ", ".join(["x_n"] + [f"d{d.index}" for d in tr.drafts])
    one_hot = " Each q_i is one-hot, so min(1, p_i(d_i)/q_i(d_i)) is simply p_i(d_i)."
    return (f"**Target verifies.** ONE forward pass over the K+1 = {k + 1} inputs [{inputs}] at positions "
            f"{n - 1}–{tr.drafts[-1].position}. Their K/V are appended **provisionally**: {grown}. The logits give "
            f"K+1 = {k + 1} distributions p_1 … p_{k + 1}: p_i scores d_i, and p_{k + 1} is ready for a bonus "
            f"token.{events}" + story(tr.proposer).verify(tr) + (one_hot if registry.get(tr.proposer).one_hot else ""))


def _shared_position(tree: TreeTrace) -> str:
    """A concrete pair of siblings: same position, different entries."""
    seen: dict[int, TreeNode] = {}
    for node in tree.nodes:
        other = seen.setdefault(node.position, node)
        if other is not node:
            L = tree.root_position
            return (f" Siblings share a position: nodes {other.index} and {node.index} both run at position "
                    f"{node.position}, in entries {L + other.index} and {L + node.index}.")
    return ""


def rollback(tr: CycleTrace) -> str:
    tree, new_n = tree_of(tr), tr.context_len + len(tr.emitted)
    before, after = tr.snapshot("resolve"), tr.snapshot("rollback")
    cuts = dropped_entries(tr, tr.target_events, new_n) if not tree else []
    if tree:
        head = (f"{_compaction(tr, tree)} Then the cut: target cache {before.target.seq_len} → "
                f"**{after.target.seq_len}** (the entries past the committed sequence — rejected, untested or "
                "overwritten nodes — are dropped).")
    else:
        head = (f"**Rollback & commit.** The target cache goes {before.target.seq_len} → **{after.target.seq_len}**; "
                f"it {_target_drop(tr, cuts)}.")
    mech = mechanism(tr, after.target, bool(cuts))
    told = story(tr.proposer)
    proposer = told.tree_rollback(tr, after.target.seq_len) if tree else told.rollback(tr, after.target.seq_len)
    last = tr.emitted[-1] if tr.emitted else None
    finished = (f"\n\n**Generation finished:** {tr.finish_reason} — {FINISH_WORDS.get(tr.finish_reason, '')}"
                + (f" at position {last.position}." if last else ".") if tr.finish_reason else "")
    return (head + (f" {mech}" if mech else "") + events_sentence("Target", tr.target_events, "rollback")
            + "\n\n" + proposer + invariant(tr, after.target.seq_len) + finished)


def _target_drop(tr: CycleTrace, cuts: list[Truncation]) -> str:
    """What the target's rollback truncation removed, position by position, from its event."""
    if not cuts:
        if tr.k == 0:
            return "removes nothing: the one entry the plain step appended belongs to x_n, which is committed"
        return "removes nothing: every provisional entry belongs to a committed token"
    # The textbook count K−j+1 is named when it is what really happened (a rejection, nothing cut).
    textbook = tr.rejected_at is not None and not tr.finish_reason
    return "; ".join(drop_sentence(cut, textbook and cut.count == tr.k - tr.rejected_at + 1) for cut in cuts)


def _compaction(tr: CycleTrace, tree: TreeTrace) -> str:
    L = tree.root_position
    kept = tree.path[: max(0, len(tr.emitted) - 1)]  # the newest committed token's K/V is not kept
    if tree.moves:
        moves = "; ".join(f"entry {s} → {d}" for s, d in tree.moves)
        where = ", ".join(f"{a} → {L + i}" for i, a in enumerate(kept, start=1) if a != i)
        return (f"**Compaction.** The accepted nodes' K/V sit in their verify entries L+a_i, but the committed "
                f"sequence needs them in L+i (node → entry: {where}). So the K/V are **moved**: {moves} — in "
                "increasing order, which is safe because a_i ≥ i (a source is read before a later copy could "
                "overwrite it). **No re-rotation**: RoPE rotated each key by its position, and node a_i already ran "
                "at position L+i (its depth), exactly where it now sits.")
    if kept:
        return (f"**No copy needed.** The accepted path is nodes 1…{len(kept)}, already in entries "
                f"{L + 1}–{L + len(kept)}: the depth-first order put the proposer's best chain first, and it won.")
    return "**No copy needed.** No accepted node's K/V is kept (only the root's, already at entry L)."


PHASES = {"start": start, "draft": draft, "verify": verify, "accept": verdict.accept, "resolve": verdict.resolve,
          "rollback": rollback}
