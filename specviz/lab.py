"""The exactness lab: does speculative decoding really sample from the target's p? (docs/design.md §1, §7)

From the current context it draws N next tokens with the real `SpeculativeDecoder` (each with its
own seed) and N with the target's plain `AutoregressiveDecoder`: the total-variation distance
TV = ½ Σ |p̂ − p| to the exact p of *both* shrinks like 1/√N. K = 1 suffices (d_1's test alone
decides the first token); p is compared on its top tokens plus an "other" bucket (a lower bound of
the full TV); what-if forcing is off, since forcing is exactly what breaks exactness.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .config import DecodeConfig

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class LabResult:
    token_texts: tuple[str, ...]  # the buckets, most likely first; "(other)" last
    exact: tuple[float, ...]  # p of each bucket
    spec_counts: tuple[int, ...]
    target_counts: tuple[int, ...]
    checkpoints: tuple[int, ...]  # N values at which TV was measured
    tv_spec: tuple[float, ...]
    tv_target: tuple[float, ...]
    n: int
    context_len: int
    temperature: float

    def spec_freq(self) -> list[float]:
        return [c / self.n for c in self.spec_counts]

    def target_freq(self) -> list[float]:
        return [c / self.n for c in self.target_counts]


def total_variation(counts: Sequence[int], exact: Sequence[float]) -> float:
    n = sum(counts)
    if n == 0:
        return 1.0
    return 0.5 * sum(abs(c / n - p) for c, p in zip(counts, exact, strict=True))


def checkpoints_for(n: int) -> list[int]:
    """Roughly log-spaced N values (for TV against N on a log axis), ending at n."""
    points = sorted({max(1, round(10 ** (e / 4))) for e in range(0, int(4 * math.log10(max(n, 1))) + 1)} | {n})
    return [p for p in points if p <= n]


def run_exactness_lab(pair: Any, context_ids: Sequence[int], config: DecodeConfig, n: int,
                      progress: Progress | None = None, top: int = 12) -> LabResult:
    """Sample n speculative and n target-only next tokens from `context_ids` with a ModelPair (the
    decoders' SpecvizErrors pass through)."""
    from . import AutoregressiveDecoder, SpeculativeDecoder  # torch only when the lab runs

    ctx = list(context_ids)
    cfg = config.replace(k=1, forced_outcomes=(), check_invariant=False, max_new_tokens=4,
                         top_n=max(top, config.top_n), max_context=max(len(ctx) + 8, 16))
    base_seed = config.seed * 1_000_003 + len(ctx)
    spec_tokens: list[int] = []
    target_tokens: list[int] = []
    exact_top = None
    # One prefill each; every sample is a reseeded fork of these (copying a cache is far cheaper
    # than recomputing the context).
    spec_root = SpeculativeDecoder(pair, cfg.replace(seed=base_seed))
    spec_root.start(ctx)
    target_root = AutoregressiveDecoder(pair.target, cfg.replace(seed=base_seed), tokenizer=pair.tokenizer)
    target_root.start(ctx)
    for i in range(n):
        tr = spec_root.fork(seed=base_seed + 2 * i).step()
        spec_tokens.append(tr.emitted[0].token_id)
        if exact_top is None:
            # p_1 of the first cycle is the exact next-token distribution (processed, top-N).
            exact_top = tr.drafts[0].target_top[:top]
        target_tokens.append(int(target_root.fork(seed=base_seed + 2 * i + 1).step()))
        if progress is not None:
            progress((i + 1) / n, f"{i + 1}/{n} speculative + target-only samples")
    assert exact_top is not None
    probs = [tp.prob for tp in exact_top]
    probs.append(max(0.0, 1.0 - sum(probs)))  # the last bucket: every token outside the exact top list
    texts = [tp.text for tp in exact_top] + ["(other)"]
    index = {tp.token_id: i for i, tp in enumerate(exact_top)}

    def bucket(tokens: Sequence[int]) -> list[int]:
        counts = Counter(index.get(t, len(exact_top)) for t in tokens)
        return [counts[i] for i in range(len(probs))]

    cps = checkpoints_for(n)
    return LabResult(
        token_texts=tuple(texts), exact=tuple(probs), spec_counts=tuple(bucket(spec_tokens)),
        target_counts=tuple(bucket(target_tokens)), checkpoints=tuple(cps),
        tv_spec=tuple(total_variation(bucket(spec_tokens[:m]), probs) for m in cps),
        tv_target=tuple(total_variation(bucket(target_tokens[:m]), probs) for m in cps),
        n=n, context_len=len(ctx), temperature=config.temperature,
    )
