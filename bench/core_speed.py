"""The core's speed, before and after a change: two checkouts of specviz, one interleaved run.

A refactor of the engine must not slow it down. This bench decodes the same prompts with the
default pair (feature head proposer, instrumentation off: the engine's fast path) under two
checkouts -- the baseline (a git revision, checked out into a temporary worktree) and the
working tree -- in two worker processes that stay up side by side and decode each (round,
configuration, prompt) in turn, in alternating order, so drift on a shared machine meets both
within seconds (whole worker processes alternated round by round left ±15 % between rounds on a
shared VM). Per configuration and dtype it reports tokens/s of each, the ratio new/old of each
such pair (median and quartiles), and the cycle's time *outside* model forwards
(the engine's own work: drafting loops, the rule, records, cache bookkeeping), measured by
timing every forward of the target, the draft and the head with hooks.

    python -m bench.core_speed --baseline bd22cf3 --rounds 4          # default: both dtypes
    python -m bench.core_speed --baseline bd22cf3 --dtypes float32 --into docs
    python -m bench.core_speed --baseline bd22cf3 --pinned-heap   # the code alone (pinned_heap_env)

Configurations: chain K=2 and tree width 4 / depth 4 / 16 nodes, T=0, 48 new tokens per prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {"chain-K2": dict(k=2), "tree-4x4x16": dict(k=4, tree_width=4, tree_nodes=16)}
PROMPTS = ("Why is the sky blue?", "Write a short poem about the sea.", "How do bees make honey?")
NEW_TOKENS = 48


def serve(dtype: str) -> None:
    """A worker process, with the checkout under test first on sys.path: it loads the pair once, then
    answers each line "CONFIG PROMPT" on stdin by decoding that prompt under that configuration and
    printing one JSON line: tokens, wall seconds, seconds inside model forwards (timed by hooks on
    the target, the draft and the head), cycles."""
    import torch

    from specviz import DecodeConfig, SpeculativeDecoder, load_default_pair

    torch.set_num_threads(os.cpu_count() or 1)
    pair = load_default_pair(dtype=dtype)
    tok = pair.tokenizer
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                            return_dict=True)["input_ids"])
               for p in PROMPTS]
    in_forward = [0.0]
    started: list[float] = []
    for module in (m for m in (pair.target, pair.draft, pair.feature_head) if isinstance(m, torch.nn.Module)):
        module.register_forward_pre_hook(lambda *_: started.append(time.perf_counter()))
        module.register_forward_hook(lambda *_: in_forward.__setitem__(0, in_forward[0] + time.perf_counter()
                                                                     - started.pop()))
    decoders = {name: SpeculativeDecoder(pair, DecodeConfig(
        proposer="feature", temperature=0.0, max_new_tokens=NEW_TOKENS, instrument=False, cache_layout="contiguous",
        **shape)) for name, shape in CONFIGS.items()}
    print("ready", flush=True)
    for line in sys.stdin:
        name, index = line.split()
        dec = decoders[name]
        in_forward[0], cycles = 0.0, 0
        t0 = time.perf_counter()
        dec.start(prompts[int(index)])
        while not dec.finished:
            dec.step()
            cycles += 1
        wall = time.perf_counter() - t0
        print(json.dumps({"tokens": len(dec.committed) - len(prompts[int(index)]), "wall": wall,
                          "forward": in_forward[0], "cycles": cycles}), flush=True)


def pinned_heap_env() -> dict[str, str]:
    """glibc's thresholds pinned from the start, by environment, at `specviz.allocator`'s values: in
    both workers, the ratio compares the code alone, not where the dynamic thresholds settled.
    (Imported here, in the parent: a baseline checkout may predate the module.)"""
    from specviz.allocator import MMAP_THRESHOLD, TRIM_THRESHOLD

    return {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


class Worker:
    """One `serve` process on a checkout."""

    def __init__(self, source: Path, dtype: str, pinned_heap: bool = False) -> None:
        code = (f"import sys; sys.path.insert(0, {str(source)!r}); from bench.core_speed import serve; "
                f"serve({dtype!r})")
        env = dict(os.environ, PYTHONPATH=str(source), **(pinned_heap_env() if pinned_heap else {}))
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=source, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"the worker in {source} did not start")

    def decode(self, config: str, prompt: int) -> dict:
        self.proc.stdin.write(f"{config} {prompt}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("a worker died (its error is above)")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def compare(baseline: Path, rounds: int, dtypes: list[str], log=print, pinned_heap: bool = False) -> dict:
    """Per dtype, both checkouts' workers side by side; every (round, config, prompt) decodes once in
    each, in alternating order, so drift on a shared machine meets both within seconds. Each pair's
    tokens/s ratio new/old is kept, with each side's decodes."""
    results: dict = {d: {c: {"old": [], "new": [], "ratio": []} for c in CONFIGS} for d in dtypes}
    for dtype in dtypes:
        workers = {"old": Worker(baseline, dtype, pinned_heap), "new": Worker(ROOT, dtype, pinned_heap)}
        try:
            for w in workers.values():  # warm-up: one decode per configuration
                for c in CONFIGS:
                    w.decode(c, 0)
            for r in range(rounds):
                for c in CONFIGS:
                    for i in range(len(PROMPTS)):
                        order = ("old", "new") if (r + i) % 2 == 0 else ("new", "old")
                        got = {which: workers[which].decode(c, i) for which in order}
                        for which in ("old", "new"):
                            results[dtype][c][which].append(got[which])
                        speed = {w: got[w]["tokens"] / got[w]["wall"] for w in got}
                        results[dtype][c]["ratio"].append(speed["new"] / speed["old"])
                    log(f"round {r + 1}/{rounds} {dtype} {c}: new/old median so far "
                        f"{statistics.median(results[dtype][c]['ratio']):.3f}")
        finally:
            for w in workers.values():
                w.close()
    return results


def table(results: dict, revision: str, pinned_heap: bool = False) -> str:
    from .common import cpu_name

    heap = ", malloc thresholds pinned in both" if pinned_heap else ""
    lines = [f"Core speed, working tree vs `{revision}` (default pair, feature head, T=0, lean{heap}), "
             f"on {cpu_name()}, {os.cpu_count()} cores:", "",
             "| dtype | config | decodes per side | old tok/s | new tok/s | new/old (median, quartiles) | "
             "outside forwards old -> new (ms/cycle) |",
             "|---|---|---|---|---|---|---|"]
    for dtype, per in results.items():
        for c, r in per.items():
            def total(which: str, key: str, r: dict = r) -> float:
                return sum(x[key] for x in r[which])

            def outside(which: str) -> float:
                return 1000 * (total(which, "wall") - total(which, "forward")) / total(which, "cycles")

            q1, median, q3 = statistics.quantiles(r["ratio"], n=4) if len(r["ratio"]) > 1 else [r["ratio"][0]] * 3
            lines.append(f"| {dtype} | {c} | {len(r['ratio'])} | {total('old', 'tokens') / total('old', 'wall'):.1f} | "
                         f"{total('new', 'tokens') / total('new', 'wall'):.1f} | {median:.3f} ({q1:.3f}–{q3:.3f}) | "
                         f"{outside('old'):.2f} -> {outside('new'):.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="git revision to compare against")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--pinned-heap", action="store_true",
                    help="pin glibc's malloc thresholds in both workers: the code alone is compared")
    ap.add_argument("--into", type=Path, help="append the table to DIR/benchmarks.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.baseline], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            (base / "bench" / "core_speed.py").write_text(Path(__file__).read_text())  # the same worker for both
            results = compare(base, args.rounds, args.dtypes.split(","), pinned_heap=args.pinned_heap)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    text = table(results, args.baseline, args.pinned_heap)
    print(text)
    if args.into:
        with (args.into / "benchmarks.md").open("a") as f:
            f.write("\n\n" + text + "\n")


if __name__ == "__main__":
    main()
