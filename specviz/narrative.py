"""Precise, numbers-filled explanations of each phase of a cycle (shared by the app and the CLI).

Every function here turns a recorded `CycleTrace` (plus the phase being shown) into a short
markdown paragraph that states what happened *with the actual numbers*: which tokens were fed,
what p, q, min(1, p/q) and u were, which cache positions were appended, truncated or freed. It
teaches the corrected version of the classic walkthrough (DESIGN §1–§2); the corrections are
listed in `MISCONCEPTIONS`.

Conventions used in the text: the committed sequence is x_1 … x_n; positions shown in the views
are 0-based, so x_i sits at position i−1. K/V for the newest committed token x_n is *not* in the
target cache at the start of a cycle ("last token separate"): it is computed by the verify pass.

Who proposed (`trace.proposer`, DESIGN §1b) changes only the draft phase and the proposer's own
rollback; verify, the acceptance test, the residual, the bonus token and the target's rollback
read the same for every proposer. The proposer-specific sentences:

* **draft model** — feeds the committed tokens it lacks, then each draft but the last;
* **feature head** (EAGLE-style) — entry p of its one-layer cache pairs the target's feature at
  position p with the token at p+1. Catch-up entries come from the target's *real* features; the
  entries fed while drafting d_2 … d_K come from the head's own *predicted* features, so rollback
  always drops them, even when their drafts were accepted;
* **prompt lookup** — copies what followed an earlier n-gram (the trace's `proposer_note` says
  which); q is one-hot and there is no cache.

A cycle with no proposal (k = 0: lookup found no match, or a feature head without any target
feature yet) is one plain target step: one token "generated" from p_1, nothing to test.

Cache lengths, entries and positions are quoted from the trace itself (its snapshots, events and
draft records), not from a formula that assumes how the cache ought to have moved: the text must
stay true when the bookkeeping is wrong, so that it exposes the bug instead of hiding it. Where a
formula of DESIGN §1 is taught (n+K−1, K−j+1), the recorded value stands next to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import precision
from .outcome import FINISH_WORDS, CycleOutcome, DroppedEntry, Truncation, cycle_outcome, dropped_entries, freed_blocks
from .stats import SpeedupReport
from .trace import CacheEvent, CacheSnapshot, CycleTrace, DraftStep, EmittedToken, TokenProb
from .viz.style import PHASE_TITLES, fmt_p

PROPOSER_NAMES = {"draft": "draft model", "feature": "feature head", "lookup": "prompt lookup"}


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
    Misconception(
        "EAGLE-style drafting (a feature head on the target's hidden states) changes how drafts are verified.",
        "It changes only **who proposes**. The head reads the target's hidden states (its features) and "
        "keeps a one-layer cache whose entry p pairs the feature at position p with the token at p+1. The "
        "entries it builds from its own *predicted* features while drafting d_2 … d_K are **always rolled "
        "back**, even when those drafts are accepted; the next cycle rebuilds them from the target's real "
        "features. The acceptance test u ≤ min(1, p/q), the residual, the bonus token and the target's "
        "rollback are exactly the same as with a draft model.",
    ),
    Misconception(
        "A weak proposer (an untrained head, prompt lookup, a small vocabulary) makes the output less exact.",
        "Exactness holds with **any** proposer, even an untrained head: the test and the residual make "
        "every emitted token distributed as p. A poor proposer only costs speed (fewer accepted drafts). "
        "Prompt lookup's q is one-hot, so a copied token is kept with probability p(d) and the residual is "
        "p without d. A head with a *trimmed vocabulary* has q = 0 outside its subset: it never drafts those "
        "tokens, and at a rejection the residual max(0, p − q) = p there restores their full probability.",
    ),
    Misconception(
        "In a token tree every node gets its own position, so the verify pass runs positions n … n+N.",
        "Every node gets its own cache **slot** (entry L+i for node i), but its **position** is the root's plus "
        "its depth: **siblings share a position**, because they are alternative tokens for the same place in the "
        "text. During verify slot ≠ position; the tree attention mask keeps siblings from seeing each other.",
    ),
    Misconception(
        "After a tree verify the accepted tokens' K/V are already where the next cycle reads them.",
        "Only when the winning path is nodes 1, 2, …, j (the proposer's best chain, which the depth-first order "
        "puts first). Otherwise node a_i's K/V sit in entry L+a_i while the committed sequence needs them in "
        "L+i: the rollback **moves** them there (in increasing i, safe since a_i ≥ i), then cuts the cache as "
        "after a chain. Paged caches may copy across blocks, and whole blocks past the new length are freed.",
    ),
    Misconception(
        "Moving a key to another cache entry means rotating it again (RoPE depends on the position).",
        "No re-rotation is needed: RoPE rotates a key by its *position*, not its slot, and node a_i was computed "
        "at position L + depth(a_i) = L+i — exactly the position of the entry it is moved to. The copy is a plain "
        "copy of K and V.",
    ),
    Misconception(
        "Verifying a token tree at T > 0 needs the proposer's q of every node, as the chain's min(1, p/q) does.",
        "EAGLE-style tree verification uses **deterministic siblings**: at a node, the children are asked in "
        "order and x is kept iff u < p′(x), where p′ is the target's p with every rejected sibling zeroed and "
        "renormalised; if all are rejected the token is drawn from what is left. That is sampling from p in "
        "steps, so it is exact, and q never enters it: the tree (grown by rank, not sampled) only decides which "
        "questions are asked first.",
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


def prefill_markdown(num_prompt: int, target_len: int, draft_len: int | None, proposer: str = "draft") -> str:
    """The state after prefill; `draft_len` is the proposer's cache length (None: it has no cache)."""
    if proposer == "feature":
        who = (
            f"The target processed x_1 … x_(n−1): its cache holds **{target_len}** positions, and the same pass "
            f"gave the target's features at those positions. The feature head's one-layer cache holds "
            f"**{draft_len}** entries, each a pair (target feature at position p, token at position p+1), all "
            "built from real features; the pair that yields q_1 is fed by the first cycle's catch-up."
        )
    elif proposer == "lookup" or draft_len is None:
        who = (
            f"The target processed x_1 … x_(n−1): its cache holds **{target_len}** positions. Prompt lookup "
            "keeps **no cache**: it only searches the token ids."
        )
    else:
        who = (
            f"Both models processed x_1 … x_(n−1): the target cache holds **{target_len}** positions and the "
            f"draft cache **{draft_len}**."
        )
    return (
        f"**Prefill.** The prompt has n = {num_prompt} tokens (positions 0–{num_prompt - 1}). {who} The newest "
        f"token x_n (position {num_prompt - 1}) deliberately has no K/V in the target yet — it "
        'is the first input of the first cycle ("last token separate", as in llama.cpp, HF and gpt-fast). '
        f"Press **Next phase** to watch the {PROPOSER_NAMES.get(proposer, proposer)} propose."
    )


def phase_markdown(trace: CycleTrace, phase: str) -> str:
    """The explanation of `phase` of `trace`, with the trace's actual numbers."""
    if trace.tree is not None and trace.tree.nodes:  # a token tree's words (docs/design.md §1c); no node: a plain step
        from .narrative_tree import phase_markdown as tree_phase

        return tree_phase(trace, phase)
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


def _note(tr: CycleTrace) -> str:
    """The proposer's own sentence about this cycle, capitalised (empty when it said nothing)."""
    note = tr.proposer_note.strip()
    return note[:1].upper() + note[1:] + ("" if note.endswith(".") else ".") if note else ""


def _entries(lo: int, hi: int) -> str:
    """Cache entries lo..hi (inclusive) in words."""
    return f"entry {lo}" if lo == hi else f"entries {lo}–{hi}"


def _proposals(tr: CycleTrace) -> str:
    return ", ".join(f"d{d.index} = {_tok(d.text)} (q = {fmt_p(d.draft_prob)})" for d in tr.drafts)


# ---- start ----------------------------------------------------------------------------------


def _start(tr: CycleTrace) -> str:
    n = tr.context_len
    snap = tr.snapshot("start")
    held = f"positions 0–{snap.target.seq_len - 1}" if snap.target.seq_len else "no position"  # as recorded
    head = (
        f"**Cycle {tr.cycle + 1} starts** with n = {n} committed tokens (positions 0–{n - 1}). Invariant: the "
        f"target cache holds K/V for {held} (length **{snap.target.seq_len}** = n−1); the newest "
        f"token x_n at position {n - 1} has no K/V yet. "
    )
    if snap.draft is None:
        who = "Prompt lookup keeps **no cache**: it only searches the committed token ids."
    elif tr.proposer == "feature":
        lacking = snap.target.seq_len - snap.draft.seq_len  # real features exist for every target position
        who = (
            f"The feature head's cache holds **{snap.draft.seq_len}** entries (pairs of the target's feature at "
            f"position p and the token at p+1, all from real features); the target has real features for "
            f"{snap.target.seq_len} positions, so "
            + (f"the head lacks {lacking} pair(s) and catches up on them first." if lacking > 0 else "it lacks none.")
        )
    else:
        lag = n - 1 - snap.draft.seq_len
        who = f"The draft cache has length **{snap.draft.seq_len}**" + (
            f", {lag} behind the target: it must catch up first." if lag > 0 else "."
        )
    k = f" K = {tr.k}" + (" (no proposal this cycle: a plain target step)" if tr.k == 0 else "")
    return head + who + k + f", temperature {tr.temperature:g}."


# ---- draft ----------------------------------------------------------------------------------


def _draft(tr: CycleTrace) -> str:
    target_len = tr.snapshot("draft").target.seq_len
    if tr.k == 0:
        body = _no_proposal(tr)
    elif tr.proposer == "feature":
        body = _draft_feature(tr)
    elif tr.proposer == "lookup":
        body = (
            f"**Prompt lookup proposes.** No model runs and no cache is written. {_note(tr)} A copy is "
            f"deterministic, so each q_i is **one-hot** (q = 1 on the copied token): {_proposals(tr)}."
        )
    else:
        body = _draft_model(tr)
    return body + f" The target has not run yet (length still {target_len})."


def _no_proposal(tr: CycleTrace) -> str:
    why = _note(tr) or "The proposer proposed nothing."
    text = (
        f"**No proposal this cycle.** {why} The cycle is one **plain target step**: the target will run over "
        "x_n alone, and its p_1 gives the next token — nothing to accept or reject."
    )
    if tr.proposer == "lookup":  # ordinary prompts rarely repeat themselves: say which ones suit it
        text += (
            " Prompt lookup only guesses when the text repeats what came before; it suits prompts that copy, "
            "like the examples “Repeat this list, changing only the last item: …” or “Rewrite this paragraph "
            "replacing ‘cat’ with ‘dog’: …” (Example prompts, in the sidebar)."
        )
    return text


def _draft_model(tr: CycleTrace) -> str:
    n, k = tr.context_len, tr.k
    snap = tr.snapshot("draft")
    fed = ", ".join(_tok(t.text) for t in tr.catch_up) or "nothing"
    return (
        f"**Draft proposes.** The draft first feeds its catch-up token(s) {fed} "
        f"({len(tr.catch_up)} token{'s' if len(tr.catch_up) != 1 else ''}; two only after a fully accepted "
        f"cycle), then samples each proposal from its own processed distribution q_i and feeds it to get "
        f"the next: {_proposals(tr)}. d{k} is sampled but **never fed**, so the draft cache ends at length "
        f"n+K−1 = {n + k - 1} (recorded: **{snap.draft.seq_len}**); the draft's new entries are provisional."
    )


def _draft_feature(tr: CycleTrace) -> str:
    k = tr.k
    before, head = tr.snapshot("start").draft, tr.snapshot("draft").draft
    real, total = head.num_committed, head.seq_len
    pairs = ", ".join(f"(feature@{t.position - 1}, {_tok(t.text)}@{t.position})" for t in tr.catch_up) or "none"
    text = (
        f"**Feature head proposes.** Catch-up: the head is fed {len(tr.catch_up)} pair(s) built from the "
        f"target's **real** features — {pairs} — the entries its cache lacked; the output of the last one gives "
        f"q_1, from which d1 is sampled."
    )
    if total > real:
        text += (
            f" Then d2 … d{k} come from feeding the head its **own predicted** feature together with the previous "
            f"draft: {_entries(real, total - 1)} rest on a guess, not on the target, so they are provisional — "
            "**even if their drafts are accepted** they are dropped at rollback."
        )
    return text + (
        f" d{k} is sampled but never fed. Proposals: {_proposals(tr)}. Head cache {before.seq_len} → "
        f"**{total}** entries ({real} from real features + {total - real} from predicted features)."
    )


# ---- verify ---------------------------------------------------------------------------------


def _verify(tr: CycleTrace) -> str:
    n, k = tr.context_len, tr.k
    before, after = tr.snapshot("draft").target, tr.snapshot("verify").target
    ev = _events(tr.target_events, "verify")
    events = f" Cache events: {'; '.join(ev)}." if ev else ""
    if k == 0:
        return (
            f"**Target runs a plain step.** No drafts to verify: ONE forward pass over x_n alone at position "
            f"{n - 1}. Its K/V is appended: target cache length {before.seq_len} → **{after.seq_len}** "
            f"({_blocks(after)}). The logits give p_1, the distribution of the next token.{events}"
        )
    inputs = ", ".join(["x_n"] + [f"d{d.index}" for d in tr.drafts])
    last = tr.drafts[-1].position
    text = (
        f"**Target verifies.** ONE forward pass over the K+1 = {k + 1} inputs [{inputs}] at positions "
        f"{n - 1}–{last}. Their K/V are appended **provisionally**: target cache length "
        f"{before.seq_len} → **{after.seq_len}** ({_blocks(after)}). The logits give K+1 = {k + 1} "
        f"distributions p_1 … p_{k + 1}: p_i scores d_i, and p_{k + 1} is ready for a bonus token.{events}"
    )
    if tr.proposer == "feature":
        text += (
            f" The same pass hands the feature head the target's **real** features at positions {n - 1}–{last} "
            "(no second forward): those of the committed positions replace the head's guesses next cycle."
        )
    elif tr.proposer == "lookup":
        text += " Each q_i is one-hot, so min(1, p_i(d_i)/q_i(d_i)) is simply p_i(d_i)."
    return text


# ---- accept ---------------------------------------------------------------------------------


def _accept(tr: CycleTrace) -> str:
    if tr.k == 0:
        return (
            "**Nothing to test.** No drafts were proposed this cycle: no u is drawn, nothing is accepted or "
            "rejected. The next token comes straight from p_1."
        )
    greedy = tr.temperature == 0
    lines = [_test_line(d, greedy) for d in tr.drafts]
    if greedy:
        rule = "Greedy (T = 0): accept d_i iff it is the target's argmax. "
    elif tr.proposer == "lookup":
        rule = (
            "Draw u_i ~ U(0,1); q_i is one-hot (prompt lookup), so accept d_i iff u_i ≤ p_i(d_i): the target "
            "keeps a copied token exactly as often as it would have produced it. "
        )
    else:
        rule = "Draw u_i ~ U(0,1); accept d_i iff u_i ≤ min(1, p_i(d_i)/q_i(d_i)). "
    head = "**Acceptance, left to right.** " + rule + "The first rejection ends the streak."
    tail = f"\n\nResult: **{tr.num_accepted} of {tr.k} accepted**" + (
        f", first rejection at d{tr.rejected_at}." if tr.rejected_at else " — every draft passed."
    )
    return head + "\n\n" + "\n".join(lines) + tail


def _test_line(d: DraftStep, greedy: bool) -> str:
    if d.verdict == "untested":
        return f"- d{d.index} {_tok(d.text)}: **never tested** (an earlier draft was rejected)"
    if greedy:
        test = "equals argmax p" if d.verdict == "accepted" else "differs from argmax p"
        return f"- d{d.index} {_tok(d.text)}: {test} → **{d.verdict}**"
    if d.u is None:  # forced by what-if mode: no draw decided it
        test = "outcome forced"
    else:
        test = f"u = {fmt_p(d.u)} {'≤' if d.verdict == 'accepted' else '>'} {fmt_p(d.ratio)}"
    return (
        f"- d{d.index} {_tok(d.text)}: p = {fmt_p(d.target_prob)}, q = {fmt_p(d.draft_prob)}, "
        f"min(1, p/q) = {fmt_p(d.ratio)}; {test} → **{d.verdict}**{' (forced)' if d.forced else ''}"
    )


# ---- resolve --------------------------------------------------------------------------------
#
# Resolve and rollback quote the committed tokens, the cut and the dropped positions from the
# trace (`specviz.outcome`). The textbook counts (j, K+1, K−j+1) are taught next to them, and when
# the end of the text cut the cycle the text says so instead of repeating the formula.


def _resolve(tr: CycleTrace) -> str:
    out = cycle_outcome(tr)
    if tr.k == 0:
        text = _resolve_plain(tr, out)
    elif tr.rejected_at is not None:
        text = _resolve_rejection(tr, out)
    else:
        text = _resolve_bonus(tr, out)
    return text + _commit_line(tr, out) + _finish_at_resolve(out)


def _resolve_plain(tr: CycleTrace, out: CycleOutcome) -> str:
    g = out.final
    prob = _prob_of(g, tr.bonus_top)
    how = "argmax p_1 (greedy)" if tr.temperature == 0 else "a sample from p_1"
    return (
        f"**One generated token.** With no drafts there is neither a corrected nor a bonus token: "
        f"{_tok(g.text) if g else 'the token'} is {how}"
        + (f" (probability {fmt_p(prob)})" if prob is not None else "")
        + (f", placed at position {g.position}" if g else "")
        + " — exactly one step of plain autoregressive decoding."
    )


def _resolve_rejection(tr: CycleTrace, out: CycleOutcome) -> str:
    j = tr.rejected_at
    if tr.temperature == 0:
        how = f"argmax p_{j} (greedy)"
    elif tr.proposer == "lookup":
        how = (
            f"a sample from the residual norm(max(0, p_{j} − q_{j})) — with a one-hot q_{j} that is p_{j} "
            f"with d{j} removed, renormalised"
        )
    else:
        how = f"a sample from the residual norm(max(0, p_{j} − q_{j}))"
    c = out.final
    if c is None:  # drawn, then cut: the trace keeps the residual it came from, not the token
        return (
            f"**Corrected token — drawn, then discarded.** d{j} was rejected, so a corrected token was {how}; "
            f"**no bonus token** after a rejection. But {_cut_reason(tr, out)}, so the corrected token is "
            "thrown away."
        )
    prob = _prob_of(c, tr.residual_top)
    return (
        f"**Corrected token.** d{j} was rejected, so the corrected token {_tok(c.text)} is {how}"
        + (f" (residual probability {fmt_p(prob)})" if prob is not None else "")
        + f", placed at position {c.position}. **No bonus token** after a rejection."
    )


def _resolve_bonus(tr: CycleTrace, out: CycleOutcome) -> str:
    k = tr.k
    b = out.final
    if b is None:
        return (
            f"**Bonus token — drawn, then discarded.** All K = {k} drafts were accepted, so a bonus token was "
            f"{'taken as argmax' if tr.temperature == 0 else 'sampled from'} p_{k + 1}. But {_cut_reason(tr, out)}, so "
            + ("the bonus token and the accepted drafts after the cut are" if out.cut_drafts else "the bonus token is")
            + " thrown away."
        )
    prob = _prob_of(b, tr.bonus_top)
    return (
        f"**Bonus token.** All K = {k} drafts were accepted, so one extra token {_tok(b.text)} is "
        f"{'argmax' if tr.temperature == 0 else 'sampled from'} p_{k + 1}"
        + (f" (probability {fmt_p(prob)})" if prob is not None else "")
        + f", placed at position {b.position} — the verify pass computed p_{k + 1} for free."
    )


def _cut_reason(tr: CycleTrace, out: CycleOutcome) -> str:
    """Why the end of the text cut this cycle short, naming the recorded token and position."""
    last = out.last
    where = f"position {last.position}" if last else "this cycle"
    if out.finish_reason == "eos":
        who = next((f"d{d.index}" for d in tr.drafts if last and d.position == last.position), "the newest token")
        token = _tok(last.text) if last else ""
        return f"{who} {token} is the **end-of-text token** (at {where}) and nothing after it is kept"
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
    tokens = f"**{m}** token{'s' if m != 1 else ''}"
    listed = ", ".join(f"{_tok(e.text)} (position {e.position}, {e.kind})" for e in out.committed) or "nothing"
    if tr.k == 0:
        count = tokens
    else:
        if tr.rejected_at is not None:
            name, value, parts = "j", tr.rejected_at, f"{tr.rejected_at - 1} accepted + the corrected token"
        else:
            name, value, parts = "K+1", tr.k + 1, f"{tr.k} accepted + the bonus token"
        if out.cut:
            count = f"{tokens}, not {name} = {value}: the cut removed {out.cut} of the {out.drawn} produced"
        else:
            count = f"{name} = {tokens} ({parts})"
    return f" The cycle commits {count}: {listed}."


def _finish_at_resolve(out: CycleOutcome) -> str:
    """The finish reason, stated where it happens: the cut is made at resolve."""
    if not out.finish_reason:
        return ""
    last = out.last
    at = f" at position {last.position}" if last else ""
    return (
        f"\n\n**Generation finishes with this cycle:** {out.finish_reason} — {FINISH_WORDS[out.finish_reason]}"
        f"{at}. No further cycle will run."
    )


def _invariant_sentence(new_n: int, target_len: int) -> str:
    """The invariant, checked against the recorded length rather than asserted: a bookkeeping bug shows."""
    if target_len == new_n - 1:
        return (
            f"\n\nCommitted length is now n = {new_n}; the target cache holds n−1 = {target_len} positions — exactly "
            "what a plain autoregressive decoder would hold, so the next cycle computes the same p."
        )
    return (
        f"\n\nCommitted length is now n = {new_n}, but the target cache holds **{target_len}** positions, not "
        f"n−1 = {new_n - 1}: **the invariant is broken** — the next cycle would not compute plain decoding's p."
    )


def _finish_at_rollback(tr: CycleTrace) -> str:
    if not tr.finish_reason:
        return ""
    last = tr.emitted[-1] if tr.emitted else None
    at = f" at position {last.position}" if last else ""
    return f"\n\n**Generation finished:** {tr.finish_reason} — {FINISH_WORDS.get(tr.finish_reason, '')}{at}."


def _prob_of(token: EmittedToken | None, top: Sequence[TokenProb]) -> float | None:
    return next((tp.prob for tp in top if token is not None and tp.token_id == token.token_id), None)


# ---- rollback -------------------------------------------------------------------------------


def _rollback(tr: CycleTrace) -> str:
    before = tr.snapshot("resolve")
    after = tr.snapshot("rollback")
    new_n = tr.context_len + len(tr.emitted)
    t_ev = _events(tr.target_events, "rollback")
    cuts = dropped_entries(tr, tr.target_events, new_n)
    what = _target_drop(tr, cuts)
    mech = _rollback_mechanism(tr, after.target, bool(cuts))
    name = PROPOSER_NAMES.get(tr.proposer, "draft")
    return (
        f"**Rollback & commit.** The target cache goes {before.target.seq_len} → **{after.target.seq_len}**; it "
        f"{what}."
        + (f" {mech}" if mech else "")
        + (f" Target: {'; '.join(t_ev)}." if t_ev else "")
        + "\n\n"
        + _proposer_rollback(tr, before.draft, after.draft, after.target.seq_len)
        + _invariant_sentence(new_n, after.target.seq_len)
        + (
            " Invariant check (max |ΔK/V| vs a fresh prefill): "
            + precision.invariant_words(tr.invariant_max_abs_diff, tr.dtype, {"draft": name})
            + "."
            if tr.invariant_max_abs_diff
            else ""
        )
        + _finish_at_rollback(tr)
    )


_WHY_DROPPED = {
    "rejected": "rejected",
    "untested": "never tested",
    "cut": "accepted, then cut off by the end of the text",
    "newest": "committed, but now the newest token: its K/V is left for the next verify pass",
}


def _target_drop(tr: CycleTrace, cuts: Sequence[Truncation]) -> str:
    """What the target's rollback truncation removed, position by position, from its event."""
    if not cuts:
        if tr.k == 0:
            return "removes nothing: the one entry the plain step appended belongs to x_n, which is committed"
        return "removes nothing: every provisional entry belongs to a committed token"
    return "; ".join(_drop_sentence(cut, textbook=_textbook(tr, cut)) for cut in cuts)


def _drop_sentence(cut: Truncation, textbook: bool = False) -> str:
    """'drops the K/V of d3 … d5 (positions 46–48: **3** entries) — d3 rejected; d4, d5 never tested'."""
    names = [e.name for e in cut.entries]
    span = names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}"
    lo, hi = cut.length_to, cut.length_from - 1
    positions = f"position {lo}" if lo == hi else f"positions {lo}–{hi}"
    entries = f"**{cut.count}** entr{'y' if cut.count == 1 else 'ies'}" + (f", K−j+1 = {cut.count}" if textbook else "")
    return f"drops the K/V of {span} ({positions}: {entries}) — {_why(cut.entries)}"


def _textbook(tr: CycleTrace, cut: Truncation) -> bool:
    """True when the textbook count K−j+1 is what really happened (a rejection, nothing cut)."""
    return tr.rejected_at is not None and not tr.finish_reason and cut.count == tr.k - tr.rejected_at + 1


def _why(entries: Sequence[DroppedEntry]) -> str:
    """Group the dropped entries by reason: 'd3 rejected; d4, d5 never tested'."""
    groups: dict[str, list[str]] = {}
    for e in entries:
        groups.setdefault(e.reason, []).append(e.name)
    return "; ".join(f"{', '.join(names)} {_WHY_DROPPED[reason]}" for reason, names in groups.items())


def _rollback_mechanism(tr: CycleTrace, snap: CacheSnapshot, truncated: bool) -> str:
    """How this layout rolled back, with the blocks freed counted from the recorded events."""
    if tr.k == 0 and not truncated:
        return ""
    if snap.layout != "paged":
        return "Contiguous buffer: the write pointer rewinds; stale values stay in memory until overwritten."
    freed = freed_blocks(tr.target_events)
    if snap.policy == "keep":
        return (
            "Under policy **keep** (vLLM v1), blocks stay reserved (no block is freed) and the stale slots are "
            "simply overwritten next cycle."
        )
    returned = (
        f"{len(freed)} block{'s' if len(freed) != 1 else ''} {list(freed)} went back to the pool"
        if freed
        else "no block held only removed positions, so none went back to the pool"
    )
    return (
        f"Under policy **free**, blocks holding only removed positions go back to the pool: {returned}; the "
        "last partly filled block keeps stale slots past the new length."
    )


def _proposer_rollback(
    tr: CycleTrace, before: CacheSnapshot | None, after: CacheSnapshot | None, target_len: int
) -> str:
    """What the proposer's own cache did at rollback, from the recorded snapshots and events."""
    if before is None or after is None:
        return "Prompt lookup keeps no cache: only the target rolls back."
    d_ev = _events(tr.draft_events, "rollback")
    if tr.proposer == "feature":
        return _feature_rollback(tr, before, after, target_len, d_ev)
    cuts = dropped_entries(tr, tr.draft_events, tr.context_len + len(tr.emitted))
    lag = target_len - after.seq_len
    if lag > 0 and tr.k > 0:  # only after full acceptance with the bonus committed: d_K was sampled, not fed
        behind = f" — one short of the target, because d{tr.k} was never fed; it catches up next cycle."
    elif lag > 0:
        behind = f" — {lag} behind the target; it catches up next cycle."
    else:
        behind = "."
    return (
        f"The draft cache goes {before.seq_len} → **{after.seq_len}**"
        + (": it " + "; ".join(_drop_sentence(cut) for cut in cuts) if cuts else "")
        + behind
        + (f" Draft: {'; '.join(d_ev)}." if d_ev else "")
    )


def _feature_rollback(
    tr: CycleTrace, before: CacheSnapshot, after: CacheSnapshot, target_len: int, d_ev: list[str]
) -> str:
    """The lesson of the feature head: entries built from predicted features never survive."""
    lo, hi = before.num_committed, before.seq_len - 1  # entries built from the head's predicted features
    text = (
        f"The feature head's cache goes {before.seq_len} → **{after.seq_len}**: it keeps only the entries "
        "built from the target's real features."
    )
    if hi >= lo:
        # Entry p pairs a feature with the token at p+1: entry p was built for the draft at position p+1.
        # Only drafts that stayed committed count: one cut off by the end of the text is gone anyway.
        n_after = tr.context_len + len(tr.emitted)
        kept = [d for d in tr.drafts if d.verdict == "accepted" and d.position < n_after and lo <= d.position - 1 <= hi]
        one = lo == hi
        text += (
            f" {_entries(lo, hi).capitalize()} {'was' if one else 'were'} built from the head's own **predicted** "
            f"features and {'is' if one else 'are'} dropped"
        ) + (
            f" **even though** {', '.join(f'd{d.index}' for d in kept)} "
            f"{'was' if len(kept) == 1 else 'were'} accepted: a guessed feature is not the target's, and the "
            "verify pass has just produced the real ones."
            if kept
            else "."
        )
    else:
        text += " No entry rested on a predicted feature this cycle, so nothing of the head's is dropped."
    lag = target_len - after.seq_len
    text += (
        f" The head now lags the target cache by **{lag}** entr{'y' if lag == 1 else 'ies'} "
        f"(this cycle committed {len(tr.emitted)} token(s))"
        + (
            f": next cycle's catch-up feeds {_entries(after.seq_len, target_len - 1)} from real features."
            if lag > 0
            else "."
        )
    )
    return text + (f" Feature head: {'; '.join(d_ev)}." if d_ev else "")


# ---- statistics, explained --------------------------------------------------------------------


def explain_speedup(report: SpeedupReport) -> str:
    """Why the measured speedup differs from the textbook theory, one measured factor at a time.

    The textbook E / (K·c + 1) counts the verify pass as one plain step. `stats.pass_costs` measures
    every piece of a cycle in plain steps, so the theory can be re-evaluated with the real verify
    cost v(K), then with the bookkeeping the formula ignores, then with this run's own tokens per
    cycle — and that last number is exactly the measured speedup (see `specviz.stats`)."""
    theory, measured, costs = report.theoretical_speedup, report.measured_speedup, report.costs
    if costs is None or measured is None:
        return (
            "Run the **autoregressive baseline** below to measure a plain step of the target: the verify cost "
            "v(K) and the measured speedup are both counted in plain steps."
        )
    ms = costs.plain_ms_per_token
    parts = [
        f"**Measured {measured:.2f}× vs theory {theory:.2f}×.**" if theory else f"**Measured {measured:.2f}×.**",
        f"The textbook formula counts the verify pass over K+1 tokens as **one** plain step; here it took "
        f"**v(K) = {costs.verify:.2f}** plain steps ({costs.verify * ms:.1f} ms vs {ms:.1f} ms per plain token), "
        f"and the proposer's passes {costs.draft:.2f} steps per cycle.",
    ]
    if report.theory_with_pass_costs:
        parts.append(f"With these measured costs the formula predicts **{report.theory_with_pass_costs:.2f}×**.")
    extra = costs.bookkeeping + costs.check
    if report.theory_with_bookkeeping:
        check = f", plus {costs.check * ms:.1f} ms for the invariant check" if costs.check > 0.005 else ""
        parts.append(
            f"Each cycle also spent {costs.bookkeeping * ms:.1f} ms on bookkeeping the formula leaves out — the "
            f"acceptance tests, resolve, rollback and the snapshots these views draw{check} — "
            f"{extra:.2f} steps, which gives **{report.theory_with_bookkeeping:.2f}×**."
        )
    if report.tree_cycles:  # the formula models a chain of K drafts; a tree's figure is tokens per pass
        parts.append(
            f"This run drafted token trees ({report.tree_cycles} cycle(s)): the textbook formula models a chain, so "
            f"no theory is drawn. It committed **{report.measured_tokens_per_cycle:.2f} tokens per verify pass**, "
            f"at {costs.total:.2f} plain steps per cycle: that is the measured **{measured:.2f}×**."
        )
        return " ".join(parts)
    parts.append(
        f"Last, this run committed {report.measured_tokens_per_cycle:.2f} tokens per cycle where α = "
        f"{report.alpha:.2f} predicts {report.expected_tokens_per_cycle:.2f}: that is the measured "
        f"**{measured:.2f}×**."
    )
    return " ".join(parts)


# ---- the status line ----------------------------------------------------------------------------


def status_markdown(num_prompt: int, traces: Sequence[CycleTrace], cycle: int | None, phase: str, proposer: str) -> str:
    """The one line above the views: where we are, counted from the recorded traces.

    The finish reason is told only at the resolve and rollback phases of the cycle that ended the
    text — the cut happens at resolve — never from its draft phase on, which would give the outcome
    away. A forced (what-if) cycle says so here too."""
    before = num_prompt + sum(len(t.emitted) for t in traces[: (cycle or 0)])
    where = "before the first cycle" if cycle is None else f"cycle **{cycle + 1}** of {len(traces)}"
    line = (
        f"{where} · phase **{PHASE_TITLES.get(phase, phase)}** · {before} tokens committed before this cycle "
        f"({num_prompt} prompt) · proposer: {proposer}"
    )
    tr = traces[cycle] if cycle is not None and cycle < len(traces) else None
    if tr is not None and tr.forced:
        line += " · ⚠️ **what-if cycle** (forced, not in the statistics)"
    if tr is not None and tr.finish_reason and phase in ("resolve", "rollback"):
        last = tr.emitted[-1] if tr.emitted else None
        line += f" · **finished: {tr.finish_reason}**" + (f" at position {last.position}" if last else "")
    return line
