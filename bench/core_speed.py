"""The core's speed, before and after a change: two checkouts of specviz, one interleaved run.

A refactor of the engine must not slow it down. This bench decodes the same prompts with the
default pair (feature head proposer, instrumentation off: the engine's fast path) under two
checkouts -- the baseline (a git revision, checked out into a temporary worktree) and the
working tree -- alternating them round by round in fresh worker processes, so drift on a shared
machine hits both alike. Per configuration and dtype it reports tokens/s of each, their
same-round ratio new/old (median over rounds), and the cycle's time *outside* model forwards
(the engine's own work: drafting loops, the rule, records, cache bookkeeping), measured by
timing every forward of the target, the draft and the head with hooks.

    python -m bench.core_speed --baseline bd22cf3 --rounds 3          # default: both dtypes
    python -m bench.core_speed --baseline bd22cf3 --dtypes float32 --into docs

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


def worker(dtype: str) -> dict:
    """In a fresh process, with the checkout under test first on sys.path: decode every prompt
    under each configuration; tokens/s and milliseconds per cycle outside model forwards."""
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
    modules = [m for m in (pair.target, pair.draft, pair.feature_head) if isinstance(m, torch.nn.Module)]
    for module in modules:
        module.register_forward_pre_hook(lambda *_: started.append(time.perf_counter()))
        module.register_forward_hook(lambda *_: in_forward.__setitem__(0, in_forward[0] + time.perf_counter()
                                                                     - started.pop()))
    out = {}
    for name, shape in CONFIGS.items():
        cfg = DecodeConfig(proposer="feature", temperature=0.0, max_new_tokens=NEW_TOKENS, instrument=False,
                           cache_layout="contiguous", **shape)
        dec = SpeculativeDecoder(pair, cfg)
        dec.start(prompts[0])
        dec.generate(max_cycles=3)  # warm-up
        tokens = cycles = 0
        in_forward[0] = 0.0
        t0 = time.perf_counter()
        for ids in prompts:
            dec.start(ids)
            while not dec.finished:
                tokens += len(dec.step().emitted)
                cycles += 1
        wall = time.perf_counter() - t0
        out[name] = {"tokens_per_s": tokens / wall, "outside_forwards_ms_per_cycle": 1000 * (wall - in_forward[0])
                     / cycles, "cycles": cycles, "tokens": tokens}
    return out


def run_worker(source: Path, dtype: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(source))
    cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(source)!r}); import json; "
           f"from bench.core_speed import worker; print(json.dumps(worker({dtype!r})))"]
    done = subprocess.run(cmd, env=env, cwd=source, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"worker failed in {source}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(baseline: Path, rounds: int, dtypes: list[str], log=print) -> dict:
    results: dict = {d: {c: {"old": [], "new": [], "ratio": []} for c in CONFIGS} for d in dtypes}
    for r in range(rounds):
        for dtype in dtypes:
            order = [("old", baseline), ("new", ROOT)] if r % 2 == 0 else [("new", ROOT), ("old", baseline)]
            got = {which: run_worker(src, dtype) for which, src in order}
            for c in CONFIGS:
                for which in ("old", "new"):
                    results[dtype][c][which].append(got[which][c])
                results[dtype][c]["ratio"].append(got["new"][c]["tokens_per_s"] / got["old"][c]["tokens_per_s"])
                log(f"round {r + 1}/{rounds} {dtype} {c}: new/old {results[dtype][c]['ratio'][-1]:.3f}")
    return results


def table(results: dict, revision: str) -> str:
    from .common import cpu_name

    lines = [f"Core speed, working tree vs `{revision}` (default pair, feature head, T=0, lean), "
             f"on {cpu_name()}, {os.cpu_count()} cores:", "",
             "| dtype | config | old tok/s | new tok/s | new/old (median) | outside forwards old -> new (ms/cycle) |",
             "|---|---|---|---|---|---|"]
    for dtype, per in results.items():
        for c, r in per.items():
            def med(which: str, key: str, r: dict = r) -> float:
                return statistics.median(x[key] for x in r[which])

            lines.append(f"| {dtype} | {c} | {med('old', 'tokens_per_s'):.1f} | {med('new', 'tokens_per_s'):.1f} | "
                         f"{statistics.median(r['ratio']):.3f} | {med('old', 'outside_forwards_ms_per_cycle'):.2f} -> "
                         f"{med('new', 'outside_forwards_ms_per_cycle'):.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="git revision to compare against")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--into", type=Path, help="append the table to DIR/benchmarks.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.baseline], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            (base / "bench" / "core_speed.py").write_text(Path(__file__).read_text())  # the same worker for both
            results = compare(base, args.rounds, args.dtypes.split(","))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    text = table(results, args.baseline)
    print(text)
    if args.into:
        with (args.into / "benchmarks.md").open("a") as f:
            f.write("\n\n" + text + "\n")


if __name__ == "__main__":
    main()
