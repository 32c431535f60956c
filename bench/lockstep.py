"""Layout and instrumentation costs, measured cycle by cycle in lockstep.

Paged vs contiguous and instrumented vs lean differ by a few percent of a cycle, far less than
the drift of a shared machine between two whole runs seconds apart. So the four variants at
K = variant_k — {contiguous, paged} x {lean, instrumented} — decode the same prompt *side by
side*: cycle i of every variant runs back to back (in a rotating order) before cycle i+1 of any.
With equal seeds the four decode the same tokens through the same cycles (checked: `identical`),
so cycle i is the same work in each, and the ratio of their cycle-i times is measured within a
fraction of a second. Reported: the median over all cycles of those per-cycle ratios, and each
variant's ms/cycle and tokens/s.
"""

from __future__ import annotations

import time
from typing import Any

from specviz import SpeculativeDecoder

from .common import Log, Settings, summary
from .systems import spec_config
from .throughput import TEMPS

VARIANTS = {
    "contiguous/lean": ("contiguous", False),
    "contiguous/instrumented": ("contiguous", True),
    "paged/lean": ("paged", False),
    "paged/instrumented": ("paged", True),
}
RATIOS = {  # name -> (numerator variant, denominator variant)
    "paged_over_contiguous/lean": ("paged/lean", "contiguous/lean"),
    "paged_over_contiguous/instrumented": ("paged/instrumented", "contiguous/instrumented"),
    "instrumented_over_lean/contiguous": ("contiguous/instrumented", "contiguous/lean"),
    "instrumented_over_lean/paged": ("paged/instrumented", "paged/lean"),
}


def run_prompt(pair: Any, prompt: list[int], k: int, t: int, max_new: int) -> dict[str, Any]:
    decs = {name: SpeculativeDecoder(pair, spec_config(k, t, max_new, layout, inst))
            for name, (layout, inst) in VARIANTS.items()}
    for dec in decs.values():
        dec.start(prompt)
    names = list(decs)
    times: dict[str, list[float]] = {n: [] for n in names}
    i = 0
    while not all(d.finished for d in decs.values()):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            if not decs[name].finished:
                t0 = time.perf_counter()
                decs[name].step()
                times[name].append(1000 * (time.perf_counter() - t0))
        i += 1
    committed = {n: d.committed for n, d in decs.items()}
    return {"times": times, "tokens": {n: len(c) - len(prompt) for n, c in committed.items()},
            "identical": len({tuple(c) for c in committed.values()}) == 1}


def run(pair: Any, prompts: list[list[int]], s: Settings, log: Log) -> dict[str, Any]:
    out: dict[str, Any] = {"k": s.variant_k, "by_temperature": {}}
    for t in TEMPS:
        per_variant: dict[str, dict[str, float]] = {n: {"ms": 0.0, "tokens": 0, "cycles": 0} for n in VARIANTS}
        cycle_ms: dict[str, list[float]] = {n: [] for n in VARIANTS}
        ratios: dict[str, list[float]] = {n: [] for n in RATIOS}
        identical = True
        for prompt in prompts:
            got = run_prompt(pair, prompt, s.variant_k, t, s.max_new_tokens)
            identical &= got["identical"]
            for n, ts in got["times"].items():
                per_variant[n]["ms"] += sum(ts)
                per_variant[n]["tokens"] += got["tokens"][n]
                per_variant[n]["cycles"] += len(ts)
                cycle_ms[n] += ts
            for rname, (num, den) in RATIOS.items():
                a, b = got["times"][num], got["times"][den]
                ratios[rname] += [x / y for x, y in zip(a, b) if y > 0]  # cycle i vs cycle i
        variants = {n: {"ms_per_cycle": summary(cycle_ms[n]), "cycles": v["cycles"], "tokens": v["tokens"],
                        "tokens_per_s": 1000 * v["tokens"] / v["ms"] if v["ms"] else None}
                    for n, v in per_variant.items()}
        summed = {n: summary(r) for n, r in ratios.items()}
        out["by_temperature"][f"T{t}"] = {"variants": variants, "identical": identical, "ratios": summed}
        log(f"lockstep T={t}: " + ", ".join(f"{n} {summed[n]['median']:.3f}" for n in RATIOS if ratios[n]))
    return out
