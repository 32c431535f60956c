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
AUTO = "auto"  # k="auto": the machine's cost law picks K (0 = a plain step) before each cycle (specviz.costlaw)
AUTO_MAX_K = 8  # the most drafts auto verifies in a chain (= costlaw.AUTO_MAX_K; the caches are sized for it)
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
    k: int | Literal["auto"] = 5  # draft length K (a token tree: its depth); "auto": the cost law's choice
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
        """Raise ConfigError with a clear message for the first out-of-range value."""
        k, width, nodes = self.k, self.tree_width, self.tree_nodes
        _require(k == AUTO or _int(k) and 1 <= k <= MAX_K,
                 f"K (draft length) must be an integer in 1..{MAX_K} or \"auto\"", k)
        _require(_int(width) and 1 <= width <= MAX_TREE_WIDTH,
                 f"tree_width must be an integer in 1..{MAX_TREE_WIDTH} (1 = a chain)", width)
        _require(_int(nodes) and 1 <= nodes <= MAX_TREE_NODES,
                 f"tree_nodes (the tree's node budget) must be an integer in 1..{MAX_TREE_NODES}", nodes)
        if width > 1 and self.forced_outcomes:
            raise ConfigError("what-if forcing (forced_outcomes) works on chains only: set tree_width to 1")
        registry.get(self.proposer)  # ConfigError naming the known proposers
        low, high = self.lookup_min_ngram, self.lookup_max_ngram
        if not (isinstance(low, int) and isinstance(high, int) and 1 <= low <= high <= 64):
            raise ConfigError(f"lookup n-gram sizes need 1 <= min <= max <= 64, got {low}..{high}")
        confidence, temperature, top_k, top_p = self.draft_confidence, self.temperature, self.top_k, self.top_p
        _require(_finite(confidence) and 0 <= confidence < 1, "draft_confidence must be in [0, 1) (0 = off)",
                 confidence)
        _require(_finite(temperature) and temperature >= 0, "temperature must be a finite number >= 0 (0 = greedy)",
                 temperature)
        _require(isinstance(top_k, int) and top_k >= 0, "top_k must be an integer >= 0 (0 = off)", top_k)
        _require(_finite(top_p) and 0 < top_p <= 1, "top_p must be in (0, 1] (1 = off)", top_p)
        _require(self.cache_layout in LAYOUTS, f"cache_layout must be one of {LAYOUTS}", self.cache_layout)
        _require(self.free_policy in POLICIES, f"free_policy must be one of {POLICIES}", self.free_policy)
        page, blocks = self.page_size, self.num_blocks
        _require(isinstance(page, int) and 1 <= page <= 1024, "page_size must be an integer in 1..1024", page)
        _require(blocks is None or isinstance(blocks, int) and blocks >= 1,
                 "num_blocks must be a positive integer or None", blocks)
        for name, least in (("max_context", 2), ("max_new_tokens", 1)):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= least, f"{name} must be an integer >= {least}", value)
        _require(isinstance(self.seed, int), "seed must be an integer", self.seed)
        _require(isinstance(self.top_n, int) and self.top_n >= 1, "top_n must be a positive integer", self.top_n)
        for item in self.forced_outcomes:
            _require(len(item) == 2 and isinstance(item[0], int) and 1 <= item[0] <= MAX_K,
                     f"forced_outcomes entries are (draft index 1..{MAX_K}, bool)", item)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def auto(self) -> bool:
        """K (or a tree's node budget) is chosen before each cycle by the machine's cost law."""
        return self.k == AUTO

    @property
    def max_k(self) -> int:
        """The most drafts a cycle may hold in a chain (a tree's depth): K, or auto's ceiling."""
        return AUTO_MAX_K if self.k == AUTO else self.k

    @property
    def is_tree(self) -> bool:
        """Draft a token tree (tree_width > 1) rather than a chain."""
        return self.tree_width > 1

    def replace(self, **changes: object) -> DecodeConfig:
        return dataclasses.replace(self, **changes)


def _require(ok: bool, rule: str, value: object) -> None:
    if not ok:
        raise ConfigError(f"{rule}, got {value!r}")


def _int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
