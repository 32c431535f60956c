"""Proposers: who guesses the K draft tokens (docs/design.md §1b). See `base.py` for the interface.

    draft    an independent small LM with its own KV cache      (draft_model.py)
    feature  an EAGLE-style head on the target's hidden states   (feature.py)
    lookup   prompt lookup: copy what followed an earlier n-gram (lookup.py)
"""

from __future__ import annotations

from typing import Any

from ..config import PROPOSERS, DecodeConfig
from ..errors import ConfigError
from ..runtime import model_device
from .base import Drafts, Proposer, TreeDrafts
from .draft_model import DraftModelProposer
from .feature import FeatureProposer
from .lookup import LookupProposer, find_continuation, find_continuations

__all__ = [
    "PROPOSERS",
    "DraftModelProposer",
    "Drafts",
    "FeatureProposer",
    "LookupProposer",
    "PROPOSER_CLASSES",
    "Proposer",
    "TreeDrafts",
    "find_continuation",
    "find_continuations",
    "make_proposer",
]

# name -> class, for what can be known of a proposer without building it (e.g. its cache_token_offset)
PROPOSER_CLASSES: dict[str, type[Proposer]] = {
    cls.name: cls for cls in (DraftModelProposer, FeatureProposer, LookupProposer)
}


def make_proposer(pair: Any, config: DecodeConfig, max_context: int, vocab_size: int) -> Proposer:
    """The proposer `config.proposer` names, for this pair (a clear error if the pair lacks it)."""
    name = config.proposer
    if name == "draft":
        if getattr(pair, "draft", None) is None:
            raise ConfigError("proposer 'draft' needs a draft model, and this pair has none")
        return DraftModelProposer(pair.draft, config, max_context)
    if name == "feature":
        head = getattr(pair, "feature_head", None)
        if head is None:
            raise ConfigError(
                "proposer 'feature' needs a feature head: load the pair with "
                "load_pair(..., feature_head=PATH_OR_HEAD) or use FeatureHead.random(target)"
            )
        return FeatureProposer(head, pair.target, config, max_context)
    if name == "lookup":
        return LookupProposer(vocab_size, model_device(pair.target), config.lookup_max_ngram, config.lookup_min_ngram)
    raise ConfigError(f"proposer must be one of {PROPOSERS}, got {name!r}")
