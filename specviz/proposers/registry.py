"""The proposer table: one row per proposer, everything specviz says or decides about it.

A proposer's code is a `Proposer` class; everything else that names a proposer (the config, the
sidebar, the CLI, the narrative, the views, the runs list, the benchmarks) reads its row here, and
adding one is a class with `from_pair` plus one `register(ProposerEntry(...))` (docs/design.md §1b,
"The proposer table"). Torch-free on purpose: a row names its class as a "module:Class" string,
imported only when `make_proposer` builds one.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError


def cap(text: str) -> str:
    """`text` with its first letter upper-cased (a proposer's noun opening a sentence)."""
    return text[:1].upper() + text[1:]


@dataclass(frozen=True)
class Words:
    """How the narrative, the KV picture and the proposals panel speak of one proposer."""

    noun: str  # "draft model": "watch the draft model propose", "the draft model grows a token tree"
    short: str  # "draft": "**Draft proposes.**", "The draft first feeds …", "Draft: append …"
    cache: str = ""  # its cache in a sentence, "the draft cache" without "the" ("": it keeps none)
    no_cache: str = ""  # without a cache: why it needs none ("it only searches the committed token ids")
    drafts: str = ""  # without a cache: how it drafts a chain; placeholders {note} and {proposals}
    tree: str = ""  # without a cache: how it grows a token tree
    copies: str = ""  # without a cache: what it does instead, for the KV picture's stand-in
    idle: str = ""  # after a cycle where it proposed nothing: which prompts suit it ("" = say nothing)
    proposals: str = "top {n} of each q_i (K = {k}); the sampled token is outlined"  # the drafts panel's subtitle
    plain: str = ""  # for someone new to all of it (the guided start): what it is, without the jargon


@dataclass(frozen=True)
class ProposerEntry:
    """One proposer: its name and words, what it needs of a pair, and where its class lives."""

    name: str  # DecodeConfig.proposer, CycleTrace.proposer
    label: str  # the sidebar's option: "Draft model (a small LM)"
    description: str  # one line: "an independent small LM with its own KV cache"
    cli_help: str  # the CLI's words for it after "NAME = "
    cls: str  # "specviz.proposers.draft_model:DraftModelProposer", imported by `load`
    words: Words
    # The ModelPair field holding the weights it runs ("draft", "feature_head"; trained, or random for
    # demos), and the reason in a sentence when the pair lacks them. None: no weights, nothing to train.
    needs: str | None = None
    missing: str = ""
    # Its KV panel's title, and which token its cache entry p holds: x[p + cache_token_offset] (0 for a
    # draft model; 1 for a feature head, whose entry p pairs F[p] with x[p+1]). Both None: no cache.
    cache_title: str | None = None
    cache_token_offset: int | None = None
    one_hot: bool = False  # a deterministic proposal: each q_i is one-hot on d_i (p/q is just p)

    @property
    def has_cache(self) -> bool:
        return self.cache_token_offset is not None

    def unavailable(self, pair: Any) -> str | None:
        """None when `pair` can run this proposer, else why not, in a sentence."""
        return None if self.needs is None or getattr(pair, self.needs, None) is not None else self.missing

    def load(self) -> type:
        module, _, name = self.cls.partition(":")
        return getattr(importlib.import_module(module), name)


_TABLE: dict[str, ProposerEntry] = {}


def register(entry: ProposerEntry) -> None:
    if entry.name in _TABLE:
        raise ValueError(f"a proposer named {entry.name!r} is already registered")
    no_cache = entry.cache_title is None
    if no_cache != (entry.cache_token_offset is None) or no_cache != (entry.words.cache == ""):
        raise ValueError(f"proposer {entry.name!r}: a cache needs a title, an offset and words, or none of them")
    _TABLE[entry.name] = entry


def unregister(name: str) -> None:
    del _TABLE[name]


@contextmanager
def registered(entry: ProposerEntry) -> Iterator[ProposerEntry]:
    """`entry` in the table for the duration of a `with` block (a plug-in, a test)."""
    register(entry)
    try:
        yield entry
    finally:
        unregister(entry.name)


def names() -> tuple[str, ...]:
    return tuple(_TABLE)


def entries() -> tuple[ProposerEntry, ...]:
    return tuple(_TABLE.values())


def get(name: str) -> ProposerEntry:
    """The row of proposer `name`; ConfigError naming the known ones if there is none."""
    try:
        return _TABLE[name]
    except (KeyError, TypeError):
        raise ConfigError(f"proposer must be one of {names()}, got {name!r}") from None


def available(pair: Any) -> tuple[ProposerEntry, ...]:
    """The proposers `pair` can run, in table order."""
    return tuple(e for e in _TABLE.values() if e.unavailable(pair) is None)


def make_proposer(pair: Any, config: Any, max_context: int, vocab_size: int) -> Any:
    """The proposer `config.proposer` names, built for this pair (ConfigError if the pair lacks it)."""
    entry = get(config.proposer)
    if why := entry.unavailable(pair):
        raise ConfigError(f"proposer {entry.name!r} is unavailable: {why}")
    return entry.load().from_pair(pair, config, max_context, vocab_size)


register(ProposerEntry(
    name="draft",
    label="Draft model (a small LM)",
    description="an independent small LM with its own KV cache",
    cli_help="an independent small LM with its own KV cache",
    cls="specviz.proposers.draft_model:DraftModelProposer",
    words=Words(noun="draft model", short="draft", cache="draft cache",
                proposals="top {n} of each q_i (K = {k}); the sampled token is outlined — a sample, not the argmax",
                plain="a much smaller language model, the draft model"),
    needs="draft", missing="this pair has no draft model",
    cache_title="Draft model cache", cache_token_offset=0,
))  # fmt: skip
register(ProposerEntry(
    name="feature",
    label="Feature head (EAGLE-style)",
    description="an EAGLE-style head on the target's hidden states",
    cli_help="an EAGLE-style feature head on the target's hidden states (a pair with --feature-head, or the default)",
    cls="specviz.proposers.feature:FeatureProposer",
    words=Words(noun="feature head", short="feature head", cache="feature head's cache",
                proposals="top {n} of each q_i from the feature head (K = {k}); the sampled token is outlined",
                plain="a small add-on network that guesses from what the target computed inside for the text so "
                      "far, called a feature head"),
    needs="feature_head",
    missing="this pair carries no feature head, an EAGLE-style head (`load_pair(..., feature_head=PATH_OR_HEAD)` "
            "attaches one; `FeatureHead.random(target)` makes an untrained one)",
    cache_title="Feature head cache (1 layer: pairs of target feature + next token)", cache_token_offset=1,
))  # fmt: skip
register(ProposerEntry(
    name="lookup",
    label="Prompt lookup (n-gram copy)",
    description="prompt lookup: copy what followed an earlier n-gram",
    cli_help="prompt lookup: copy what followed an earlier n-gram (no model, no cache)",
    cls="specviz.proposers.lookup:LookupProposer",
    words=Words(
        noun="prompt lookup", short="prompt lookup", no_cache="it only searches the committed token ids",
        drafts="No model runs and no cache is written. {note} A copy is deterministic, so each q_i is **one-hot** "
               "(q = 1 on the copied token): {proposals}.",
        tree="It merges the continuations that followed earlier occurrences of the last n-gram into a **trie**; a "
             "node's q is its share of those continuations. No model runs, no cache is written.",
        copies="it copies what followed an earlier match of the last n-gram",
        idle=" Prompt lookup only guesses when the text repeats what came before; it suits prompts that copy, like "
             "the examples “Repeat this list, changing only the last item: …” or “Rewrite this paragraph replacing "
             "‘cat’ with ‘dog’: …” (Example prompts, in the sidebar).",
        proposals="prompt lookup copies tokens from the context (K = {k}): each q_i is one-hot, q = 1 on d_i",
        plain="no model at all: it copies what followed the same words earlier in the text (prompt lookup)",
    ),
    one_hot=True,
))  # fmt: skip
register(ProposerEntry(
    name="retrieval",
    label="Retrieval (text the target wrote before)",
    description="retrieval: copy what followed the context's suffix in the target's earlier answers",
    cli_help="retrieval (REST / SuffixDecoding): copy what followed the context's longest suffix in a datastore of "
             "the target's own answers and in this session's earlier texts (no model, no cache)",
    cls="specviz.proposers.retrieval:RetrievalProposer",
    words=Words(
        noun="retrieval", short="retrieval",
        no_cache="it only searches a datastore of the target's earlier answers and this session's texts",
        drafts="No model runs and no cache is written: the guesses come from text the target wrote before. {note} "
               "A lookup is deterministic, so each q_i is **one-hot** (q = 1 on the retrieved token): {proposals}. "
               "Exactness never depends on where guesses come from: the target's test decides.",
        tree="It merges the continuations that followed the context's longest suffix, in a datastore of the "
             "target's earlier answers and in this session's texts, into a **trie**; a node's score is its share of "
             "those continuations. No model runs, no cache is written.",
        copies="it copies what followed the context's suffix in text the target wrote before",
        idle=" Retrieval guesses only where the text repeats what the target wrote before; as a session goes on "
             "and answers repeat their phrases, its drafts get better.",
        proposals="retrieval copies tokens from earlier text (K = {k}): each q_i is one-hot, q = 1 on d_i",
        plain="no model at all: it copies what followed the same words in answers the target wrote before "
              "(retrieval)",
    ),
    one_hot=True,
))  # fmt: skip
register(ProposerEntry(
    name="feature+retrieval",
    label="Feature head + retrieval (merged tree)",
    description="the feature head's tree with retrieval's branches merged in",
    cli_help="the feature head's token tree with retrieval's branches merged in (width 1: the better chain of "
             "the two, chosen before drafting)",
    cls="specviz.proposers.retrieval:RetrievalFeatureProposer",
    words=Words(noun="feature head with retrieval", short="feature head + retrieval", cache="feature head's cache",
                proposals="top {n} of each q_i (K = {k}); feature-head drafts are sampled, retrieved ones one-hot",
                plain="a small add-on network that guesses from what the target computed inside (a feature head), "
                      "together with copies from answers the target wrote before"),
    needs="feature_head",
    missing="this pair carries no feature head, which the merged tree grows from",
    cache_title="Feature head cache (1 layer: pairs of target feature + next token)", cache_token_offset=1,
))  # fmt: skip
register(ProposerEntry(
    name="feature+lookup",
    label="Feature head + prompt lookup (copy, else guess)",
    description="prompt lookup where the context's last tokens occur earlier, the feature head elsewhere",
    cli_help="prompt lookup's copy where the context's last 2+ tokens occur earlier, the feature head's drafts "
             "elsewhere (a tree: lookup's trie merged into the head's)",
    cls="specviz.proposers.feature_lookup:FeatureLookupProposer",
    words=Words(noun="feature head with prompt lookup", short="feature head + lookup", cache="feature head's cache",
                proposals="top {n} of each q_i (K = {k}); the head's drafts are sampled, copied ones one-hot",
                plain="a small add-on network that guesses from what the target computed inside (a feature head), "
                      "except where the text repeats itself: there it copies what followed the same words earlier"),
    needs="feature_head",
    missing="this pair carries no feature head, which drafts wherever nothing is copied",
    cache_title="Feature head cache (1 layer: pairs of target feature + next token)", cache_token_offset=1,
))  # fmt: skip
