"""The target's decision in words: the acceptance tests (accept) and the token drawn after them (resolve).

A chain's left-to-right test and its corrected or bonus token (docs/design.md §1), a tree's walk
and the token after its path (§1c). Resolve quotes the committed tokens and the cut from the trace
(`specviz.outcome`): the textbook counts (j, K+1) stand next to them, and a cut by the end of the
text is said instead of the formula.
"""

from __future__ import annotations

from ..outcome import FINISH_WORDS, CycleOutcome, cycle_outcome
from ..proposers import registry
from ..trace import CycleTrace, DraftStep, TreeNode, TreeTrace
from ..viz.style import fmt_p
from .text import listed, prob_of, tok, tree_of


def _named(tree: TreeTrace, i: int) -> str:
    return f"node {i} {tok(tree.nodes[i - 1].text)}"


# ---- accept -------------------------------------------------------------------------------------


def accept(tr: CycleTrace) -> str:
    if tree_of(tr):
        return _walk(tr, tr.tree)
    if tr.k == 0:
        return ("**Nothing to test.** No drafts were proposed this cycle: no u is drawn, nothing is accepted or "
                "rejected. The next token comes straight from p_1.")
    greedy = tr.temperature == 0
    if greedy:
        rule = "Greedy (T = 0): accept d_i iff it is the target's argmax. "
    elif registry.get(tr.proposer).one_hot:
        rule = (f"Draw u_i ~ U(0,1); q_i is one-hot ({registry.get(tr.proposer).words.noun}), so accept d_i iff "
                "u_i ≤ p_i(d_i): the target keeps a proposed token exactly as often as it would have produced it. ")
    else:
        rule = "Draw u_i ~ U(0,1); accept d_i iff u_i ≤ min(1, p_i(d_i)/q_i(d_i)). "
    lines = "\n".join(_test_line(d, greedy) for d in tr.drafts)
    tail = f"\n\nResult: **{tr.num_accepted} of {tr.k} accepted**" + (
        f", first rejection at d{tr.rejected_at}." if tr.rejected_at else " — every draft passed.")
    return f"**Acceptance, left to right.** {rule}The first rejection ends the streak.\n\n{lines}{tail}"


def _test_line(d: DraftStep, greedy: bool) -> str:
    if d.verdict == "untested":
        return f"- d{d.index} {tok(d.text)}: **never tested** (an earlier draft was rejected)"
    passed = d.verdict == "accepted"
    if greedy:
        return f"- d{d.index} {tok(d.text)}: {'equals' if passed else 'differs from'} argmax p → **{d.verdict}**"
    # u is None when what-if mode forced the outcome: no draw decided it
    test = "outcome forced" if d.u is None else f"u = {fmt_p(d.u)} {'≤' if passed else '>'} {fmt_p(d.ratio)}"
    return (f"- d{d.index} {tok(d.text)}: p = {fmt_p(d.target_prob)}, q = {fmt_p(d.draft_prob)}, "
            f"min(1, p/q) = {fmt_p(d.ratio)}; {test} → **{d.verdict}**{' (forced)' if d.forced else ''}")


def _walk(tr: CycleTrace, tree: TreeTrace) -> str:
    greedy = tr.temperature == 0
    lines = []
    for parent in (0, *tree.path):
        if asked := [c for c in tree.nodes if c.parent == parent and c.verdict != "untested"]:
            where = "the root x_n" if parent == 0 else _named(tree, parent)
            lines.append(f"- at {where}: " + "; ".join(_node_test(c, greedy) for c in asked))
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


def _node_test(node: TreeNode, greedy: bool) -> str:
    passed = node.verdict == "accepted"
    verdict = "**accepted**" if passed else "rejected"
    if greedy:
        return f"{node.index} {tok(node.text)} {'is' if passed else 'is not'} the argmax → {verdict}"
    if node.u is None or node.accept_prob is None:
        return f"{node.index} {tok(node.text)} → {verdict}"
    sign = "<" if passed else "≥"
    return f"{node.index} {tok(node.text)}: u = {fmt_p(node.u)} {sign} p′ = {fmt_p(node.accept_prob)} → {verdict}"


# ---- resolve ------------------------------------------------------------------------------------


def resolve(tr: CycleTrace) -> str:
    out = cycle_outcome(tr)
    if tree_of(tr):
        return _after_walk(tr, tr.tree) + _finish(out)
    if tr.k == 0:
        g, how = out.final, "argmax p_1 (greedy)" if tr.temperature == 0 else "a sample from p_1"
        prob = prob_of(g, tr.bonus_top)
        text = (f"**One generated token.** With no drafts there is neither a corrected nor a bonus token: "
                f"{tok(g.text) if g else 'the token'} is {how}" + (f" (probability {fmt_p(prob)})" if prob is not None
                else "") + (f", placed at position {g.position}" if g else "")
                + " — exactly one step of plain autoregressive decoding.")
    else:
        text = _corrected(tr, out) if tr.rejected_at is not None else _bonus(tr, out)
    return text + _commit_line(tr, out) + _finish(out)


def _corrected(tr: CycleTrace, out: CycleOutcome) -> str:
    j = tr.rejected_at
    if tr.temperature == 0:
        how = f"argmax p_{j} (greedy)"
    elif registry.get(tr.proposer).one_hot:
        how = (f"a sample from the residual norm(max(0, p_{j} − q_{j})) — with a one-hot q_{j} that is p_{j} "
               f"with d{j} removed, renormalised")
    else:
        how = f"a sample from the residual norm(max(0, p_{j} − q_{j}))"
    c = out.final
    if c is None:  # drawn, then cut: the trace keeps the residual it came from, not the token
        return (f"**Corrected token — drawn, then discarded.** d{j} was rejected, so a corrected token was {how}; "
                f"**no bonus token** after a rejection. But {_cut_reason(tr, out)}, so the corrected token is "
                "thrown away.")
    prob = prob_of(c, tr.residual_top)
    return (f"**Corrected token.** d{j} was rejected, so the corrected token {tok(c.text)} is {how}"
            + (f" (residual probability {fmt_p(prob)})" if prob is not None else "")
            + f", placed at position {c.position}. **No bonus token** after a rejection.")


def _bonus(tr: CycleTrace, out: CycleOutcome) -> str:
    k, b, greedy = tr.k, out.final, tr.temperature == 0
    if b is None:
        lost = "the bonus token and the accepted drafts after the cut are" if out.cut_drafts else "the bonus token is"
        return (f"**Bonus token — drawn, then discarded.** All K = {k} drafts were accepted, so a bonus token was "
                f"{'taken as argmax' if greedy else 'sampled from'} p_{k + 1}. But {_cut_reason(tr, out)}, so {lost} "
                "thrown away.")
    prob = prob_of(b, tr.bonus_top)
    return (f"**Bonus token.** All K = {k} drafts were accepted, so one extra token {tok(b.text)} is "
            f"{'argmax' if greedy else 'sampled from'} p_{k + 1}"
            + (f" (probability {fmt_p(prob)})" if prob is not None else "")
            + f", placed at position {b.position} — the verify pass computed p_{k + 1} for free.")


def _after_walk(tr: CycleTrace, tree: TreeTrace) -> str:
    last = tr.emitted[-1] if tr.emitted else None
    at = _named(tree, tree.path[-1]) if tree.path else "the root x_n"
    greedy = tr.temperature == 0
    if last is not None and last.kind == "corrected":
        source = ("the target's argmax there" if greedy else
                  "a sample from p′ — the target's p there with every rejected child zeroed and renormalised")
        head = (f"**Corrected token.** No child of {at} passed, so the next token is {source}: "
                f"{tok(last.text)} at position {last.position}.")
    elif last is not None and last.kind == "bonus":
        source = "the argmax" if greedy else "a sample"
        head = (f"**Bonus token.** The walk reached a leaf, {at}: the next token is {source} "
                f"of that leaf's own distribution p (computed by the same pass): {tok(last.text)} at position "
                f"{last.position}.")
    else:
        head = "**Resolve.** The end of the text cut the cycle inside the accepted path."
    return (head + f" The cycle commits **{len(tr.emitted)}** token(s) from one verify pass: {listed(tr.emitted)}. "
            "Their K/V are not in their places yet — that is the rollback's compaction.")


def _cut_reason(tr: CycleTrace, out: CycleOutcome) -> str:
    """Why the end of the text cut this cycle short, naming the recorded token and position."""
    last = out.last
    where = f"position {last.position}" if last else "this cycle"
    if out.finish_reason == "eos":
        who = next((f"d{d.index}" for d in tr.drafts if last and d.position == last.position), "the newest token")
        return (f"{who} {tok(last.text) if last else ''} is the **end-of-text token** (at {where}) and nothing after "
                "it is kept")
    if out.finish_reason == "max_new_tokens":
        return f"the **max-new-tokens limit** is reached at {where}"
    if out.finish_reason == "context_full":
        return f"the **context is full** at {where}"
    return "the cycle was cut short"


def _commit_line(tr: CycleTrace, out: CycleOutcome) -> str:
    """'The cycle commits m token(s): …' — m counted from the recorded emitted tokens; the textbook
    count (j after a rejection, K+1 after full acceptance) is named next to it, and when the cut
    made them differ the sentence says so."""
    m = len(out.committed)
    count = f"**{m}** token{'s' if m != 1 else ''}"
    if tr.k:
        if tr.rejected_at is not None:
            name, value, parts = "j", tr.rejected_at, f"{tr.rejected_at - 1} accepted + the corrected token"
        else:
            name, value, parts = "K+1", tr.k + 1, f"{tr.k} accepted + the bonus token"
        cut = f", not {name} = {value}: the cut removed {out.cut} of the {out.drawn} produced"
        count = count + cut if out.cut else f"{name} = {count} ({parts})"
    return f" The cycle commits {count}: {listed(out.committed)}."


def _finish(out: CycleOutcome) -> str:
    """The finish reason, stated where it happens: the cut is made at resolve."""
    if not out.finish_reason:
        return ""
    at = f" at position {out.last.position}" if out.last else ""
    return (f"\n\n**Generation finishes with this cycle:** {out.finish_reason} — {FINISH_WORDS[out.finish_reason]}"
            f"{at}. No further cycle will run.")
