"""The jargon a student meets on the stage, explained where it stands: one table, marked up in place.

A student alone meets words the narrative and the cache headings use without stopping: K/V, logits,
x_n, block table, residual, U(0,1), catch-up, features, one-hot, "allocated · held · valid". Each has
one entry here (`TERMS`: the pattern it is found by, what it means in a sentence or two, in the terms
of docs/design.md §1). `explain` marks the first occurrence of each term in a fragment of HTML the
views built as an `<abbr>` with its explanation: a tooltip on hover (`title`), and on a tap or a
keyboard's Tab a small popover (it takes focus: `tabindex`; stage.css draws the popover from the
title, no script). Text inside `<code>` (a token's own text), `<abbr>`, `<a>`,
`<summary>`, `<mark>` or an attribute is never touched, and only text, never markup, is matched: the
fragment's markup is kept as it was built (escaped by its builder, viz/markup.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from .markup import attrs


@dataclass(frozen=True)
class Term:
    name: str  # the entry's name (tests, the glossary's list)
    pattern: str  # a regular expression over the fragment's (escaped) text
    meaning: str


TERMS: tuple[Term, ...] = (
    Term("K/V", r"\bK/V\b", "Keys and values: what each attention layer computes for a token and keeps in the "
         "KV cache, so the token is never read again. A cache slot holds one token's K/V."),
    Term("logits", r"\blogits\b", "The model's raw score for every token of its vocabulary at one position; "
         "softmax (after temperature, top-k and top-p) turns them into the distribution p or q."),
    Term("x_n", r"\bx_n\b", "The newest committed token. Its K/V are not in the target's cache yet: the verify "
         "pass computes them, as its first input."),
    Term("block table", r"\bblock[_ ]table\b", "A paged cache's map from the sequence's logical blocks (positions "
         "0-15, 16-31, ...) to the physical blocks of the pool that hold them."),
    Term("residual", r"\bresidual\b", "norm(max(0, p − q)): what the target's p has beyond the proposer's q, "
         "rescaled to sum to 1. After a rejection the corrected token is drawn from it, which keeps the output "
         "exactly the target's."),
    Term("U(0,1)", r"U\(0,\s?1\)", "A uniform random number between 0 and 1: draft d_i passes its test when "
         "u_i ≤ min(1, p_i(d_i) / q_i(d_i))."),
    Term("catch-up", r"\bcatch(?:es)?[- ]up\b", "The proposer feeding the committed tokens it has not seen yet "
         "(usually just x_n) before it drafts, so its own state covers the text so far."),
    Term("features", r"\bfeatures\b", "The target's hidden state at a position (its last layer's output before "
         "the output head): the feature head drafts from them instead of reading the text itself."),
    Term("one-hot", r"\bone-hot\b", "A distribution with all its probability on one token (q = 1 there, 0 "
         "elsewhere): greedy decoding (T = 0) and copying proposers draft this way."),
    Term("allocated · held · valid", r"\ballocated\b", "KV memory: allocated is the storage that exists, held "
         "what this sequence owns (stale slots included), valid the positions attention ever reads. "
         "allocated ≥ held ≥ valid."),
    Term("provisional", r"\bprovisional\b", "K/V written for drafts (or by the verify pass) that are not yet "
         "known to survive: the rollback keeps them if their drafts were accepted, else cuts them off."),
    Term("stale", r"\bstale\b", "Slots past the valid length after a rollback: still in memory, never read, "
         "overwritten by the next append."),
)

_SKIP = ("code", "abbr", "a", "summary", "mark", "kbd", "pre", "script", "style")
_TAG = re.compile(r"(<[^>]*>)")


@cache
def _patterns() -> tuple[tuple[Term, re.Pattern[str]], ...]:
    return tuple((t, re.compile(t.pattern)) for t in TERMS)


def explain(html: str) -> str:
    """`html` with the first occurrence of each term in its text marked as an explained `<abbr>`."""
    parts, found, skipping = _TAG.split(html), set(), []
    for i, part in enumerate(parts):
        if i % 2:  # a tag: track the elements whose text is not ours to mark
            name = re.match(r"</?\s*([a-zA-Z0-9]+)", part)
            tag = name.group(1).lower() if name else ""
            if tag in _SKIP and not part.endswith("/>"):
                if part.startswith("</"):
                    if skipping and skipping[-1] == tag:
                        skipping.pop()
                else:
                    skipping.append(tag)
            continue
        if not skipping and part.strip():
            parts[i] = _mark(part, found)
    return "".join(parts)


def _mark(text: str, found: set[str]) -> str:
    for term, pattern in _patterns():
        if term.name in found:
            continue
        m = pattern.search(text)
        if m is None:
            continue
        found.add(term.name)
        abbr = (f"<abbr{attrs(cls='svs-gloss', title=term.meaning, tabindex='0')}>"
                f"{m.group(0)}</abbr>")  # the matched text is the fragment's own, already escaped
        return _mark(text[: m.start()], found) + abbr + _mark(text[m.end():], found)
    return text
