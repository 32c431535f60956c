"""Configuration of a speculative decoding run, as a frozen, validated dataclass (docs/design.md §4).

To change a live field (`LIVE_FIELDS`: K, the tree shape, sampling, forcing, ...) between cycles,
hand `cfg.replace(k=8)` to `SpeculativeDecoder.update_config`; the other fields shape the caches or
the random streams, so changing them needs `start()`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, get_args

from .errors import ConfigError
from .proposers import registry

MAX_K = 64  # a draft longer than this is never useful and only wastes memory
MAX_TREE_WIDTH = 16  # children kept per expanded node of a token tree
MAX_TREE_NODES = 128  # draft nodes one tree verify may hold (EAGLE-2 uses 60 on a GPU)

# Each set of allowed values is defined once, as a type; the CLI, the app and the caches use the tuples.
CacheLayout = Literal["paged", "contiguous"]
FreePolicy = Literal["free", "keep"]  # paged rollback: free blocks, or keep them reserved (vLLM v1)
LAYOUTS: tuple[str, ...] = get_args(CacheLayout)
POLICIES: tuple[str, ...] = get_args(FreePolicy)

# Fields that may change between cycles without restarting the decoder.
LIVE_FIELDS = frozenset(
    {"k", "tree_width", "tree_nodes", "temperature", "top_k", "top_p", "draft_confidence", "forced_outcomes",
     "check_invariant", "max_new_tokens", "top_n", "instrument"}
)


@dataclass(frozen=True)
class DecodeConfig:
    k: int = 5  # draft length K (for a token tree: its depth)
    # Token trees (docs/design.md §1c): children kept per expanded node. 1 = a chain, drafted and
    # verified exactly as without trees; > 1 = an EAGLE-2-style tree of depth k.
    tree_width: int = 1
    tree_nodes: int = 16  # a tree's node budget: the most draft nodes one verify pass holds (width > 1 only)
    proposer: str = "draft"  # who guesses the drafts: a name in the proposer table (specviz.proposers.registry)
    lookup_max_ngram: int = 3  # prompt lookup: longest suffix n-gram matched first
    lookup_min_ngram: int = 1  # ... and the shortest tried before giving up
    # Adaptive K (HF's assistant_confidence_threshold): stop drafting once the proposer's most
    # likely next token has probability below this. 0 = off (always K drafts). Exact either way:
    # how many drafts are proposed depends only on the proposer, never on the target.
    draft_confidence: float = 0.0
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int = 0
    cache_layout: CacheLayout = "paged"
    page_size: int = 16
    free_policy: FreePolicy = "free"
    # Paged pool cap per model (a hard limit: the "pool exhausted" lesson); None = enough for max_context.
    # Either way the pool starts at what the run can reach and grows on demand up to the cap.
    num_blocks: int | None = None
    max_context: int = 2048  # most positions a sequence may hold (capped by the model's own maximum)
    max_new_tokens: int = 256
    check_invariant: bool = False  # compare caches with a fresh prefill after every cycle
    top_n: int = 8  # how many alternatives the trace keeps per distribution
    # Record snapshots, top-N lists and token texts in each trace. Off = the lean path that the
    # benchmarks time against instrumentation on; decoding is identical either way.
    instrument: bool = True
    # What-if mode: (draft index i (1-based), accept?) pairs that override the acceptance test.
    # Breaks exactness; only for teaching. Empty = off.
    forced_outcomes: tuple[tuple[int, bool], ...] = ()

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError with a clear message for any out-of-range value."""
        if not isinstance(self.k, int) or isinstance(self.k, bool) or not 1 <= self.k <= MAX_K:
            raise ConfigError(f"K (draft length) must be an integer in 1..{MAX_K}, got {self.k!r}")
        if not _int(self.tree_width) or not 1 <= self.tree_width <= MAX_TREE_WIDTH:
            raise ConfigError(
                f"tree_width must be an integer in 1..{MAX_TREE_WIDTH} (1 = a chain), got {self.tree_width!r}"
            )
        if not _int(self.tree_nodes) or not 1 <= self.tree_nodes <= MAX_TREE_NODES:
            raise ConfigError(
                f"tree_nodes (the tree's node budget) must be an integer in 1..{MAX_TREE_NODES}, "
                f"got {self.tree_nodes!r}"
            )
        if self.tree_width > 1 and self.forced_outcomes:
            raise ConfigError("what-if forcing (forced_outcomes) works on chains only: set tree_width to 1")
        registry.get(self.proposer)  # ConfigError naming the known proposers
        if not (isinstance(self.lookup_min_ngram, int) and isinstance(self.lookup_max_ngram, int)
                and 1 <= self.lookup_min_ngram <= self.lookup_max_ngram <= 64):
            raise ConfigError(
                f"lookup n-gram sizes need 1 <= min <= max <= 64, got {self.lookup_min_ngram}..{self.lookup_max_ngram}"
            )
        if not _finite(self.draft_confidence) or not 0 <= self.draft_confidence < 1:
            raise ConfigError(f"draft_confidence must be in [0, 1) (0 = off), got {self.draft_confidence!r}")
        if not _finite(self.temperature) or self.temperature < 0:
            raise ConfigError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ConfigError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not _finite(self.top_p) or not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
        if self.cache_layout not in LAYOUTS:
            raise ConfigError(f"cache_layout must be one of {LAYOUTS}, got {self.cache_layout!r}")
        if self.free_policy not in POLICIES:
            raise ConfigError(f"free_policy must be one of {POLICIES}, got {self.free_policy!r}")
        if not isinstance(self.page_size, int) or not 1 <= self.page_size <= 1024:
            raise ConfigError(f"page_size must be an integer in 1..1024, got {self.page_size!r}")
        if self.num_blocks is not None and (not isinstance(self.num_blocks, int) or self.num_blocks < 1):
            raise ConfigError(f"num_blocks must be a positive integer or None, got {self.num_blocks!r}")
        if not isinstance(self.max_context, int) or self.max_context < 2:
            raise ConfigError(f"max_context must be an integer >= 2, got {self.max_context!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")
        if not isinstance(self.top_n, int) or self.top_n < 1:
            raise ConfigError(f"top_n must be a positive integer, got {self.top_n!r}")
        for item in self.forced_outcomes:
            if len(item) != 2 or not isinstance(item[0], int) or not 1 <= item[0] <= MAX_K:
                raise ConfigError(f"forced_outcomes entries are (draft index 1..{MAX_K}, bool), got {item!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def is_tree(self) -> bool:
        """Draft a token tree (tree_width > 1) rather than a chain."""
        return self.tree_width > 1

    def replace(self, **changes: object) -> DecodeConfig:
        return dataclasses.replace(self, **changes)

    def forced_outcome(self, index: int) -> bool | None:
        """The forced verdict for 1-based draft index `index`, or None when not forced."""
        return next((accept for i, accept in self.forced_outcomes if i == index), None)


def _int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
