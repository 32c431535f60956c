"""`python -m bench.gpu`: what a speculative cycle costs on a GPU, measured without any model file.

The models are random-weight Llamas built from configs shaped like the published pair
SmolLM2-1.7B (target: hidden 2048, 24 layers, 32 query / 32 KV heads, MLP 8192, vocabulary 49,152)
and SmolLM2-135M (draft: hidden 576, 30 layers, 9 / 3 heads, MLP 1536), in bfloat16. Random
weights decide nothing about cost (the same matmuls run whatever the values), but they decide
acceptance, so acceptance is *forced* with what-if mode (`DecodeConfig(forced_outcomes=...)`):

  all accepted   every draft passes, a bonus token is drawn: K+1 tokens per cycle (and the draft
                 model catches up two tokens next cycle);
  reject at 1    the first draft fails: 1 corrected token per cycle, K-1 drafts wasted;
  reject at K    the last draft fails: K tokens per cycle.

Sections (each timed with `torch.cuda.synchronize()` around it; medians of repeated runs):

  baseline  ms per token of each model decoding alone (AutoregressiveDecoder, paged cache), and
            the cost ratio c = draft / target;
  cycles    ms per cycle vs K for each pattern and proposer (the draft model; the feature head
            `specviz.FeatureHead.random(target)` with the full vocabulary and trimmed to 8,192
            tokens as the shipped head is), with the speedup over plain decoding that a run of
            such cycles would give: tokens per cycle x target ms per token / ms per cycle;
  verify    v(K): one target forward over K+1 tokens / a one-token forward, at a 512 context;
  paging    paged vs contiguous cache at 512 / 2,048 / 8,192 positions of random K/V (one-token
            decode and a K = 4 verify pass; the paged layout gathers its blocks every forward).

It writes gpu.md and gpu.json into --out (default docs/ on a GPU). `--tiny` runs the same code
with tiny shapes in seconds; on a machine without CUDA the report says in its first line that it
is a CPU smoke and not a GPU measurement, and it is never written into docs/ unless asked.
`scripts/device_check.sh` runs this after the device tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .common import REPO, Log, median, summary

TARGET_SHAPE = dict(  # SmolLM2-1.7B
    vocab_size=49152, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
    num_attention_heads=32, num_key_value_heads=32, tie_word_embeddings=True,
)
DRAFT_SHAPE = dict(  # SmolLM2-135M
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
    num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
)
TINY_TARGET = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True)
TINY_DRAFT = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
HEAD_VOCAB = 8192  # the shipped feature head's trimmed vocabulary
PATTERNS = ("all accepted", "reject at 1", "reject at K")


@dataclass(frozen=True)
class GpuSettings:
    shapes: str = "smollm2"  # or "tiny"
    dtype: str = "bfloat16"
    ks: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    head_ks: tuple[int, ...] = (1, 2, 4, 8)
    prompt_len: int = 128
    warmup_cycles: int = 2
    cycles: int = 10
    baseline_tokens: int = 32
    verify_context: int = 512
    verify_ks: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 8, 12, 16)
    contexts: tuple[int, ...] = (512, 2048, 8192)
    reps: int = 10
    budget_s: float = 330.0  # sections left when this is spent are skipped (and say so)

    @staticmethod
    def tiny() -> GpuSettings:
        return GpuSettings(shapes="tiny", dtype="float32", ks=(1, 2, 4), head_ks=(1, 4), prompt_len=12,
                           warmup_cycles=1, cycles=2, baseline_tokens=4, verify_context=32, verify_ks=(0, 1, 4),
                           contexts=(32, 64, 128), reps=2, budget_s=120.0)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def shape(self, role: str) -> dict[str, Any]:
        if self.shapes == "tiny":
            return TINY_TARGET if role == "target" else TINY_DRAFT
        return TARGET_SHAPE if role == "target" else DRAFT_SHAPE

    @property
    def max_positions(self) -> int:  # SmolLM2-1.7B's own limit is 8192: room for a verify pass past it
        return max(self.contexts) + 64


@dataclass
class Clock:
    """Synchronised wall-clock timing on `device`, and the run's time budget."""

    device: torch.device
    budget_s: float
    t0: float = field(default_factory=time.perf_counter)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def ms(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        self.sync()
        start = time.perf_counter()
        out = fn()
        self.sync()
        return 1000 * (time.perf_counter() - start), out

    @property
    def left_s(self) -> float:
        return self.budget_s - (time.perf_counter() - self.t0)


# --------------------------------------------------------------------------- models


def build_model(shape: dict[str, Any], device: torch.device, dtype: torch.dtype, max_positions: int, seed: int) -> Any:
    """A random-weight Llama of `shape`, built directly on `device` (no model file, no hub)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**shape, max_position_embeddings=max_positions, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # initialise in the final dtype: half the memory traffic of a cast
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(previous)
    model.generation_config.eos_token_id = None  # no EOS: forcing never stops at an end of text
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def build_pair(s: GpuSettings, device: torch.device) -> Any:
    from specviz.models import ModelPair

    target = build_model(s.shape("target"), device, s.torch_dtype, s.max_positions, seed=0)
    draft = build_model(s.shape("draft"), device, s.torch_dtype, s.max_positions, seed=1)
    return ModelPair(target=target, draft=draft, tokenizer=None, target_name="SmolLM2-1.7B-shaped (random)",
                     draft_name="SmolLM2-135M-shaped (random)")


def random_prompt(length: int, vocab: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2, vocab) for _ in range(length)]


def forced(pattern: str, k: int) -> tuple[tuple[int, bool], ...]:
    """What-if outcomes for a pattern: (1-based draft index, accept?) pairs."""
    if pattern == "all accepted":
        return tuple((i, True) for i in range(1, k + 1))
    if pattern == "reject at 1":
        return ((1, False),)
    if pattern == "reject at K":
        return (*((i, True) for i in range(1, k)), (k, False))
    raise ValueError(pattern)


def tokens_per_cycle(pattern: str, k: int) -> int:
    return {"all accepted": k + 1, "reject at 1": 1, "reject at K": k}[pattern]


# --------------------------------------------------------------------------- sections


def baseline(pair: Any, s: GpuSettings, clock: Clock, log: Log) -> dict[str, Any]:
    """ms per token of each model alone: one-token decode steps on a paged cache, prefill excluded."""
    from specviz import AutoregressiveDecoder, DecodeConfig

    prompt = random_prompt(s.prompt_len, s.shape("target")["vocab_size"])
    out: dict[str, Any] = {}
    for role in ("target", "draft"):
        model = getattr(pair, role)
        dec = AutoregressiveDecoder(model, DecodeConfig(temperature=1.0, max_new_tokens=s.baseline_tokens + 4,
                                                        instrument=False))
        dec.start(prompt)
        dec.eos_ids = frozenset()
        for _ in range(2):  # warm-up
            dec.step()
        steps = [clock.ms(dec.step)[0] for _ in range(s.baseline_tokens)]
        out[f"{role}_ms_per_token"] = summary(steps)
        log(f"baseline: {role} {median(steps):.2f} ms/token")
    out["c"] = out["draft_ms_per_token"]["median"] / out["target_ms_per_token"]["median"]
    return out


def cycle_ms(pair: Any, cfg: Any, prompt: list[int], s: GpuSettings, clock: Clock) -> dict[str, Any]:
    """Time `s.cycles` cycles (after `s.warmup_cycles`) of one decoder."""
    from specviz import SpeculativeDecoder

    dec = SpeculativeDecoder(pair, cfg)
    dec.start(prompt)
    for _ in range(s.warmup_cycles):
        dec.step()
    times, emitted, accepted = [], [], []
    for _ in range(s.cycles):
        ms, trace = clock.ms(dec.step)
        times.append(ms)
        emitted.append(len(trace.emitted))
        accepted.append(trace.num_accepted)
    return {"ms": summary(times), "tokens": emitted, "accepted": accepted}


def cycles(pair: Any, s: GpuSettings, clock: Clock, log: Log, target_ms: float, proposers: dict[str, Any]) -> dict:
    """ms per cycle vs K, per proposer and forced pattern, and the speedup such cycles would give."""
    from specviz import DecodeConfig

    prompt = random_prompt(s.prompt_len, s.shape("target")["vocab_size"], seed=1)
    rows = []
    for proposer, (name, head, ks) in proposers.items():
        with_head = dataclasses.replace(pair, feature_head=head)
        for k in ks:
            for pattern in PATTERNS if k > 1 else PATTERNS[:2]:  # at K = 1, reject at K is reject at 1
                if clock.left_s < 0:
                    log(f"cycles: time budget spent, skipping {proposer} K={k} {pattern}")
                    continue
                cfg = DecodeConfig(k=k, proposer=name, temperature=1.0, cache_layout="paged", page_size=16,
                                   instrument=False, forced_outcomes=forced(pattern, k),
                                   max_new_tokens=(s.warmup_cycles + s.cycles + 1) * (k + 1) + 1,
                                   max_context=s.max_positions)
                got = cycle_ms(with_head, cfg, prompt, s, clock)
                per_cycle = tokens_per_cycle(pattern, k)
                ms = got["ms"]["median"]
                rows.append({
                    "proposer": proposer, "k": k, "pattern": pattern, "ms_per_cycle": got["ms"],
                    "tokens_per_cycle": per_cycle, "tokens_seen": got["tokens"], "accepted_seen": got["accepted"],
                    "ms_per_token": ms / per_cycle, "speedup_vs_plain": per_cycle * target_ms / ms,
                })
            done = [r for r in rows if r["proposer"] == proposer and r["k"] == k]
            log(f"cycles: {proposer} K={k}: " + ", ".join(f"{r['pattern']} {r['ms_per_cycle']['median']:.1f} ms"
                                                            for r in done))
    return {"rows": rows, "marginal_draft_ms": marginal_draft_ms(rows)}


def marginal_draft_ms(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Per proposer: the least-squares slope of ms per cycle over K in the 'reject at 1' cycles,
    i.e. what one more draft costs (its proposal, plus one more verify position)."""
    out: dict[str, float | None] = {}
    for proposer in dict.fromkeys(r["proposer"] for r in rows):
        pts = [(r["k"], r["ms_per_cycle"]["median"]) for r in rows
               if r["proposer"] == proposer and r["pattern"] == "reject at 1"]
        if len(pts) < 2:
            out[proposer] = None
            continue
        mk = sum(k for k, _ in pts) / len(pts)
        mm = sum(m for _, m in pts) / len(pts)
        den = sum((k - mk) ** 2 for k, _ in pts)
        out[proposer] = sum((k - mk) * (m - mm) for k, m in pts) / den if den else None
    return out


def verify_cost(pair: Any, s: GpuSettings, clock: Clock, log: Log) -> dict[str, Any]:
    """v(K) = target forward over K+1 tokens / one-token forward, at `s.verify_context` positions."""
    from specviz.kv import create_cache
    from specviz.runtime import forward

    model = pair.target
    vocab = s.shape("target")["vocab_size"]
    cache = create_cache(model, "contiguous", max_len=s.max_positions, initial_len=s.verify_context + 32)
    forward(model, cache, random_prompt(s.verify_context, vocab, seed=2), "prefill", last_only=True)
    length = cache.get_seq_length()

    def once(n: int) -> float:
        ms, _ = clock.ms(lambda: forward(model, cache, random_prompt(n, vocab, seed=n), "verify"))
        cache.truncate(length, "rollback")
        return ms

    for n in (1, 5):  # warm-up
        once(n)
    got: dict[int, list[float]] = {k: [] for k in s.verify_ks}
    for r in range(s.reps):
        for k in (s.verify_ks if r % 2 == 0 else tuple(reversed(s.verify_ks))):
            got[k].append(once(k + 1))
    one = median(got[0]) if 0 in got else median([once(1) for _ in range(s.reps)])
    rows = [{"k": k, "ms": summary(v), "v": median(v) / one} for k, v in got.items()]
    log("verify: v(K) = " + ", ".join(f"{r['k']}: {r['v']:.2f}" for r in rows))
    return {"context": length, "one_token_ms": one, "rows": rows}


def filled_cache(model: Any, layout: str, length: int, max_len: int, initial_len: int | None = None) -> Any:
    """A cache holding `length` positions of random K/V; a paged pool's free list shuffled first,
    so its block table is scattered as after a long run. `initial_len`: as `create_cache`."""
    from specviz.kv import create_cache

    cache = create_cache(model, layout, page_size=16, policy="free", max_len=max_len, initial_len=initial_len)
    if layout == "paged":
        blocks = list(cache.pool.free_block_queue)
        random.Random(0).shuffle(blocks)
        cache.pool.free_block_queue.clear()
        cache.pool.free_block_queue.extend(blocks)
    cfg = model.config
    weight = next(model.parameters())
    heads, dim = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    gen = torch.Generator(device=weight.device).manual_seed(0)
    with torch.inference_mode():
        cache.reserve([0] * length, "prefill")
        for layer in cache.layers:
            kv = torch.randn(1, heads, length, dim, generator=gen, device=weight.device, dtype=weight.dtype)
            layer.update(kv, kv.clone())
    return cache


def timed_forward(clock: Clock, model: Any, cache: Any, n: int) -> float:
    """ms of one forward over n tokens at the cache's end; the cache is rolled back after."""
    from specviz.runtime import forward

    length = cache.get_seq_length()
    ms, _ = clock.ms(lambda: forward(model, cache, list(range(1, n + 1)), "decode", last_only=(n == 1)))
    cache.truncate(length, "rollback")
    return ms


def paging(pair: Any, s: GpuSettings, clock: Clock, log: Log) -> dict[str, Any]:
    """Paged vs contiguous: one-token decode and a K = 4 verify at each context length."""
    model = pair.target
    cfg = model.config
    bytes_per_position = (cfg.num_hidden_layers * 2 * cfg.num_key_value_heads
                          * (cfg.hidden_size // cfg.num_attention_heads) * torch.finfo(s.torch_dtype).bits // 8)
    rows = []
    for length in s.contexts:
        if clock.left_s < 0:
            log(f"paging: time budget spent, skipping context {length}")
            continue
        caches = {lay: filled_cache(model, lay, length, s.max_positions, initial_len=s.max_positions)
                  for lay in ("contiguous", "paged")}
        for cache in caches.values():  # warm-up
            timed_forward(clock, model, cache, 1)
            timed_forward(clock, model, cache, 5)
        got = {lay: {"decode_ms": [], "verify_ms": []} for lay in caches}
        for r in range(s.reps):
            for layout in (caches if r % 2 == 0 else reversed(list(caches))):
                got[layout]["decode_ms"].append(timed_forward(clock, model, caches[layout], 1))
                got[layout]["verify_ms"].append(timed_forward(clock, model, caches[layout], 5))
        row: dict[str, Any] = {"context": length, "kv_bytes": bytes_per_position * length}
        for layout, metrics in got.items():
            for name, vals in metrics.items():
                row[f"{layout}_{name}"] = summary(vals)
        for name in ("decode_ms", "verify_ms"):
            row[f"paged_over_contiguous_{name}"] = median(got["paged"][name]) / median(got["contiguous"][name])
        rows.append(row)
        log(f"paging: L={length}: decode contiguous {row['contiguous_decode_ms']['median']:.2f} ms, "
            f"paged {row['paged_decode_ms']['median']:.2f} ms")
        del caches
        if clock.device.type == "cuda":
            torch.cuda.empty_cache()
    return {"bytes_per_position": bytes_per_position, "rows": rows}


# --------------------------------------------------------------------------- run + report


def environment(device: torch.device) -> dict[str, Any]:
    import transformers

    env: dict[str, Any] = {
        "device": str(device), "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "platform": platform.platform(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   cuda=torch.version.cuda, sm_count=props.multi_processor_count)
    return env


def run(s: GpuSettings, device: torch.device, log: Log, tests_summary: str = "") -> dict[str, Any]:
    from specviz import FeatureHead

    clock = Clock(device, s.budget_s)
    t0 = time.perf_counter()
    pair = build_pair(s, device)
    clock.sync()
    log(f"built the random pair on {device} in {time.perf_counter() - t0:.1f} s")
    results: dict[str, Any] = {
        "kind": "gpu" if device.type == "cuda" else "cpu-smoke",
        "settings": asdict(s), "environment": environment(device), "tests": tests_summary,
        "models": {"target": s.shape("target"), "draft": s.shape("draft"), "dtype": s.dtype,
                   "max_position_embeddings": s.max_positions},
        "skipped": [],
    }
    if device.type == "cuda":
        results["models"]["gpu_memory_after_build_gib"] = round(torch.cuda.memory_allocated(device) / 2**30, 2)
    results["baseline"] = baseline(pair, s, clock, log)
    target_ms = results["baseline"]["target_ms_per_token"]["median"]
    vocab = s.shape("target")["vocab_size"]
    head_vocab = list(range(min(HEAD_VOCAB, vocab // 2)))
    proposers = {
        "draft model": ("draft", None, s.ks),
        "feature head": ("feature", FeatureHead.random(pair.target, seed=0), s.head_ks),
        f"feature head ({len(head_vocab)} tokens)": ("feature", FeatureHead.random(pair.target, seed=0,
                                                                                     vocab=head_vocab), s.head_ks),
    }
    results["cycles"] = cycles(pair, s, clock, log, target_ms, proposers)
    for name, section in (("verify", verify_cost), ("paging", paging)):
        if clock.left_s < 0:
            results["skipped"].append(name)
            log(f"{name}: time budget spent, skipped")
            continue
        results[name] = section(pair, s, clock, log)
    results["seconds"] = round(time.perf_counter() - clock.t0, 1)
    if device.type == "cuda":
        results["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return results


def _fmt(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def render(results: dict[str, Any]) -> str:
    env, s = results["environment"], results["settings"]
    smoke = results["kind"] != "gpu"
    lines = []
    if smoke:
        lines += ["# CPU smoke, not a GPU measurement",
                  "",
                  "This report was produced by `bash scripts/device_check.sh --cpu-smoke` (tiny shapes on a CPU) to",
                  "test the harness. Its numbers mean nothing about a GPU.", ""]
    else:
        lines += ["# specviz on a GPU: synthetic SmolLM2-1.7B / SmolLM2-135M pair", ""]
    lines += [
        f"Produced by `bash scripts/device_check.sh` (`python -m bench.gpu`) in {results['seconds']} s on "
        f"**{env.get('gpu', env['device'])}** ({env['device']}; torch {env['torch']}, transformers "
        f"{env['transformers']}, Python {env['python']}).",
        "",
        f"Models: random weights, {results['models']['dtype']}, built from configs (no model files): target "
        f"{_shape(results['models']['target'])}; draft {_shape(results['models']['draft'])}. Acceptance is forced "
        "(what-if mode), so each pattern's tokens per cycle are exact; all times are medians with "
        "`torch.cuda.synchronize()` around each timed call. Decoding at temperature 1, paged cache, page 16.",
        "",
    ]
    if results.get("tests"):
        lines += [f"Device tests before the benchmark: **{results['tests']}**.", ""]
    lines += ["## Headline", "", *headline(results), ""]
    b = results["baseline"]
    lines += [
        "## Baseline: each model alone",
        "",
        f"Target {_fmt(b['target_ms_per_token']['median'])} ms/token, draft {_fmt(b['draft_ms_per_token']['median'])}"
        f" ms/token: cost ratio **c = {_fmt(b['c'], 3)}**.",
        "",
        "## ms per cycle vs K, by forced acceptance pattern",
        "",
        "Speedup = tokens per cycle x target ms per token / ms per cycle: what a run made only of such",
        "cycles would gain over plain decoding of the target.",
        "",
        "| proposer | K | pattern | tokens/cycle | ms/cycle | ms/token | speedup vs plain |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in results["cycles"]["rows"]:
        lines.append(f"| {r['proposer']} | {r['k']} | {r['pattern']} | {r['tokens_per_cycle']} | "
                     f"{_fmt(r['ms_per_cycle']['median'])} | {_fmt(r['ms_per_token'])} | "
                     f"{_fmt(r['speedup_vs_plain'])}x |")
    lines += ["", "Marginal cost of one more draft (slope of ms/cycle over K, 'reject at 1'): " + ", ".join(
        f"{p} {_fmt(v)} ms" for p, v in results["cycles"]["marginal_draft_ms"].items()) + ".", ""]
    if "verify" in results:
        v = results["verify"]
        lines += [f"## Verify cost v(K) at {v['context']} positions", "",
                  f"A one-token target forward takes {_fmt(v['one_token_ms'])} ms.", "",
                  "| K | forward over K+1 tokens (ms) | v(K) |", "|---:|---:|---:|"]
        lines += [f"| {r['k']} | {_fmt(r['ms']['median'])} | {_fmt(r['v'])} |" for r in v["rows"]]
        lines.append("")
    if "paging" in results:
        p = results["paging"]
        lines += ["## Paged vs contiguous cache", "",
                  f"Random K/V filled to each length ({p['bytes_per_position'] // 1024} KiB per position); "
                  "the paged block table is scattered.", "",
                  "| context | KV (MiB) | decode contiguous | decode paged | paged/contig. | verify (K=4) contiguous "
                  "| verify paged | paged/contig. |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in p["rows"]:
            lines.append(
                f"| {r['context']} | {r['kv_bytes'] / 2**20:.0f} | {_fmt(r['contiguous_decode_ms']['median'])} ms | "
                f"{_fmt(r['paged_decode_ms']['median'])} ms | {_fmt(r['paged_over_contiguous_decode_ms'])}x | "
                f"{_fmt(r['contiguous_verify_ms']['median'])} ms | {_fmt(r['paged_verify_ms']['median'])} ms | "
                f"{_fmt(r['paged_over_contiguous_verify_ms'])}x |")
        lines.append("")
    if results["skipped"]:
        lines += [f"Skipped for lack of time: {', '.join(results['skipped'])}.", ""]
    if "peak_gpu_memory_gib" in results:
        lines += [f"Peak GPU memory: {results['peak_gpu_memory_gib']} GiB.", ""]
    lines += [f"Settings: `{json.dumps(s)}`", ""]
    return "\n".join(lines)


def headline(results: dict[str, Any]) -> list[str]:
    """One line per proposer: its best speedup when every draft is accepted, and what a cycle
    whose first draft fails costs in target steps (the price of a wrong guess)."""
    out = []
    target_ms = results["baseline"]["target_ms_per_token"]["median"]
    rows = results["cycles"]["rows"]
    for proposer in dict.fromkeys(r["proposer"] for r in rows):
        mine = [r for r in rows if r["proposer"] == proposer]
        best = max((r for r in mine if r["pattern"] == "all accepted"), key=lambda r: r["speedup_vs_plain"],
                   default=None)
        worst = max((r for r in mine if r["pattern"] == "reject at 1"), key=lambda r: r["k"], default=None)
        if best is None or worst is None:
            continue
        out.append(
            f"- {proposer}: all drafts accepted, best **{best['speedup_vs_plain']:.2f}x** plain decoding (K = "
            f"{best['k']}); a cycle rejected at its first draft costs {worst['ms_per_cycle']['median'] / target_ms:.1f}"
            f" target steps at K = {worst['k']}."
        )
    if "paging" in results and results["paging"]["rows"]:
        last = results["paging"]["rows"][-1]
        out.append(f"- paged / contiguous one-token decode at {last['context']} positions: "
                   f"{last['paged_over_contiguous_decode_ms']:.2f}x.")
    if "verify" in results:
        top = results["verify"]["rows"][-1]
        out.append(f"- verify cost v({top['k']}) = {top['v']:.2f} one-token forwards.")
    return out


def _shape(shape: dict[str, Any]) -> str:
    return (f"hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, {shape['num_attention_heads']} "
            f"heads / {shape['num_key_value_heads']} KV, MLP {shape['intermediate_size']}, vocabulary "
            f"{shape['vocab_size']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes, seconds in all (the CPU smoke)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where gpu.md / gpu.json go (default: docs/ on CUDA, a new temporary folder otherwise)")
    ap.add_argument("--budget-s", type=float, default=None, help="skip what is left after this many seconds")
    ap.add_argument("--tests-summary", default="", help="the device tests' closing line, quoted in the report")
    args = ap.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench.gpu: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    s = GpuSettings.tiny() if args.tiny else GpuSettings()
    if device.type == "cpu" and not args.tiny:
        print("bench.gpu: the full shapes need a GPU; use --tiny for the CPU smoke", file=sys.stderr)
        return 2
    if args.budget_s is not None:
        s = GpuSettings(**{**asdict(s), "budget_s": args.budget_s})
    out = args.out
    if out is None:
        gpu_run = device.type == "cuda" and not args.tiny
        out = REPO / "docs" if gpu_run else Path(tempfile.mkdtemp(prefix="specviz-gpu-"))
    if device.type == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    log = Log()
    results = run(s, device, log, args.tests_summary)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.json").write_text(json.dumps(results, indent=1))
    (out / "gpu.md").write_text(render(results))
    log(f"wrote {out / 'gpu.md'} and {out / 'gpu.json'} ({results['kind']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
