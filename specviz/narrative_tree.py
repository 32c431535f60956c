"""The narrative of a token-tree cycle, phase by phase, with the trace's numbers (docs/design.md §1c).

A tree cycle has the chain's five phases, but three of them say something new: **verify** writes
node i to cache entry L+i while running it at position L + depth (siblings share a position, under
a tree attention mask); **accept** walks the tree from the root -- at T = 0 into the child equal to
the target's argmax, at T > 0 by the deterministic-siblings rule (children asked in order, x kept
iff u < p′(x), p′ renormalised after every "no"), which needs no q; and **rollback** first
*compacts*: the accepted nodes' K/V are copied from their verify entries to the entries of their
committed positions, in increasing order, with no re-rotation (node a_i already ran at position
L+i), then the cache is cut back as after a chain. Every number below is read from the trace (its
tree record, snapshots and events), never recomputed from a formula, so a bookkeeping bug shows in
the words. `narrative.phase_markdown` hands a tree cycle's phases here.
"""

from __future__ import annotations

from collections import defaultdict

from . import narrative as nv
from . import precision
from .outcome import FINISH_WORDS, freed_blocks
from .trace import CycleTrace, TreeNode, TreeTrace
from .viz.style import fmt_p


def phase_markdown(tr: CycleTrace, phase: str) -> str:
    """The explanation of `phase` of the tree cycle `tr`."""
    return {"start": _start, "draft": _draft, "verify": _verify, "accept": _accept, "resolve": _resolve,
            "rollback": _rollback}[phase](tr)


def _node(tree: TreeTrace, i: int) -> TreeNode:
    return tree.nodes[i - 1]


def _named(tree: TreeTrace, i: int) -> str:
    return f"node {i} {nv._tok(_node(tree, i).text)}"


def _depth(tree: TreeTrace) -> int:
    return max((n.depth for n in tree.nodes), default=0)


def _kept(tr: CycleTrace) -> tuple[int, ...]:
    """Accepted nodes whose K/V the committed sequence keeps (the newest committed token's is not)."""
    return tr.tree.path[: max(0, len(tr.emitted) - 1)]


# ---- start, draft ------------------------------------------------------------------------------


def _start(tr: CycleTrace) -> str:
    n, tree = tr.context_len, tr.tree
    snap = tr.snapshot("start")
    who = "" if snap.draft is None else (
        f" The {nv.PROPOSER_NAMES.get(tr.proposer, 'proposer')}'s cache holds **{snap.draft.seq_len}** entries.")
    return (
        f"**Cycle {tr.cycle + 1} starts** with n = {n} committed tokens (positions 0–{n - 1}). Invariant: the target "
        f"cache holds **{snap.target.seq_len}** = n−1 positions; x_n at position {n - 1} has no K/V yet.{who} This "
        f"cycle drafts a **token tree** instead of a chain: up to **{tree.width}** children per node, depth up to "
        f"**{tree.depth}** (K), at most **{tree.budget}** nodes — all verified in one target pass. Temperature "
        f"{tr.temperature:g}."
    )


def _draft(tr: CycleTrace) -> str:
    tree = tr.tree
    by_depth: dict[int, list[TreeNode]] = defaultdict(list)
    for node in tree.nodes:
        by_depth[node.depth].append(node)
    levels = "; ".join(
        f"depth {d}: " + ", ".join(f"{n.index} {nv._tok(n.text)} (q {fmt_p(n.draft_prob)})" for n in nodes)
        for d, nodes in sorted(by_depth.items())
    )
    name = nv.PROPOSER_NAMES.get(tr.proposer, tr.proposer)
    if tr.proposer == "lookup":
        how = ("It merges the continuations that followed earlier occurrences of the last n-gram into a **trie**; "
               "a node's q is its share of those continuations. No model runs, no cache is written.")
    else:
        snap = tr.snapshot("draft").draft
        cache = f" Its cache now holds **{snap.seq_len}** entries." if snap is not None else ""
        how = (
            f"After the catch-up ({len(tr.catch_up)} token(s)), the root's top {tree.width} tokens are depth 1; then, "
            f"one forward per depth, the {tree.width} best nodes of the newest depth (by cumulative log-probability) "
            f"are fed together — {len(tree.proposer_fed)} fed in all, past its prefix, under its own tree mask — and "
            f"each one's top {tree.width} tokens become the next depth. The best {tree.budget} candidates are kept, "
            f"each with its ancestors.{cache}"
        )
    note = nv._note(tr)
    return (
        f"**The {name} grows a token tree** of **{len(tree.nodes)}** nodes over {_depth(tree)} depths. {how} "
        f"{note + ' ' if note else ''}Nodes are numbered depth-first, best child first, so nodes 1…{_depth(tree)} "
        f"along the first branch are its most likely chain. {levels}. A tree is chosen by rank, not sampled. "
        f"The target has not run yet (length still {tr.snapshot('draft').target.seq_len})."
    )


# ---- verify ------------------------------------------------------------------------------------


def _verify(tr: CycleTrace) -> str:
    tree = tr.tree
    L, N = tree.root_position, len(tree.nodes)
    before, after = tr.snapshot("draft").target, tr.snapshot("verify").target
    shared = _shared_position(tree)
    ev = nv._events(tr.target_events, "verify")
    return (
        f"**The target verifies the whole tree in ONE pass** over N+1 = {N + 1} inputs: x_n and the {N} nodes. "
        f"Node i is written to cache entry L+i (entries {L}–{L + N}) but runs at position L + depth "
        f"(positions {L}–{L + _depth(tree)}): **slot ≠ position**.{shared} A tree attention mask (an additive "
        "float mask: 0 where allowed, the dtype's minimum elsewhere) lets each node attend to the committed prefix, "
        "its ancestors and itself only, so row i of the logits is exactly what a chain pass over node i's path "
        f"would give. Target cache {before.seq_len} → **{after.seq_len}** ({nv._blocks(after)})."
        + (f" Cache events: {'; '.join(ev)}." if ev else "")
        + " The distribution at a node scores its children; at a leaf it is ready for a bonus token."
    )


def _shared_position(tree: TreeTrace) -> str:
    """A concrete pair of siblings: same position, different entries."""
    seen: dict[int, TreeNode] = {}
    for node in tree.nodes:
        other = seen.get(node.position)
        if other is not None:
            L = tree.root_position
            return (f" Siblings share a position: nodes {other.index} and {node.index} both run at position "
                    f"{node.position}, in entries {L + other.index} and {L + node.index}.")
        seen[node.position] = node
    return ""


# ---- accept ------------------------------------------------------------------------------------


def _accept(tr: CycleTrace) -> str:
    tree = tr.tree
    greedy = tr.temperature == 0
    children: dict[int, list[TreeNode]] = defaultdict(list)
    for node in tree.nodes:
        children[node.parent].append(node)
    lines = []
    for parent in (0, *tree.path):
        asked = [c for c in children.get(parent, []) if c.verdict != "untested"]
        if not asked:
            continue
        where = "the root x_n" if parent == 0 else _named(tree, parent)
        tests = "; ".join(_test(c, greedy) for c in asked)
        lines.append(f"- at {where}: {tests}")
    if greedy:
        rule = ("**Greedy walk (T = 0).** From the root, descend into the child equal to the target's argmax at "
                "that node; where no child is, the walk stops. No random draw.")
    else:
        rule = ("**Deterministic siblings (T > 0).** At each node the children are asked in their order \"is it "
                "x?\": draw u and keep x iff u < p′(x), where p′ starts as the target's p there; after a \"no\", "
                "p′(x) = 0 and p′ is renormalised. That is sampling from p in steps, so it is exact — and **q "
                "never enters the test**: the tree only decides which questions are asked first.")
    path = " → ".join(_named(tree, a) for a in tree.path)
    untested = sum(1 for n in tree.nodes if n.verdict == "untested")
    result = (f"Result: the accepted path is **{path}** ({len(tree.path)} of {len(tree.nodes)} nodes)"
              if tree.path else "Result: **no child of the root passed**")
    return (rule + "\n\n" + "\n".join(lines) + f"\n\n{result}; {untested} node(s) were never asked (below a "
            "rejected node, after the accepted sibling, or off the path).")


def _test(node: TreeNode, greedy: bool) -> str:
    verdict = "**accepted**" if node.verdict == "accepted" else "rejected"
    if greedy:
        match = "is" if node.verdict == "accepted" else "is not"
        return f"{node.index} {nv._tok(node.text)} {match} the argmax → {verdict}"
    if node.u is None or node.accept_prob is None:
        return f"{node.index} {nv._tok(node.text)} → {verdict}"
    sign = "<" if node.verdict == "accepted" else "≥"
    return f"{node.index} {nv._tok(node.text)}: u = {fmt_p(node.u)} {sign} p′ = {fmt_p(node.accept_prob)} → {verdict}"


# ---- resolve -----------------------------------------------------------------------------------


def _resolve(tr: CycleTrace) -> str:
    tree = tr.tree
    last = tr.emitted[-1] if tr.emitted else None
    at = _named(tree, tree.path[-1]) if tree.path else "the root x_n"
    greedy = tr.temperature == 0
    if last is not None and last.kind == "corrected":
        source = ("the target's argmax there" if greedy else
                  "a sample from p′ — the target's p there with every rejected child zeroed and renormalised")
        head = (f"**Corrected token.** No child of {at} passed, so the next token is {source}: "
                f"{nv._tok(last.text)} at position {last.position}.")
    elif last is not None and last.kind == "bonus":
        source = "the argmax" if greedy else "a sample"
        head = (f"**Bonus token.** The walk reached a leaf, {at}: the next token is {source} of that leaf's own "
                f"distribution p (computed by the same pass): {nv._tok(last.text)} at position {last.position}.")
    else:
        head = "**Resolve.** The end of the text cut the cycle inside the accepted path."
    listed = ", ".join(f"{nv._tok(e.text)} (position {e.position}, {e.kind})" for e in tr.emitted)
    cut = (f" The cycle stops early: {tr.finish_reason} — {FINISH_WORDS.get(tr.finish_reason, '')}."
           if tr.finish_reason else "")
    return (head + f" The cycle commits **{len(tr.emitted)}** token(s) from one verify pass: {listed}. Their "
            "K/V are not in their places yet — that is the rollback's compaction." + cut)


# ---- rollback: compaction, then the cut --------------------------------------------------------


def _rollback(tr: CycleTrace) -> str:
    tree = tr.tree
    L = tree.root_position
    kept = _kept(tr)
    before, after = tr.snapshot("resolve"), tr.snapshot("rollback")
    new_n = tr.context_len + len(tr.emitted)
    if tree.moves:
        moves = "; ".join(f"entry {s} → {d}" for s, d in tree.moves)
        where = ", ".join(f"{a} → {L + i}" for i, a in enumerate(kept, start=1) if a != i)
        compact = (
            f"**Compaction.** The accepted nodes' K/V sit in their verify entries L+a_i, but the committed sequence "
            f"needs them in L+i (node → entry: {where}). So the K/V are **moved**: {moves} — in increasing order, "
            "which is safe because a_i ≥ i (a source is read before a later copy could overwrite it). **No "
            "re-rotation**: RoPE rotated each key by its position, and node a_i already ran at position L+i (its "
            "depth), exactly where it now sits."
        )
    elif kept:
        compact = (f"**No copy needed.** The accepted path is nodes 1…{len(kept)}, already in entries "
                   f"{L + 1}–{L + len(kept)}: the depth-first order put the proposer's best chain first, and it won.")
    else:
        compact = "**No copy needed.** No accepted node's K/V is kept (only the root's, already at entry L)."
    freed = freed_blocks(tr.target_events)
    if after.target.layout != "paged":
        mech = "The write pointer rewinds; the other nodes' K/V stay in memory as stale values until overwritten."
    elif after.target.policy == "keep":
        mech = "Under policy **keep** the blocks stay reserved; stale slots are overwritten next cycle."
    else:
        mech = (f"Under policy **free**, block(s) {list(freed)} holding only dropped entries went back to the pool."
                if freed else "No block held only dropped entries, so none went back to the pool.")
    name = nv.PROPOSER_NAMES.get(tr.proposer, "draft")
    proposer = ("Prompt lookup keeps no cache." if after.draft is None else
                f"The {name}'s cache goes {before.draft.seq_len} → **{after.draft.seq_len}**: the entries it fed while "
                "growing the tree rest on guesses on a branching path, so it is cut back to its committed prefix and "
                "re-fed the accepted tokens next cycle.")
    return (
        compact
        + f" Then the cut: target cache {before.target.seq_len} → **{after.target.seq_len}** (the entries past the "
        f"committed sequence — rejected, untested or overwritten nodes — are dropped). {mech}\n\n{proposer}"
        + nv._invariant_sentence(new_n, after.target.seq_len)
        + (" Invariant check (max |ΔK/V| vs a fresh prefill): "
           + precision.invariant_words(tr.invariant_max_abs_diff, tr.dtype, {"draft": name}) + "."
           if tr.invariant_max_abs_diff else "")
    )
