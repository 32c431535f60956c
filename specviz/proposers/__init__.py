"""Proposers: who guesses the K draft tokens (docs/design.md §1b). See `base.py` for the interface.

One module per proposer (a draft model, a feature head, prompt lookup, retrieval), each with one
row in the torch-free proposer table (`registry.py`). The torch modules below are imported lazily,
on first use of a name, so torch-free modules (the config, the views) can read the table.
"""

from __future__ import annotations

import importlib
from typing import Any

from .registry import ProposerEntry, Words, available, entries, get, make_proposer, names, register, registered

_LAZY = {
    "Proposer": "base", "Drafts": "base", "TreeDrafts": "base",
    "DraftModelProposer": "draft_model", "FeatureProposer": "feature",
    "LookupProposer": "lookup", "find_continuation": "lookup", "find_continuations": "lookup",
}  # fmt: skip

__all__ = [*_LAZY, "ProposerEntry", "Words", "available", "entries", "get", "make_proposer",
           "names", "register", "registered"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
