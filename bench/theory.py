"""Section 2 — the measured speedup against Leviathan et al.'s prediction.

With per-token acceptance rate α and draft/target cost ratio c, one cycle of draft length K
commits E = (1 − α^(K+1)) / (1 − α) tokens on average and costs K·c + 1 target-forward
equivalents, so the predicted speedup over autoregressive decoding is E / (K·c + 1)
(Leviathan et al. 2023, §3.3–3.4; docs/design.md §1).

* α is measured two ways. *Direct*: both models score the target's own generations (the
  baseline's output) in one teacher-forced pass each, and α = mean over positions of
  Σ_x min(p(x), q(x)) at temperature 1 (Leviathan's Definition 3.1; `sampling.expected_acceptance`)
  or of [argmax p = argmax q] at temperature 0. *From traces*: accepted / tested drafts in the
  throughput runs, for each K.
* c is measured as draft ms/token ÷ target ms/token, both decoding one token at a time with the
  same cache code (prefill excluded), interleaved.
* The formula assumes a verify pass over K+1 tokens costs one decode step. On a CPU it costs
  more as K grows, so a second prediction uses the measured verify cost v(K) (median verify time
  ÷ target ms/token): E / (K·c + v(K)). From the same model, the α the draft would need for the
  1.3x goal at each K is reported too.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from specviz import AutoregressiveDecoder, DecodeConfig, sampling
from specviz.stats import expected_speedup, expected_tokens_per_cycle

from .common import Log, Settings, median, summary
from .throughput import TEMPS, spec_name


@torch.inference_mode()
def alpha_direct(pair: Any, prompt: list[int], generated: list[int], temperature: float) -> list[float]:
    """Per generated position: Σ min(p, q) (T > 0) or argmax agreement (T = 0)."""
    if not generated:
        return []
    ids = torch.tensor([prompt + generated], device=pair.target_device)
    # Logits at position i predict token i+1: the rows that predict the generated tokens.
    rows = slice(len(prompt) - 1, len(prompt) + len(generated) - 1)
    p_logits = pair.target(input_ids=ids).logits[0, rows].float()
    q_logits = pair.draft(input_ids=ids.to(pair.draft_device)).logits[0, rows].float().to(p_logits.device)
    vocab = max(p_logits.shape[-1], q_logits.shape[-1])
    if temperature == 0:
        return (p_logits.argmax(-1) == q_logits.argmax(-1)).float().tolist()
    p = sampling.pad_vocab(sampling.process_logits(p_logits, temperature), vocab)
    q = sampling.pad_vocab(sampling.process_logits(q_logits, temperature), vocab)
    return sampling.expected_acceptance(p, q).tolist()


def ms_per_token(model: Any, tokenizer: Any, prompt: list[int], n: int) -> float:
    """One-token decode steps of one model with specviz's contiguous cache, prefill excluded."""
    cfg = DecodeConfig(temperature=0, max_new_tokens=n, cache_layout="contiguous")
    dec = AutoregressiveDecoder(model, cfg, tokenizer=tokenizer)
    dec.start(prompt)
    dec.eos_ids = frozenset()  # time exactly n steps
    t0 = time.perf_counter()
    for _ in range(n):
        dec.step()
    return 1000 * (time.perf_counter() - t0) / n


def measure_cost(pair: Any, prompts: list[list[int]], s: Settings, log: Log) -> dict[str, Any]:
    ms_per_token(pair.target, pair.tokenizer, prompts[0], 2)  # warm-up
    ms_per_token(pair.draft, pair.tokenizer, prompts[0], 2)
    target, draft, ratios = [], [], []
    for r in range(s.cost_rounds):
        for p in prompts:
            # Alternate which model goes first, so neither always gets the quieter moment.
            order = ("t", "d") if r % 2 == 0 else ("d", "t")
            got = {who: ms_per_token(pair.target if who == "t" else pair.draft, pair.tokenizer, p, s.cost_tokens)
                   for who in order}
            target.append(got["t"])
            draft.append(got["d"])
            ratios.append(got["d"] / got["t"])
    log(f"theory: target {median(target):.1f} ms/token, draft {median(draft):.1f} ms/token")
    return {"target_ms_per_token": summary(target), "draft_ms_per_token": summary(draft), "c": summary(ratios)}


def alpha_needed(speedup: float, k: int, c: float, v: float) -> float | None:
    """The α at which E(α, K) / (K·c + v) reaches `speedup` (bisection; E rises with α), or None
    if even α = 1 (K+1 tokens per cycle) falls short."""
    cost = k * c + v
    if expected_tokens_per_cycle(1.0, k) / cost < speedup:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens_per_cycle(mid, k) / cost < speedup else (lo, mid)
    return hi


def run(pair: Any, prompts: list[list[int]], throughput: dict[str, Any], s: Settings, log: Log) -> dict[str, Any]:
    log("theory: α on the target's own generations (teacher-forced)")
    alpha: dict[str, Any] = {}
    for t in TEMPS:
        vals: list[float] = []
        for prompt, gen in zip(prompts, throughput["_generated"][t], strict=False):
            vals += alpha_direct(pair, prompt, gen, float(t))
        alpha[f"T{t}"] = {"alpha": sum(vals) / len(vals) if vals else None, "positions": len(vals)}
    log("theory: cost ratio c")
    cost = measure_cost(pair, prompts, s, log)
    c = cost["c"]["median"]
    target_ms = cost["target_ms_per_token"]["median"]
    rows = []
    systems = throughput["systems"]
    for t in TEMPS:
        a = alpha[f"T{t}"]["alpha"]
        for k in s.ks:
            sysrow = systems.get(spec_name(k, t), {})
            verify_ms = (sysrow.get("verify_ms") or {}).get("median")
            v = verify_ms / target_ms if verify_ms and target_ms else None
            known = a is not None
            rows.append({
                "T": t, "K": k, "alpha_direct": a, "alpha_traces": sysrow.get("acceptance_rate"),
                "expected_tokens_per_cycle": expected_tokens_per_cycle(a, k) if known else None,
                "measured_tokens_per_cycle": sysrow.get("tokens_per_cycle"),
                "verify_cost": v,
                "predicted_speedup": expected_speedup(a, k, c) if known and c else None,
                "predicted_speedup_verify_cost": (expected_tokens_per_cycle(a, k) / (k * c + v)
                                                  if known and c and v else None),
                "measured_speedup": (sysrow.get("speedup_vs_ar") or {}).get("median"),
                "alpha_needed_for_1.3x": alpha_needed(1.3, k, c, v) if c and v else None,
            })
    best = {}
    for t in TEMPS:
        mine = [r for r in rows if r["T"] == t]
        pred = [r for r in mine if r["predicted_speedup"] is not None]
        meas = [r for r in mine if r["measured_speedup"] is not None]
        best[f"T{t}"] = {
            "predicted_k": max(pred, key=lambda r: r["predicted_speedup"])["K"] if pred else None,
            "predicted_k_verify_cost": max((r for r in pred if r["predicted_speedup_verify_cost"]),
                                           key=lambda r: r["predicted_speedup_verify_cost"], default={}).get("K"),
            "measured_k": max(meas, key=lambda r: r["measured_speedup"])["K"] if meas else None,
        }
    return {"alpha": alpha, "cost": cost, "rows": rows, "best_k": best}
