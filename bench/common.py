"""Shared helpers: settings, thread set-up, timing, interleaving, medians, machine description.

Everything that decides *how* a number is measured lives here, so that every section measures
the same way: `interleaved` runs the compared systems in a rotating order, `summary` reduces
samples to median/min/max, and `paired_ratios` takes ratios inside one round before the median
(a slow minute on a shared machine then slows both sides of a ratio alike).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specviz.cachedir import cpu_model, isa_caps
from specviz.prompting import chat_ids

REPO = Path(__file__).resolve().parent.parent
HELDOUT = REPO / "assets" / "prompts" / "heldout.jsonl"
# Open-ended held-out prompts (answers run past max_new_tokens, so every system decodes the same
# number of tokens at temperature 0); topics never seen by the draft's training.
PROMPT_IDS = ("heldout-0005", "heldout-0001", "heldout-0000", "heldout-0003")


@dataclass(frozen=True)
class Settings:
    """How much to measure. `full()` is the README suite; `quick()` debugs the harness."""

    prompts: int = 2
    max_new_tokens: int = 32
    rounds: int = 2  # interleaved rounds over all systems and prompts
    ks: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    hf_ks: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    variant_k: int = 4  # K at which layout and instrumentation variants are compared
    cost_tokens: int = 32  # tokens per model when measuring the draft/target cost ratio c
    cost_rounds: int = 3
    app_cycles: int = 20  # cycles per K for the app step latency
    app_ks: tuple[int, ...] = (4, 8)
    contexts: tuple[int, ...] = (128, 512, 2048, 4096)
    context_reps: int = 5
    synthetic: str = "smollm2"  # shape of the random-weight model for the context sweep
    memory_tokens: int = 96  # new tokens of the long run that measures fragmentation
    profile_cycles: int = 6
    warmup_tokens: int = 6
    proposer_prompts: int = 6  # held-out prompts for the proposer comparison
    proposer_max_new: int = 64
    proposer_ks: tuple[int, ...] = (1, 2, 3, 4, 6)
    proposer_rounds: int = 1
    quality_k: int = 4  # K of the acceptance / tokens-per-cycle / alpha bounds

    @staticmethod
    def full() -> Settings:
        return Settings()

    @staticmethod
    def quick() -> Settings:
        return Settings(prompts=1, max_new_tokens=12, rounds=1, ks=(2, 4), hf_ks=(4,), cost_tokens=6, cost_rounds=1,
                        app_cycles=3, contexts=(64, 256), context_reps=2, memory_tokens=24, profile_cycles=2,
                        warmup_tokens=2, proposer_prompts=2, proposer_max_new=16, proposer_ks=(2, 4))

    @staticmethod
    def tiny() -> Settings:
        """For the smoke test on the tiny random pair: every code path, seconds in all."""
        return Settings(prompts=1, max_new_tokens=6, rounds=1, ks=(2,), hf_ks=(2,), variant_k=2, cost_tokens=3,
                        cost_rounds=1, app_cycles=2, app_ks=(2,), contexts=(16, 48), context_reps=1, synthetic="tiny",
                        memory_tokens=8, profile_cycles=1, warmup_tokens=1, proposer_prompts=1, proposer_max_new=6,
                        proposer_ks=(2,), quality_k=2)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_prompts(tokenizer: Any, n: int) -> list[list[int]]:
    """Token ids of the first n benchmark prompts, chat template applied (as the app does)."""
    by_id = {row["id"]: row["prompt"] for row in _jsonl(HELDOUT)}
    # the four benchmark prompts first, then the other held-out prompts in file order
    texts = [by_id[i] for i in PROMPT_IDS if i in by_id] + [t for i, t in by_id.items() if i not in PROMPT_IDS]
    return [encode(tokenizer, text) for text in texts[:n]]


NATURAL = REPO / "assets" / "prompts" / "natural.jsonl"
GROUNDED = REPO / "assets" / "prompts" / "grounded.jsonl"  # input-grounded tasks; `copies`: the answer copies its input


def prompt_set(tokenizer: Any, name: str, n: int) -> list[list[int]]:
    """Token ids of n prompts of a set, evenly spread over the file (so over its kinds):
    ``natural`` (hand-written, never trained on; conversations keep their earlier turns),
    ``grounded`` (input-grounded tasks) or ``template`` (the template-built held-out prompts)."""
    return [encode(tokenizer, r.get("messages") or r["prompt"]) for r in prompt_rows(name, n)]


def prompt_rows(name: str, n: int) -> list[dict[str, Any]]:
    """The rows `prompt_set` picks (their ids, kinds and, for ``grounded``, `copies`)."""
    rows = _jsonl({"natural": NATURAL, "grounded": GROUNDED, "template": HELDOUT}[name])
    return [rows[i * len(rows) // n] for i in range(min(n, len(rows)))]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def encode(tokenizer: Any, text: str | list[dict]) -> list[int]:
    """Chat-template ids of a user message (or of a whole conversation ending with a user turn)."""
    messages = text if isinstance(text, list) else [{"role": "user", "content": text}]
    if getattr(tokenizer, "chat_template", None):
        return chat_ids(tokenizer, messages)
    return [int(i) for i in tokenizer.encode(text)]


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def median(values: Sequence[float]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None


def csv(text: str) -> list[str]:
    """The items of a comma-separated command-line value, blanks dropped."""
    return [x.strip() for x in text.split(",") if x.strip()]


def dtype_names(text: str, prog: str, allowed: Sequence[str] = ("float32", "bfloat16")) -> tuple[str, ...]:
    """The dtypes of a `--dtypes` value; exits naming the choices on an unknown one."""
    names = tuple(csv(text))
    bad = [x for x in names if x not in allowed]
    if bad:
        raise SystemExit(f"{prog}: unknown dtype {bad[0]!r}; choose from {', '.join(allowed)}")
    return names


@dataclass
class Sample:
    """One timed run of one system on one prompt in one round."""

    system: str
    round: int
    prompt: int
    seconds: float
    tokens: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def interleaved(
    systems: dict[str, Callable[[int], tuple[int, dict[str, Any]]]],
    prompts: int,
    rounds: int,
    log: Callable[[str], None] = print,
) -> list[Sample]:
    """Run every system on every prompt, `rounds` times, rotating the order each time.

    A system is `fn(prompt_index) -> (tokens produced, extra)`; it is timed whole (prefill
    included, as `generate` is). The rotation puts each system early and late in a round alike,
    so slow drifts of the machine's load do not favour whichever ran first."""
    names = list(systems)
    out: list[Sample] = []
    turn = 0
    for r in range(rounds):
        for p in range(prompts):
            order = names[turn % len(names) :] + names[: turn % len(names)]
            turn += 1
            for name in order:
                t0 = time.perf_counter()
                tokens, extra = systems[name](p)
                dt = time.perf_counter() - t0
                out.append(Sample(name, r, p, dt, tokens, extra))
            log(f"  round {r + 1}/{rounds} prompt {p + 1}/{prompts}: {len(order)} systems done")
    return out


def round_rates(samples: Sequence[Sample]) -> dict[str, dict[int, float]]:
    """tokens/s of each system in each round: all prompts of the round pooled (tokens / seconds)."""
    acc: dict[str, dict[int, list[float]]] = {}
    for s in samples:
        tok_sec = acc.setdefault(s.system, {}).setdefault(s.round, [0.0, 0.0])
        tok_sec[0] += s.tokens
        tok_sec[1] += s.seconds
    return {name: {r: t / sec for r, (t, sec) in rounds.items() if sec > 0} for name, rounds in acc.items()}


def paired_ratios(samples: Sequence[Sample], num: str, den: str, per: str = "prompt") -> list[float]:
    """Ratios of num's tokens/s to den's, paired by (round, prompt): measured side by side."""
    by_key = {(s.system, s.round, s.prompt): s for s in samples}
    out = []
    for (name, r, p), s in by_key.items():
        if name != num:
            continue
        other = by_key.get((den, r, p))
        if other is not None and other.tokens_per_s > 0:
            out.append(s.tokens_per_s / other.tokens_per_s)
    return out


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import psutil
    import transformers

    return {"cpu": cpu_name(), "logical_cpus": os.cpu_count(), "physical_cpus": psutil.cpu_count(logical=False),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "platform": platform.platform(),
            "cuda_available": torch.cuda.is_available(), "load_average_start": os.getloadavg(),
            "git_commit": _git("rev-parse", "--short", "HEAD")}


def cpu_name() -> str:
    """The CPU's model name, printed beside every figure (specviz.cachedir), with the instruction-set
    caps in force when a run emulates a smaller CPU (`ONEDNN_MAX_CPU_ISA=AVX2` …: `cachedir.isa_caps`)."""
    caps = isa_caps()
    return cpu_model() + (f" (ISA capped: {caps})" if caps else "")


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


class Log:
    """Progress lines with elapsed time (stderr-free: the suite's stdout is its log)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:7.1f}s] {msg}", flush=True)
