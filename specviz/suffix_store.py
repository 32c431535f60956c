"""Text the target wrote before, searchable by suffix: the retrieval proposer's memory.

Retrieval drafting (REST, He et al. 2023; SuffixDecoding, Oliaro et al. 2024) needs no model of
its own. It takes the longest suffix of the current context that also occurs in a store of text,
and proposes what followed it there; several occurrences give several continuations, counted, so
the most frequent comes first (a chain) or the few most frequent become branches (a tree).

Two stores, one interface (`longest_match`, `continuations`):

* **`SuffixStore`** -- a fixed datastore (the target's own answers, `assets/retrieval/`): the
  token ids as one array and its *suffix array* (the start of every suffix, in lexicographic
  order of the suffixes), so every occurrence of a pattern is one contiguous range found by
  binary search. Ids are kept as big-endian uint16 bytes, so comparing byte strings compares
  token sequences (memcmp order is numeric order). Built once by prefix doubling.
* **`SessionStore`** -- SuffixDecoding's growing store: the texts one session has produced so far,
  searched directly (it is small and changes every run). Bounded: past `max_tokens` the oldest
  texts are dropped. One per session, never shared: one student's text is never another's draft.

Deterministic: the same store and context give the same matches, in the same order.
"""

from __future__ import annotations

import bisect
import functools
import os
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAX_ID = 2**16 - 1  # uint16 ids: the default pair's vocabulary (49,152) fits
SHIPPED = Path(__file__).resolve().parent.parent / "assets" / "retrieval" / "store.npz"


@dataclass(frozen=True)
class Match:
    """Where the context's longest matched suffix occurs, and what followed it there."""

    length: int  # tokens of the context's suffix that matched (0: no match)
    occurrences: int  # how many times it occurs
    continuations: tuple[tuple[tuple[int, ...], int], ...]  # (tokens that followed, how often), most often first
    source: str  # "datastore" or "session"
    example: int = -1  # the first occurrence's start in its store (for the drafts panel)
    # The source text around that occurrence (the drafts panel shows it): up to AROUND tokens before the
    # matched suffix, and up to AROUND after it (what followed there, which the drafts copy).
    before: tuple[int, ...] = ()
    after: tuple[int, ...] = ()


AROUND = 8  # tokens of source text kept on either side of the first occurrence


def _ids(tokens: np.ndarray) -> tuple[int, ...]:
    return tuple(int(t) for t in tokens)


def suffix_array(tokens: np.ndarray) -> np.ndarray:
    """The suffix array of `tokens` [N] by prefix doubling (ranks of 2^k-token prefixes), int32."""
    n = len(tokens)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    rank = tokens.astype(np.int64)
    step = 1
    while True:
        second = np.full(n, -1, dtype=np.int64)
        if step < n:
            second[: n - step] = rank[step:]
        order = np.lexsort((second, rank))
        r, s = rank[order], second[order]
        new = np.empty(n, dtype=np.int64)
        new[order] = np.concatenate([[0], np.cumsum((r[1:] != r[:-1]) | (s[1:] != s[:-1]))])
        rank = new
        if rank.max() == n - 1 or step >= n:
            return order.astype(np.int32)
        step *= 2


def _count(paths: list[tuple[int, ...]], limit: int) -> tuple[tuple[tuple[int, ...], int], ...]:
    """Identical continuations merged and counted, the most frequent first (ties: first seen)."""
    return tuple(sorted(Counter(p for p in paths if p).items(), key=lambda kv: -kv[1])[:limit])


class SuffixStore:
    """A fixed token datastore with its suffix array."""

    def __init__(self, tokens: np.ndarray, suffixes: np.ndarray | None = None) -> None:
        tokens = np.asarray(tokens)
        if tokens.size and (tokens.min() < 0 or tokens.max() > MAX_ID):
            raise ValueError(f"a datastore holds token ids 0..{MAX_ID}")
        self.tokens = tokens.astype(np.uint16)
        self.suffixes = suffix_array(self.tokens) if suffixes is None else np.asarray(suffixes, dtype=np.int32)
        if len(self.suffixes) != len(self.tokens):
            raise ValueError("a suffix array needs one entry per token")
        self._bytes = self.tokens.astype(">u2").tobytes()

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def load(cls, path: str | Path) -> SuffixStore:
        with np.load(path) as data:
            return cls(data["tokens"], data["suffixes"])

    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, tokens=self.tokens, suffixes=self.suffixes)

    def _range(self, pattern: Sequence[int]) -> tuple[int, int]:
        """[lo, hi) of the suffix array whose suffixes start with `pattern` (two binary searches)."""
        key = np.asarray(pattern, dtype=">u2").tobytes()
        m, data, sa = len(key), self._bytes, self.suffixes

        def head(i: int) -> bytes:  # the first len(pattern) tokens of suffix i (fewer near the end)
            return data[2 * int(sa[i]) : 2 * int(sa[i]) + m]

        first = bisect.bisect_left(range(len(sa)), key, key=head)  # first suffix >= pattern
        return first, bisect.bisect_right(range(len(sa)), key, lo=first, key=head)  # first not starting with it

    def longest_match(self, context: Sequence[int], max_len: int = 16, min_len: int = 1) -> tuple[int, int, int]:
        """(length, lo, hi): the longest suffix of `context` (min_len..max_len tokens) that occurs
        in the store, and its suffix-array range; (0, 0, 0) if none. Longer suffixes occur only where shorter
        ones do, so the length is found by binary search."""
        if any(t < 0 or t > MAX_ID for t in context[-max_len:]):
            return 0, 0, 0
        best = (0, 0, 0)
        lo_len, hi_len = min_len, min(max_len, len(context))
        while lo_len <= hi_len:
            m = (lo_len + hi_len) // 2
            lo, hi = self._range(context[-m:])
            if hi > lo:
                best, lo_len = (m, lo, hi), m + 1
            else:
                hi_len = m - 1
        return best

    def continuations(self, context: Sequence[int], depth: int, max_len: int = 16, min_len: int = 1,
                      max_occurrences: int = 256, limit: int = 64) -> Match:
        """What followed the context's longest matched suffix, counted over up to `max_occurrences`
        occurrences (evenly spread over the range, so the counts stay representative)."""
        length, lo, hi = self.longest_match(context, max_len, min_len)
        if not length:
            return Match(0, 0, (), "datastore")
        picks = np.linspace(lo, hi - 1, num=min(hi - lo, max_occurrences)).astype(np.int64)
        starts = np.unique(self.suffixes[picks].astype(np.int64) + length)
        paths = [tuple(int(t) for t in self.tokens[s : s + depth]) for s in starts]
        first = int(self.suffixes[lo])
        return Match(length, hi - lo, _count(paths, limit), "datastore", first,
                     _ids(self.tokens[max(0, first - AROUND) : first]),
                     _ids(self.tokens[first + length : first + length + AROUND]))


class SessionStore:
    """The texts one session produced, newest last; bounded by `max_tokens` (oldest dropped). Kept as
    int32 arrays (80 KB at the bound): small enough that parking an idle session keeps them, so a
    resumed retrieval run proposes exactly what the uninterrupted one would."""

    def __init__(self, max_tokens: int = 20_000) -> None:
        self.max_tokens = max_tokens
        self.texts: list[np.ndarray] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return sum(len(t) for t in self.texts)

    def add(self, tokens: Sequence[int]) -> None:
        """Remember a finished (or abandoned) text of this session."""
        if len(tokens) < 2:
            return
        with self._lock:
            self.texts.append(np.asarray(list(tokens)[-self.max_tokens :], dtype=np.int32))
            while len(self) > self.max_tokens:
                self.texts.pop(0)

    def clear(self) -> None:
        with self._lock:
            self.texts.clear()

    def continuations(self, context: Sequence[int], depth: int, max_len: int = 16, min_len: int = 1,
                      limit: int = 64) -> Match:
        """As `SuffixStore.continuations`, over this session's earlier texts."""
        with self._lock:
            texts = [t.astype(np.int64) for t in self.texts]
        for m in range(min(max_len, len(context)), min_len - 1, -1):
            pattern = np.asarray(context[-m:], dtype=np.int64)
            paths, first, around = [], -1, ((), ())
            offset = 0
            for text in texts:
                if len(text) > m:
                    windows = np.lib.stride_tricks.sliding_window_view(text[:-1], m)
                    for s in np.flatnonzero((windows == pattern).all(axis=1)):
                        paths.append(tuple(int(t) for t in text[s + m : s + m + depth]))
                        if first < 0:
                            first = offset + int(s)
                            around = (_ids(text[max(0, s - AROUND) : s]), _ids(text[s + m : s + m + AROUND]))
                offset += len(text)
            if paths:
                return Match(m, len(paths), _count(paths, limit), "session", first, *around)
        return Match(0, 0, (), "session")


@functools.cache
def default_store() -> SuffixStore | None:
    """The datastore shipped for the default pair (``$SPECVIZ_RETRIEVAL_STORE`` overrides; None if absent)."""
    path = Path(os.environ.get("SPECVIZ_RETRIEVAL_STORE", SHIPPED))
    return SuffixStore.load(path) if path.is_file() else None
