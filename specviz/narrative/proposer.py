"""The proposer's own sentences: what its cache holds and does in each phase (docs/design.md §1b).

Everything else reads the same for every proposer. The story is chosen by what the cache holds
(the proposer table's `cache_token_offset`) and told in the proposer's words from the table: a
draft model's **tokens**, a feature head's **feature pairs** (entries built from predicted features
are always dropped at rollback, even for accepted drafts), or **no cache** (prompt lookup).
"""

from __future__ import annotations

from ..errors import ConfigError
from ..outcome import dropped_entries
from ..proposers import registry
from ..proposers.registry import cap
from ..trace import CycleTrace
from .text import drop_sentence, entries, events_sentence, note, proposals, tok


class NoCache:
    """A proposer that keeps no cache: nothing is written, nothing is rolled back."""

    def __init__(self, entry: registry.ProposerEntry) -> None:
        self.w = entry.words

    def prefill(self, target_len: int, draft_len: int | None) -> str:
        return f"The target processed x_1 … x_(n−1): its cache holds **{target_len}** positions. " + self.start(None)

    def start(self, tr: CycleTrace | None) -> str:
        return f"{cap(self.w.noun)} keeps **no cache**: {self.w.no_cache}."

    def draft(self, tr: CycleTrace) -> str:
        return f"**{cap(self.w.short)} proposes.** " + self.w.drafts.format(note=note(tr), proposals=proposals(tr))

    def tree_how(self, tr: CycleTrace) -> str:
        return self.w.tree

    def verify(self, tr: CycleTrace) -> str:
        return ""

    def rollback(self, tr: CycleTrace, target_len: int) -> str:
        return f"{cap(self.w.noun)} keeps no cache: only the target rolls back."

    tree_rollback = rollback


class TokenCache(NoCache):
    """A draft model: its cache entry p holds token x[p], in the target's own layout."""

    def prefill(self, target_len: int, draft_len: int | None) -> str:
        return (f"Both models processed x_1 … x_(n−1): the target cache holds **{target_len}** positions and the "
                f"{self.w.cache} **{draft_len}**.")

    def start(self, tr: CycleTrace) -> str:
        held = tr.snapshot("start").draft.seq_len
        lag = tr.context_len - 1 - held
        return f"The {self.w.cache} has length **{held}**" + (
            f", {lag} behind the target: it must catch up first." if lag > 0 else ".")

    def draft(self, tr: CycleTrace) -> str:
        n, k, short, m = tr.context_len, tr.k, self.w.short, len(tr.catch_up)
        fed = ", ".join(tok(t.text) for t in tr.catch_up) or "nothing"
        # What it guessed comes first (a newcomer's question); how its cache caught up, after.
        return (f"**{cap(short)} proposes.** It guesses the next K = {k} tokens, each sampled from its own processed "
                f"distribution q_i and fed back to get the next: {proposals(tr)}. Before guessing, the {short} fed its "
                f"catch-up token{'s' if m != 1 else ''} {fed} ({m}; two only after a fully accepted cycle). d{k} is "
                f"sampled but **never fed**, so the {self.w.cache} ends at length n+K−1 = {n + k - 1} (recorded: "
                f"**{tr.snapshot('draft').draft.seq_len}**); the {short}'s new entries are provisional.")

    def tree_how(self, tr: CycleTrace) -> str:
        w, fed = tr.tree.width, len(tr.tree.proposer_fed)
        return (f"After the catch-up ({len(tr.catch_up)} token(s)), the root's top {w} tokens are depth 1; then, one "
                f"forward per depth, the {w} best nodes of the newest depth (by cumulative log-probability) are fed "
                f"together — {fed} fed in all, past its prefix, under its own tree mask — and each one's top {w} "
                f"tokens become the next depth. The best {tr.tree.budget} candidates are kept, each with its "
                f"ancestors. Its cache now holds **{tr.snapshot('draft').draft.seq_len}** entries.")

    def rollback(self, tr: CycleTrace, target_len: int) -> str:
        before, after = tr.snapshot("resolve").draft, tr.snapshot("rollback").draft
        cuts = dropped_entries(tr, tr.draft_events, tr.context_len + len(tr.emitted))
        lag = target_len - after.seq_len
        if lag > 0 and tr.k > 0:  # only after full acceptance with the bonus committed: d_K was sampled, not fed
            behind = f" — one short of the target, because d{tr.k} was never fed; it catches up next cycle."
        else:
            behind = f" — {lag} behind the target; it catches up next cycle." if lag > 0 else "."
        return (f"The {self.w.cache} goes {before.seq_len} → **{after.seq_len}**"
                + (": it " + "; ".join(drop_sentence(cut) for cut in cuts) if cuts else "") + behind
                + events_sentence(cap(self.w.short), tr.draft_events, "rollback"))

    def tree_rollback(self, tr: CycleTrace, target_len: int) -> str:
        before, after = tr.snapshot("resolve").draft, tr.snapshot("rollback").draft
        return (f"The {self.w.cache} goes {before.seq_len} → **{after.seq_len}**: the entries it fed while growing "
                "the tree rest on guesses on a branching path, so it is cut back to its committed prefix and re-fed "
                "the accepted tokens next cycle.")


class FeaturePairs(TokenCache):
    """An EAGLE-style head: entry p pairs the target's feature F[p] with the token x[p+1]."""

    def prefill(self, target_len: int, draft_len: int | None) -> str:
        return (f"The target processed x_1 … x_(n−1): its cache holds **{target_len}** positions, and the same pass "
                f"gave the target's features at those positions. The {self.w.noun}'s one-layer cache holds "
                f"**{draft_len}** entries, each a pair (target feature at position p, token at position p+1), all "
                "built from real features; the pair that yields q_1 is fed by the first cycle's catch-up.")

    def start(self, tr: CycleTrace) -> str:
        snap = tr.snapshot("start")
        lacking = snap.target.seq_len - snap.draft.seq_len  # real features exist for every target position
        lacks = f"the head lacks {lacking} pair(s) and catches up on them first." if lacking > 0 else "it lacks none."
        return (f"The {self.w.cache} holds **{snap.draft.seq_len}** entries (pairs of the target's feature at "
                f"position p and the token at p+1, all from real features); the target has real features for "
                f"{snap.target.seq_len} positions, so {lacks}")

    def draft(self, tr: CycleTrace) -> str:
        k, before, head = tr.k, tr.snapshot("start").draft, tr.snapshot("draft").draft
        real, total = head.num_committed, head.seq_len
        pairs = ", ".join(f"the feature at {t.position - 1} with {tok(t.text)} at {t.position}" for t in tr.catch_up)
        # What it guessed comes first (a newcomer's question); how the head caught up and fed itself, after.
        text = (f"**{cap(self.w.short)} proposes.** It guesses the next K = {k} tokens, each sampled from its "
                f"distribution q_i: {proposals(tr)}. How: first a catch-up, the head is fed {len(tr.catch_up)} pair(s) "
                f"built from the target's **real** features ({pairs}), the entries its cache lacked; the output of the "
                "last one gives q_1, from which d1 is sampled.")
        if total > real:
            text += (f" Then d2 … d{k} come from feeding the head its **own predicted** feature together with the "
                     f"previous draft: {entries(real, total - 1)} rest on a guess, not on the target, so they are "
                     "provisional — **even if their drafts are accepted** they are dropped at rollback.")
        return text + (f" d{k} is sampled but never fed. Head cache {before.seq_len} → **{total}** entries ({real} "
                       f"from real features + {total - real} from predicted features).")

    def verify(self, tr: CycleTrace) -> str:
        return (f" The same pass hands the {self.w.noun} the target's **real** features at positions "
                f"{tr.context_len - 1}–{tr.drafts[-1].position} (no second forward): those of the committed "
                "positions replace the head's guesses next cycle.")

    def rollback(self, tr: CycleTrace, target_len: int) -> str:
        """The lesson of the feature head: entries built from predicted features never survive."""
        before, after = tr.snapshot("resolve").draft, tr.snapshot("rollback").draft
        lo, hi = before.num_committed, before.seq_len - 1  # entries built from the head's predicted features
        text = (f"The {self.w.cache} goes {before.seq_len} → **{after.seq_len}**: it keeps only the entries built "
                "from the target's real features.")
        if hi >= lo:
            # Entry p pairs a feature with the token at p+1: entry p was built for the draft at position p+1.
            # Only drafts that stayed committed count: one cut off by the end of the text is gone anyway.
            n_after = tr.context_len + len(tr.emitted)
            kept = [d for d in tr.drafts
                    if d.verdict == "accepted" and d.position < n_after and lo <= d.position - 1 <= hi]
            one = lo == hi
            text += (f" {cap(entries(lo, hi))} {'was' if one else 'were'} built from the head's own **predicted** "
                     f"features and {'is' if one else 'are'} dropped") + (
                f" **even though** {', '.join(f'd{d.index}' for d in kept)} {'was' if len(kept) == 1 else 'were'} "
                "accepted: a guessed feature is not the target's, and the verify pass has just produced the real ones."
                if kept else ".")
        else:
            text += " No entry rested on a predicted feature this cycle, so nothing of the head's is dropped."
        lag = target_len - after.seq_len
        text += (f" The head now lags the target cache by **{lag}** entr{'y' if lag == 1 else 'ies'} (this cycle "
                 f"committed {len(tr.emitted)} token(s))" + (
                     f": next cycle's catch-up feeds {entries(after.seq_len, target_len - 1)} from real features."
                     if lag > 0 else "."))
        return text + events_sentence(cap(self.w.short), tr.draft_events, "rollback")


STORIES = {None: NoCache, 0: TokenCache, 1: FeaturePairs}  # by the table's cache_token_offset


def story(proposer: str) -> NoCache:
    """The narrative of `proposer`'s cache, in its words (ConfigError for a proposer not in the table)."""
    entry = registry.get(proposer)
    if entry.cache_token_offset not in STORIES:
        raise ConfigError(f"the narrative knows no cache whose entry p holds x[p+{entry.cache_token_offset}]")
    return STORIES[entry.cache_token_offset](entry)
