"""The machine's cost law: how many drafts are worth verifying here (docs/design.md §1, "How many drafts").

Speculative decoding trades target steps for one wider verify pass. Whether that pays is a fact
about *this* machine and *this* proposer, not about the algorithm:

* **v(N)**, the verify cost curve: one target forward over N new tokens (with a KV cache of a
  realistic length), divided by one plain 1-token step. On a GPU v(N) stays near 1 for small N;
  on a CPU it grows, how fast depending on the matrix kernels.
* **c**, the proposer's cost per draft in plain steps (a draft model ~0.1, a feature head less,
  prompt lookup ~0, retrieval a little).
* **a_1..a_K**, the acceptance per depth: P(d_i accepted | d_i tested). Observed in this run and
  blended with a prior from the proposer's benchmark (a Beta prior worth `PRIOR_WEIGHT` drafts).

K drafts commit E(K) = 1 + sum_{i<=K} prod_{j<=i} a_j tokens per cycle and cost
T(K) = K·c + v(K+1) plain steps, so the law picks the K (0 = a plain step: E = T = 1) that
maximises E(K)/T(K), and leaves the plain step only when the gain beats `MARGIN` (the cycle's
bookkeeping outside the forwards is not in v). A token tree of N nodes is scored the same way
over its node budget (`choose_tree`). The law itself is torch-free data (`CostLaw`, stored in run
files); `measure` times it on the loaded model, cached per machine (`law_for`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import statistics
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .cachedir import cpu_model, isa_caps
from .config import AUTO_MAX_K
from .trace import AutoChoice

TREE_BUDGETS = (4, 8, 16, 32)  # node budgets auto weighs for a token tree
MEASURED_NS = (*range(1, AUTO_MAX_K + 2), 13, 17, 25, 33)  # verify sizes timed at load
PAST = 128  # cached positions a timed verify attends to: a run's typical context
MARGIN = 0.03  # the predicted gain a speculative cycle must beat to replace a plain step
# Auto decides on a_i + DOUBT · sd(a_i): the posterior mean plus half a standard deviation while few
# drafts were tested. On the mean alone, two unlucky cycles at the start of a run (35 % likely for a
# proposer right 41 % of the time) pull a_1 under the break-even, and plain steps test nothing, so
# the run never drafts again; with the doubt it stops drafting only once the evidence is firm (a
# simulation over a_1 = 0.05 … 0.75 with this machine's law: +4–6 % mean speed-up where drafts pay,
# -2 % where they never do).
DOUBT = 0.5
PRIOR_WEIGHT = 4.0  # the prior counts as this many tested drafts per depth
# P(d_i accepted | tested) per proposer, from the benchmarks (docs/benchmarks.md, natural set,
# T = 0, chain of 4: accepted / tested drafts); a proposer not listed gets DEFAULT_PRIOR.
PRIORS = {"draft": 0.36, "feature": 0.41, "lookup": 0.44, "retrieval": 0.28, "feature+retrieval": 0.41,
          "feature+lookup": 0.41}
DEFAULT_PRIOR = 0.35
# A keyed proposer (prompt lookup) proposes what followed an earlier occurrence of the context's last
# n tokens: how far that can be trusted depends on n far more than on anything else the run has seen
# (`python -m bench.match_acceptance`, natural and grounded sets together: the first draft passes
# after 18 % of 1-token matches, 55 % of 2-token ones and 85 % of longer ones). Its cycles are counted
# per match length (1, 2, 3 or more), each starting from that share as its prior.
# Where measured, the prior per depth (a_1, a_2, …; the last repeats deeper): a model's first draft
# passes more often than its later ones (`python -m bench.match_acceptance --proposer NAME`).
# Feature head, natural and grounded sets pooled (512 cycles, K = 6, T = 0): a_1 0.45, a_2 0.43, deeper ~0.48.
DEPTH_PRIORS: dict[str, tuple[float, ...]] = {"feature": (0.45, 0.43, 0.48)}
# The merged `feature+lookup` copies only after 2 or more tokens and drafts with its feature head
# elsewhere: class 0, the head's per-depth prior. Its copies follow a head cycle more often than
# lookup's own do, and pass a little less often (`bench.match_acceptance --proposer feature+lookup`:
# 2-token matches 48-68 %, 3+ 67-77 %). A class's prior is one share, or a share per depth.
MATCH_PRIORS: dict[str, dict[int, float | tuple[float, ...]]] = {
    "lookup": {1: 0.2, 2: 0.55, 3: 0.85},
    "feature+lookup": {0: DEPTH_PRIORS["feature"], 2: 0.6, 3: 0.75},
}
# A merged proposer whose matched classes are copies: their drafts cost what this copier's do.
COPYING = {"feature+lookup": "lookup"}
VERSION = 4  # bump when what is measured changes: cached laws are measured again

Progress = Callable[[str, "float | None"], None]


@dataclass(frozen=True)
class CostLaw:
    """One machine's measured costs, in plain target steps (JSON-able: run files carry it)."""

    ns: tuple[int, ...]  # verify sizes measured (1 first)
    verify: tuple[float, ...]  # v(N) for each N in ns: ms(N) / ms(1)
    step_ms: float  # one plain step (N = 1), median ms
    draft_cost: dict[str, float] = field(default_factory=dict)  # proposer -> cost per draft, in plain steps
    machine: str = ""  # CPU (or GPU), threads, torch, dtype, model: what the key was made of

    def v(self, n: int) -> float:
        """v(n), linear between measured sizes and beyond the last (never below 1)."""
        points = list(zip(self.ns, self.verify, strict=True))
        if n <= points[0][0]:
            return points[0][1]
        for (n0, v0), (n1, v1) in zip(points, points[1:], strict=False):
            if n <= n1:
                return v0 + (v1 - v0) * (n - n0) / (n1 - n0)
        (n0, v0), (n1, v1) = points[-2:] if len(points) > 1 else (points[0], (points[0][0] + 1, points[0][1]))
        return max(1.0, v1 + (v1 - v0) * (n - n1) / (n1 - n0))

    def cost_of(self, proposer: str) -> float:
        return self.draft_cost.get(proposer, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CostLaw:
        return cls(ns=tuple(data["ns"]), verify=tuple(data["verify"]), step_ms=float(data["step_ms"]),
                   draft_cost=dict(data.get("draft_cost", {})), machine=data.get("machine", ""))


# ---------------------------------------------------------------- the law


def expected_tokens(acceptance: Sequence[float], k: int) -> float:
    """E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j: the drafts accepted in a row, plus the corrected/bonus token."""
    total, reach = 1.0, 1.0
    for a in acceptance[:k]:
        reach *= a
        total += reach
    return total


def cycle_cost(law: CostLaw, proposer: str, k: int) -> float:
    """T(k) = k·c + v(k+1) plain steps; T(0) = v(1) = 1, a plain step."""
    return k * law.cost_of(proposer) + law.v(k + 1) if k else 1.0


def acceptance_counts(origins: Sequence[str]) -> tuple[list[int], list[int]]:
    """(tested, accepted) per depth, read from the generated tokens' origins: each cycle commits
    m `accepted` then a `corrected` (depth m+1 rejected) or a `bonus` (all m passed); `generated`
    is a plain step (nothing tested). A trailing run cut by the end of the text counts nothing."""
    tested: list[int] = []
    accepted: list[int] = []
    run = 0
    for origin in origins:
        if origin == "accepted":
            run += 1
            continue
        depth = run + (origin == "corrected")  # a rejection tested one more depth than it accepted
        while len(tested) < depth:
            tested.append(0)
            accepted.append(0)
        for i in range(depth):
            tested[i] += 1
            accepted[i] += i < run
        run = 0
    return tested, accepted


def run_acceptance(traces: Sequence[Any], proposer: str, depth: int = AUTO_MAX_K) -> tuple[float, ...]:
    """a_1..a_depth as auto would estimate them after these cycles (what-if cycles left out)."""
    origins = [e.kind for t in traces if not t.forced for e in t.emitted]
    return estimate(proposer, *acceptance_counts(origins), depth)


def match_class(proposer: str, matched: int) -> int | None:
    """The class a keyed proposer's cycle is counted in: its match length, 3 and longer together
    (None: the proposer is not keyed, or it found no match and has no class 0 to draft in)."""
    classes = MATCH_PRIORS.get(proposer)
    if not classes or (matched <= 0 and 0 not in classes):
        return None
    return min(max(matched, 0), max(classes))


def payer(proposer: str, matched: int | None) -> str:
    """Whose draft cost a cycle pays: a merged proposer's copier after a match, else the proposer's."""
    return COPYING[proposer] if proposer in COPYING and matched else proposer


def class_origins(origins: Sequence[str], classes: Sequence[int | None], wanted: int | None) -> list[str]:
    """The origins of the cycles counted in class `wanted` (a cycle's tokens share its class, so
    whole cycles are kept and `acceptance_counts` reads them as it reads a whole run)."""
    return [o for o, c in zip(origins, classes, strict=True) if c == wanted]


def estimate(proposer: str, tested: Sequence[int], accepted: Sequence[int], depth: int,
             matched: int | None = None) -> tuple[float, ...]:
    """a_1..a_depth: each depth's Beta posterior mean, the prior worth `PRIOR_WEIGHT` tested drafts
    (a keyed proposer's after a match of `matched` tokens: its class's prior)."""
    priors = prior_per_depth(proposer, matched)
    out = []
    for i in range(depth):
        t, a = (tested[i], accepted[i]) if i < len(tested) else (0, 0)
        out.append((a + PRIOR_WEIGHT * priors[min(i, len(priors) - 1)]) / (t + PRIOR_WEIGHT))
    return tuple(out)


def optimistic(acceptance: Sequence[float], tested: Sequence[int]) -> tuple[float, ...]:
    """Each a_i raised by DOUBT standard deviations of its Beta posterior (tested + PRIOR_WEIGHT
    draws): what auto decides on, so that an early run of bad luck does not end the drafting."""
    out = []
    for i, a in enumerate(acceptance):
        n = (tested[i] if i < len(tested) else 0) + PRIOR_WEIGHT
        out.append(min(1.0, a + DOUBT * math.sqrt(a * (1 - a) / (n + 1))))
    return tuple(out)


def prior_per_depth(proposer: str, matched: int | None = None) -> tuple[float, ...]:
    """The prior a_1, a_2, … (the last repeats deeper): a keyed proposer's class's, else the measured
    per-depth one, else the proposer's flat benchmark figure."""
    if matched is not None:
        prior = MATCH_PRIORS[proposer][matched]
        return prior if isinstance(prior, tuple) else (prior,)
    return DEPTH_PRIORS.get(proposer, (PRIORS.get(proposer, DEFAULT_PRIOR),))


def choose(law: CostLaw, proposer: str, acceptance: Sequence[float], k_max: int, matched: int | None = None,
           seen: float | None = None) -> AutoChoice:
    """The k in 0..k_max with the largest E(k)/T(k); a plain step unless some k gains > MARGIN.
    `matched`: a keyed proposer's match class, which the acceptance was estimated for (said in the reason);
    `seen`: the estimated a_1 when `acceptance` is `optimistic` (said beside it)."""
    after = ""
    if matched == 0:
        after = "nothing to copy, the feature head drafts: "
    elif matched is not None:
        longest = matched == max(MATCH_PRIORS[proposer])
        after = f"after a {matched}{' or more' if longest else ''}-token match: "
    proposer = payer(proposer, matched)
    best = AutoChoice(0, 1.0, 1.0, 1.0, "")
    for k in range(1, min(k_max, len(acceptance)) + 1):
        e, t = expected_tokens(acceptance, k), cycle_cost(law, proposer, k)
        if e / t > best.expected_speedup:
            best = AutoChoice(k, e, t, e / t, "")
    a1 = acceptance[0] if acceptance else 0.0
    doubt = "" if seen is None or round(seen, 2) == round(a1, 2) else f", {seen:.2f} seen so far"
    if best.k and best.expected_speedup > 1 + MARGIN:
        return dataclasses.replace(best, reason=(
            f"{after}{best.k} draft{'s' if best.k > 1 else ''}: {best.expected_tokens:.2f} tokens expected for "
            f"{best.cycle_cost:.2f} steps "
            f"(v({best.k + 1}) = {law.v(best.k + 1):.2f}, c = {law.cost_of(proposer):.3f}, a1 = {a1:.2f}{doubt})"))
    one = break_even(law, proposer, 1)
    pays = f"pays only if accepted over {one:.0%}" if one < 1 else "never pays"
    so_far = f"acceptance so far {a1:.0%}" if seen is None else f"acceptance so far {seen:.0%} (at most {a1:.0%})"
    return AutoChoice(0, 1.0, 1.0, 1.0, (
        f"{after}plain step: no K gains over {MARGIN:.0%} here (best {best.expected_speedup:.2f}x); one draft costs "
        f"{cycle_cost(law, proposer, 1):.2f} steps and {pays}, {so_far}"))


def break_even(law: CostLaw, proposer: str, k: int) -> float:
    """The flat acceptance a at which k drafts just pay: E(a, k) = T(k) (1.0 if none does)."""
    target = cycle_cost(law, proposer, k)
    if expected_tokens([1.0] * k, k) < target:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(40):  # E(a, k) rises with a: bisect
        mid = (low + high) / 2
        low, high = (mid, high) if expected_tokens([mid] * k, k) < target else (low, mid)
    return high


def tree_tokens(acceptance: Sequence[float], width: int, nodes: int) -> float:
    """A tree's expected accepted path + 1, simply: its nodes spread evenly over the depths
    (at most width^i at depth i), siblings passing independently, so depth i passes with
    1 - (1 - a_i)^m_i. Optimistic (siblings agree more than that), hence the measured check."""
    depth = max(1, min(len(acceptance), math.ceil(nodes / width)))
    per = [min(width**i, max(1, nodes // depth)) for i in range(1, depth + 1)]
    return expected_tokens([1 - (1 - a) ** m for a, m in zip(acceptance, per, strict=False)], depth)


def choose_tree(law: CostLaw, proposer: str, acceptance: Sequence[float], width: int, max_nodes: int) -> AutoChoice:
    """The node budget (0 = a plain step, or one of TREE_BUDGETS up to max_nodes) maximising
    tree_tokens / (N·c + v(N+1)), under the same margin as a chain."""
    best = AutoChoice(0, 1.0, 1.0, 1.0, "")
    for nodes in (n for n in TREE_BUDGETS if n <= max_nodes):
        e, t = tree_tokens(acceptance, width, nodes), cycle_cost(law, proposer, nodes)
        if e / t > best.expected_speedup:
            best = AutoChoice(nodes, e, t, e / t, "")
    if best.k and best.expected_speedup > 1 + MARGIN:
        return dataclasses.replace(best, reason=(
            f"a {best.k}-node tree: {best.expected_tokens:.2f} tokens expected for {best.cycle_cost:.2f} steps "
            f"(v({best.k + 1}) = {law.v(best.k + 1):.2f})"))
    return AutoChoice(0, 1.0, 1.0, 1.0, f"plain step: no tree budget gains over {MARGIN:.0%} here "
                  f"(best {best.expected_speedup:.2f}x)")


# ---------------------------------------------------------------- measuring it (torch, lazily)


def machine_key(pair: Any) -> tuple[str, str]:
    """(a description, a hash) of what the law depends on: CPU or GPU model, threads, torch version,
    dtype, the models' shapes (target, draft, feature head), the kernel setting, this module's version."""
    import torch

    model = pair.target
    weight = next(model.parameters())
    device = weight.device
    chip = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    config = getattr(model, "config", None)
    shape = "\n".join(_shape(m) for m in (model, pair.draft, pair.feature_head))
    if device.type == "cpu" and (caps := isa_caps()):
        chip += f" (capped: {caps})"
    parts = [chip, f"{torch.get_num_threads()} threads", f"torch {torch.__version__}", str(weight.dtype),
             os.environ.get("SPECVIZ_KERNELS", ""), _kernel_choice(), f"v{VERSION}"]
    digest = hashlib.sha1("\n".join([*parts, shape]).encode()).hexdigest()[:16]
    name = getattr(config, "_name_or_path", "") or type(model).__name__
    return f"{chip}, {parts[1]}, {parts[2]}, {str(weight.dtype).removeprefix('torch.')}, {name}", digest


def _kernel_choice() -> str:
    """The kernels chosen at load on this machine (their cache file), so a new choice re-measures the law."""
    from .cachedir import cache_dir

    try:
        return hashlib.sha1((cache_dir() / "kernels.json").read_bytes()).hexdigest()
    except OSError:
        return ""


def _shape(model: Any) -> str:
    if model is None:
        return "-"
    config = getattr(model, "config", None)
    described = config.to_json_string(use_diff=False) if hasattr(config, "to_json_string") else ""
    return f"{type(model).__name__} {sum(p.numel() for p in model.parameters())} {described}"


def verify_curve(model: Any, ns: Sequence[int] = MEASURED_NS, rounds: int = 5, past: int = PAST,
                 progress: Progress | None = None) -> tuple[float, list[float]]:
    """(ms of one plain step, v(N) for each N) after `past` cached positions. Each forward over N
    tokens is timed back to back with a 1-token step (in alternating order), and v(N) is the median
    over rounds of those paired ratios: on a shared machine the load drifts, and a pair sees the same
    load, where a ratio of two separately gathered times would not."""
    from .config import DecodeConfig
    from .runtime import forward, open_cache, vocab_size_of

    vocab = vocab_size_of(model)
    ids = [(7919 * i + 11) % vocab for i in range(past + max(ns) + 1)]  # the cost ignores which tokens
    cfg = DecodeConfig(cache_layout="contiguous", max_new_tokens=1)
    cache = open_cache(model, cfg, past + max(ns) + 2, ids[: past + 1], reach=past + max(ns) + 2)

    def timed(n: int) -> float:
        start = time.perf_counter()
        forward(model, cache, ids[past : past + n], "verify")
        cache.truncate(past, "rollback")
        return (time.perf_counter() - start) * 1000

    steps: list[float] = []
    ratios: dict[int, list[float]] = {n: [] for n in ns}
    for r in range(rounds + 1):  # round 0 warms up
        for n in ns[1:]:
            pair = (timed(1), timed(n)) if r % 2 else tuple(reversed((timed(n), timed(1))))
            if r:
                steps.append(pair[0])
                ratios[n].append(pair[1] / pair[0])
        if progress is not None:
            progress(f"Measuring this machine's verify cost v(N)… round {r} of {rounds}", r / (rounds + 1))
    curve = [1.0] + [max(1.0, statistics.median(ratios[n])) for n in ns[1:]]
    return statistics.median(steps), monotone(curve)


def monotone(values: Sequence[float]) -> list[float]:
    """The closest non-decreasing curve (pool adjacent violators): a wider forward never costs
    less, so a dip is noise, averaged with its neighbours rather than believed."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, c1), (m2, c2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return [m for m, c in blocks for _ in range(int(c))]


def draft_costs(pair: Any, step_ms: float, k: int = 4, reps: int = 5) -> dict[str, float]:
    """Each available proposer's cost per draft in plain steps: a real `propose` of k drafts
    (with its catch-up, as a cycle does) and its rollback, median over reps, divided by k."""
    from .config import DecodeConfig
    from .proposers import registry
    from .runtime import make_generator, model_device, vocab_size_of
    from .sampling import process_logits

    vocab = vocab_size_of(pair.target)
    prompt = [(7919 * i + 11) % vocab for i in range(PAST)]
    out: dict[str, float] = {}
    for entry in registry.available(pair):
        cfg = DecodeConfig(proposer=entry.name, cache_layout="contiguous", k=k, max_new_tokens=4 * k, temperature=0)
        try:
            proposer = registry.make_proposer(pair, cfg, PAST + 8 * k, vocab)
            proposer.start(prompt, _features(pair, prompt) if proposer.wants_target_features else None)
        except Exception:  # a proposer that cannot start on random ids is simply not costed
            continue
        gen = make_generator(model_device(pair.target), 0)
        samples = []
        for r in range(reps + 1):
            start = time.perf_counter()
            proposer.propose(prompt, k, lambda logits: process_logits(logits, 0.0, 0, 1.0), True, gen)
            proposer.observe_verify(None)
            proposer.rollback(prompt)
            if r:
                samples.append((time.perf_counter() - start) * 1000)
        out[entry.name] = statistics.median(samples) / k / step_ms
    return out


def _features(pair: Any, prompt: list[int]) -> Any:
    from .config import DecodeConfig
    from .runtime import open_cache_with_features

    cfg = DecodeConfig(cache_layout="contiguous", max_new_tokens=1)
    return open_cache_with_features(pair.target, cfg, len(prompt) + 1, prompt)[1]


def measure(pair: Any, progress: Progress | None = None) -> CostLaw:
    """Time the law on this pair as it runs: v(N) for MEASURED_NS, then each proposer's draft cost."""
    import torch

    with torch.inference_mode():
        step_ms, curve = verify_curve(pair.target, progress=progress)
        costs = draft_costs(pair, step_ms)
    return CostLaw(ns=MEASURED_NS, verify=tuple(curve), step_ms=step_ms, draft_cost=costs,
                   machine=machine_key(pair)[0])


# ---------------------------------------------------------------- one law per loaded model

_LAWS: weakref.WeakKeyDictionary[Any, CostLaw] = weakref.WeakKeyDictionary()


def law_for(pair: Any, progress: Progress | None = None) -> CostLaw:
    """This pair's law: measured once per loaded target, and once per machine on disk (the cache
    directory models use, keyed by `machine_key`); the first load measures, with progress."""
    if (law := _LAWS.get(pair.target)) is not None:
        return law
    from .cachedir import cache_dir

    path = cache_dir() / "costlaw" / f"{machine_key(pair)[1]}.json"
    try:
        law = CostLaw.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        law = measure(pair, progress)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(law.to_dict(), indent=1))
        except OSError:  # a read-only cache only costs a measurement next time
            pass
    _LAWS[pair.target] = law
    return law
