"""Section "proposers" — every proposer the pair can run (the proposer table), side by side.

Every proposer runs through the same `SpeculativeDecoder` on the same held-out prompts, with the
same threads, interleaved (rotating order per prompt) with the target's own plain greedy
`generate`, which is the baseline of the speed goal. Measured per proposer:

* **quality at K = `quality_k`**: at T=0 the acceptance (accepted ÷ tested drafts) and mean
  tokens per cycle; at T=1 α = E[Σ min(p, q)] over every drafted position (`DraftStep.overlap`),
  also split by draft depth (depth 1 is the one-step α; deeper drafts of a feature head rest on
  its own predicted features);
* **cost**: one draft step (one forward of the proposer for one token, with its cache, incl. its
  output head) ÷ one target decode step, timed interleaved at the same context;
* **speed**: tokens/s of each (proposer, K) at T=0 over the target's plain greedy `generate`,
  paired per prompt; and Leviathan's prediction E(α, K) / (K·c + v(K)) with the measured verify
  cost v(K) (the verify pass over K+1 tokens costs more than one step on a CPU).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from specviz import DecodeConfig, SpeculativeDecoder
from specviz.proposers import registry
from specviz.stats import expected_tokens_per_cycle

from .common import Log, Settings, interleaved, median, summary
from .systems import SEED, hf, spec


def available(pair: Any) -> tuple[str, ...]:
    """The proposer table's rows this pair can run."""
    return tuple(entry.name for entry in registry.available(pair))


def runs_a_model(proposer: str) -> bool:
    """Whether drafting costs a forward pass (prompt lookup's copy runs no model: its c is 0)."""
    return registry.get(proposer).needs is not None


def name(proposer: str, k: int, t: int) -> str:
    return f"{proposer}_K{k}_T{t}"


def _config(proposer: str, k: int, temperature: float, max_new: int) -> DecodeConfig:
    return DecodeConfig(proposer=proposer, k=k, temperature=temperature, max_new_tokens=max_new,
                        cache_layout="contiguous", instrument=False, seed=SEED)


# ---------------------------------------------------------------------------------------- cost


@torch.inference_mode()
def step_cost_ms(pair: Any, proposer: str, prompt: list[int], steps: int) -> tuple[float, float]:
    """(median ms of one proposer draft step, median ms of one target decode step) at the
    prompt's context, alternating, each undone after timing (the caches truncate back).

    A draft step is what drafting d_{i+1} costs once d_i is known: one forward of the proposer
    over one input with its cache (a draft model: one token; a feature head: one (feature, token)
    pair), its output head, and the greedy pick."""
    from specviz.runtime import forward

    dec = SpeculativeDecoder(pair, _config(proposer, 1, 0.0, 4))
    dec.start(prompt)
    prop, target_cache = dec.proposer, dec.target_cache
    token = prompt[-1]
    draft_ms, target_ms = [], []
    for _ in range(steps + 2):
        base = target_cache.get_seq_length()
        t0 = time.perf_counter()
        int(forward(pair.target, target_cache, [token], "decode")[-1].argmax())
        t1 = time.perf_counter()
        target_cache.truncate(base, "rollback")
        base = prop.cache.get_seq_length()
        t2 = time.perf_counter()
        if prop.wants_target_features:  # a feature head (alone or merged with retrieval)
            predicted = prop._feed(prop.features[-1:], [token], "draft")
            int(prop.head.full_logits(predicted)[0].argmax())
        else:
            int(forward(pair.draft, prop.cache, [token], "draft", last_only=True)[-1].argmax())
        t3 = time.perf_counter()
        prop.cache.truncate(base, "rollback")
        draft_ms.append((t3 - t2) * 1000)
        target_ms.append((t1 - t0) * 1000)
    return statistics.median(draft_ms[2:]), statistics.median(target_ms[2:])


# ----------------------------------------------------------------------------------------- run


def run(pair: Any, prompts: list[list[int]], s: Settings, log: Log) -> dict[str, Any]:
    props = available(pair)
    qk = s.quality_k
    out: dict[str, Any] = {"proposers": list(props), "quality_k": qk, "ks": list(s.proposer_ks)}

    log(f"proposers: cost of one draft step ({', '.join(p for p in props if runs_a_model(p))})")
    cost: dict[str, Any] = {}
    for p in filter(runs_a_model, props):
        ratios, d_ms, t_ms = [], [], []
        for prompt in prompts[: max(1, s.cost_rounds)]:
            d, t = step_cost_ms(pair, p, prompt, s.cost_tokens)
            d_ms.append(d)
            t_ms.append(t)
            ratios.append(d / t)
        cost[p] = {"draft_step_ms": summary(d_ms), "target_step_ms": summary(t_ms), "c": summary(ratios)}
        log(f"  {p}: one draft step {median(d_ms):.2f} ms vs target {median(t_ms):.2f} ms -> c = {median(ratios):.3f}")
    out["cost"] = cost

    log(f"proposers: T=0 speed and acceptance, K in {list(s.proposer_ks)}, {len(prompts)} prompts "
        f"x {s.proposer_max_new} tokens, interleaved with the target's greedy generate")
    systems: dict[str, Any] = {"hf_greedy": hf(pair, 0.0, s.proposer_max_new)}
    for p in props:
        for k in s.proposer_ks:
            systems[name(p, k, 0)] = spec(pair, _config(p, k, 0.0, s.proposer_max_new))
    by_index = {n_: (lambda i, f=f: f(prompts[i])) for n_, f in systems.items()}
    samples = interleaved(by_index, len(prompts), s.proposer_rounds, log)
    out["greedy"] = analyse(samples)

    log(f"proposers: T=1 alpha at K={qk}")
    alpha: dict[str, Any] = {}
    for p in props:
        runner = spec(pair, _config(p, qk, 1.0, s.proposer_max_new), keep_traces=True)
        by_depth: dict[int, list[float]] = {}
        accepted = tested = tokens = cycles = 0
        for prompt in prompts:
            n_new, extra = runner(prompt)
            for tr in extra["traces"]:
                for d in tr.drafts:
                    by_depth.setdefault(d.index, []).append(d.overlap)
            accepted += extra["accepted"]
            tested += extra["tested"]
            tokens += n_new
            cycles += extra["cycles"]
        flat = [v for vals in by_depth.values() for v in vals]
        alpha[p] = {
            "alpha": sum(flat) / len(flat) if flat else None,
            "alpha_by_depth": {d: sum(v) / len(v) for d, v in sorted(by_depth.items())},
            "drafted_positions": len(flat),
            "acceptance_rate": accepted / tested if tested else None,
            "tokens_per_cycle": tokens / cycles if cycles else None,
        }
        log(f"  {p}: alpha {alpha[p]['alpha'] if flat else float('nan'):.3f} over {len(flat)} drafted positions")
    out["sampled"] = alpha
    out["rows"] = predictions(out, props, s.proposer_ks)
    return out


def analyse(samples: list) -> dict[str, Any]:
    """Per system: acceptance, tokens/cycle, verify ms; speedup over hf_greedy paired by prompt."""
    base = {(x.round, x.prompt): x for x in samples if x.system == "hf_greedy"}
    rows: dict[str, Any] = {}
    for sys_name in {x.system for x in samples}:
        mine = [x for x in samples if x.system == sys_name]
        row: dict[str, Any] = {"tokens_per_s": summary([x.tokens_per_s for x in mine])}
        if sys_name != "hf_greedy":
            tested = sum(x.extra["tested"] for x in mine)
            cycles = sum(x.extra["cycles"] for x in mine)
            row.update({
                "acceptance_rate": sum(x.extra["accepted"] for x in mine) / tested if tested else None,
                "tokens_per_cycle": sum(x.tokens for x in mine) / cycles if cycles else None,
                "verify_ms": summary([v for x in mine for v in x.extra["verify_ms"]]),
                "draft_ms_per_draft": summary(
                    [d / k for x in mine for d, k in zip(x.extra["draft_ms"], x.extra["k"], strict=True) if k]
                ),
                "same_text_as_greedy": all(x.extra["tokens_out"] == base[(x.round, x.prompt)].extra["tokens_out"]
                                           for x in mine if (x.round, x.prompt) in base),
                "speedup_vs_hf_greedy": summary([x.tokens_per_s / base[(x.round, x.prompt)].tokens_per_s
                                                 for x in mine if (x.round, x.prompt) in base]),
                "pooled_speedup_vs_hf_greedy": _pooled(mine, [base[(x.round, x.prompt)] for x in mine]),
            })
        rows[sys_name] = row
    return rows


def _pooled(mine: list, base: list) -> float | None:
    """All prompts pooled: (tokens / seconds) over (tokens / seconds) of the paired baseline runs."""
    t_mine, s_mine = sum(x.tokens for x in mine), sum(x.seconds for x in mine)
    t_base, s_base = sum(x.tokens for x in base), sum(x.seconds for x in base)
    return (t_mine / s_mine) / (t_base / s_base) if s_mine and s_base and t_base else None


def predictions(out: dict[str, Any], props: tuple[str, ...], ks: tuple[int, ...]) -> list[dict[str, Any]]:
    """Leviathan's prediction per (proposer, K) from the measured α (T=0 acceptance), c and v(K)."""
    rows = []
    greedy = out["greedy"]
    target_ms = median([c["target_step_ms"]["median"] for c in out["cost"].values()]) if out["cost"] else None
    for p in props:
        c = (out["cost"].get(p) or {}).get("c", {}).get("median", None if runs_a_model(p) else 0.0)
        for k in ks:
            row = greedy.get(name(p, k, 0), {})
            a = row.get("acceptance_rate")
            verify = (row.get("verify_ms") or {}).get("median")
            v = verify / target_ms if verify and target_ms else None
            known = a is not None and c is not None and v
            predicted = expected_tokens_per_cycle(a, k) / (k * c + v) if known else None
            rows.append({
                "proposer": p, "K": k, "acceptance_rate": a, "tokens_per_cycle": row.get("tokens_per_cycle"),
                "verify_cost": v, "c": c, "predicted_speedup_verify_cost": predicted,
                "measured_speedup": (row.get("speedup_vs_hf_greedy") or {}).get("median"),
                "pooled_speedup": row.get("pooled_speedup_vs_hf_greedy"),
                "same_text_as_greedy": row.get("same_text_as_greedy"),
            })
    return rows
