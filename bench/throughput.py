"""Section 1 — decoding throughput of the default pair, every system interleaved.

Systems (names are `family/K/T/layout/instrumentation`):
  ar/T0, ar/T1                        specviz autoregressive baseline (contiguous cache)
  spec/K{k}/T{t}/contiguous/lean      the K grid, instrumentation off (the engine's fast path)
  hf/T0, hf/T1                        transformers `generate` of the target alone
  hf-assisted/K{k}/T{t}               transformers `generate(assistant_model=draft)`, constant K

The layout and instrumentation variants (paged, instrumented) are not in this interleave: their
few-percent costs drown in run-to-run drift, so `lockstep.py` measures them cycle by cycle at one
K (their cost is per forward pass, not per K).
"""

from __future__ import annotations

from typing import Any

from . import systems
from .common import Log, Settings, interleaved, median, paired_ratios, round_rates, summary

TEMPS = (0, 1)


def spec_name(k: int, t: int, layout: str = "contiguous", inst: bool = False) -> str:
    return f"spec/K{k}/T{t}/{layout}/{'instrumented' if inst else 'lean'}"


def build(pair: Any, s: Settings, max_new: int) -> dict[str, systems.Runner]:
    out: dict[str, systems.Runner] = {}
    for t in TEMPS:
        out[f"ar/T{t}"] = systems.ar(pair, t, max_new)
        out[f"hf/T{t}"] = systems.hf(pair, t, max_new)
        for k in s.ks:
            out[spec_name(k, t)] = systems.spec(pair, systems.spec_config(k, t, max_new, "contiguous", False))
        for k in s.hf_ks:
            out[f"hf-assisted/K{k}/T{t}"] = systems.hf_assisted(pair, k, t, max_new)
    return out


def run(pair: Any, prompts: list[list[int]], s: Settings, log: Log) -> dict[str, Any]:
    log("throughput: warm-up (every system once, short)")
    warm = build(pair, s, s.warmup_tokens)
    for fn in warm.values():
        fn(prompts[0])
    runners = build(pair, s, s.max_new_tokens)
    log(f"throughput: {len(runners)} systems x {len(prompts)} prompts x {s.rounds} rounds, "
        f"{s.max_new_tokens} new tokens each")
    samples = interleaved({name: (lambda p, fn=fn: fn(prompts[p])) for name, fn in runners.items()}, len(prompts),
                          s.rounds, log)
    result = analyse(samples, s)
    # The baseline's texts, for measuring α directly on what the target generates (theory.py).
    result["_generated"] = {
        t: [x.extra["tokens_out"] for x in samples if x.system == f"ar/T{t}" and x.round == 0] for t in TEMPS
    }
    return result


def analyse(samples: list, s: Settings) -> dict[str, Any]:
    rates = round_rates(samples)
    per_system: dict[str, Any] = {}
    for name in dict.fromkeys(x.system for x in samples):
        mine = [x for x in samples if x.system == name]
        t = name.split("/T")[1][0] if "/T" in name else "0"
        row: dict[str, Any] = {
            "tokens_per_s": summary([x.tokens_per_s for x in mine]),
            "round_tokens_per_s": rates.get(name, {}),
            "tokens": sum(x.tokens for x in mine),
            "seconds": sum(x.seconds for x in mine),
            "speedup_vs_ar": summary(paired_ratios(samples, name, f"ar/T{t}")),
        }
        if name.startswith("spec/"):
            tested = sum(x.extra["tested"] for x in mine)
            cycles = sum(x.extra["cycles"] for x in mine)
            row["cycles"] = cycles
            row["acceptance_rate"] = sum(x.extra["accepted"] for x in mine) / tested if tested else None
            row["tokens_per_cycle"] = row["tokens"] / cycles if cycles else None
            row["ms_per_cycle"] = summary([1000 * x.seconds / x.extra["cycles"] for x in mine if x.extra["cycles"]])
            row["verify_ms"] = summary([v for x in mine for v in x.extra["verify_ms"]])
            row["draft_ms"] = summary([v for x in mine for v in x.extra["draft_ms"]])
            phase = {ph: sum(x.extra["phase_ms"][ph] for x in mine) for ph in mine[0].extra["phase_ms"]}
            row["phase_ms_per_cycle"] = {ph: v / cycles for ph, v in phase.items()} if cycles else {}
        if name.startswith("hf-assisted/"):
            cycles = sum(x.extra.get("cycles", 0) for x in mine)
            row["cycles"] = cycles
            row["tokens_per_cycle"] = row["tokens"] / cycles if cycles else None
            row["ms_per_cycle"] = summary([1000 * x.seconds / x.extra["cycles"] for x in mine if x.extra.get("cycles")])
        per_system[name] = row

    comparisons: dict[str, Any] = {"ours_vs_hf_assisted": {}, "hf_assisted_over_ours_ms_per_cycle": {},
                                   "ar_vs_hf_generate": {}}
    for t in TEMPS:
        for k in s.hf_ks:
            ours, theirs = spec_name(k, t), f"hf-assisted/K{k}/T{t}"
            if ours in per_system:
                # Cost per cycle, HF over ours (> 1: ours is cheaper per cycle). At T = 1 the two decode
                # different random texts, so tokens/s also carries each run's acceptance luck; this does not.
                comparisons["hf_assisted_over_ours_ms_per_cycle"][f"K{k}/T{t}"] = _paired_cycle_ratio(
                    samples, theirs, ours)
                comparisons["ours_vs_hf_assisted"][f"K{k}/T{t}"] = summary(paired_ratios(samples, ours, theirs))
        comparisons["ar_vs_hf_generate"][f"T{t}"] = summary(paired_ratios(samples, f"ar/T{t}", f"hf/T{t}"))
    comparisons["greedy_outputs_identical"] = _greedy_agreement(samples)
    best = {}
    for t in TEMPS:
        grid = {k: per_system[spec_name(k, t)]["speedup_vs_ar"]["median"] for k in s.ks}
        grid = {k: x for k, x in grid.items() if x is not None}
        if grid:
            k_best = max(grid, key=grid.get)
            best[f"T{t}"] = {"k": k_best, "speedup_vs_ar": grid[k_best],
                             "tokens_per_s": per_system[spec_name(k_best, t)]["tokens_per_s"]["median"]}
    samples_out = [{"system": x.system, "round": x.round, "prompt": x.prompt, "seconds": x.seconds, "tokens": x.tokens,
                    **{k: x.extra[k] for k in ("cycles", "accepted", "tested") if k in x.extra}} for x in samples]
    return {
        "systems": per_system,
        "comparisons": comparisons,
        "best_k": best,
        "samples": samples_out,
        "median_ar_tokens_per_s": {f"T{t}": median([x.tokens_per_s for x in samples if x.system == f"ar/T{t}"])
                                   for t in TEMPS},
    }


def _paired_cycle_ratio(samples: list, num: str, den: str) -> dict[str, Any]:
    by = {(x.system, x.round, x.prompt): x for x in samples}
    out = []
    for (name, r, p), a in by.items():
        b = by.get((den, r, p))
        if name == num and b is not None and a.extra.get("cycles") and b.extra.get("cycles"):
            out.append((a.seconds / a.extra["cycles"]) / (b.seconds / b.extra["cycles"]))
    return summary(out)


def _greedy_agreement(samples: list) -> dict[str, Any]:
    """At temperature 0 every system must decode the target's greedy text (float rounding in
    batched verify passes may rarely flip a near-tie; this counts how often that happened)."""
    ref = {(x.round, x.prompt): x.extra.get("tokens_out") for x in samples if x.system == "ar/T0"}
    same = differ = 0
    names = []
    for x in samples:
        if "/T0" not in x.system or x.system == "ar/T0":
            continue
        want = ref.get((x.round, x.prompt))
        got = x.extra.get("tokens_out")
        if want is None or got is None:
            continue
        if got == want:
            same += 1
        else:
            differ += 1
            names.append(x.system)
    return {"identical_runs": same, "differing_runs": differ, "differing_systems": sorted(set(names))}
