"""The whole suite: run every section in order, then write docs/benchmarks.{md,json}.

Sections depend on each other only through data: theory reads the throughput runs (α on the
baseline's texts, verify times per K), app step uses the measured target ms/token as its
"baseline" figure. Peak RSS is recorded after each section.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from specviz.kernels import parameter_count

from . import (
    app_step,
    load,
    lockstep,
    memory,
    paging,
    profiling,
    proposers,
    report,
    separate,
    theory,
    threads,
    throughput,
)
from .common import Log, Settings, load_prompts, machine, peak_rss_mb

SECTIONS = ("throughput", "lockstep", "theory", "proposers", "app_step", "paging", "memory", "profile")
# Run only when asked for (`--sections ...,load`): it starts real servers, one per N (bench/load.py).
OPTIONAL_SECTIONS = ("load",)


def run_suite(
    pair: Any,
    settings: Settings,
    out_dir: Path,
    *,
    threads_arg: str = "auto",
    pair_name: str = "default",
    command: str = "",
    sections: tuple[str, ...] = SECTIONS,
    log: Log | None = None,
) -> dict[str, Any]:
    log = log or Log()
    t_start = time.perf_counter()
    prompts = load_prompts(pair.tokenizer, settings.prompts)
    results = _run_header(pair, settings, prompts, pair_name, command)
    results["threads"] = _choose_threads(pair, prompts, threads_arg, log)
    for name, run in _section_runs(pair, prompts, settings, log, pair_name).items():
        if name not in sections or (name == "theory" and "throughput" not in results):
            continue  # theory reads the throughput runs
        t0 = time.perf_counter()
        results[name] = run(results)
        results["peak_rss_mb"][f"after_{name}"] = peak_rss_mb()
        results.setdefault("section_seconds", {})[name] = time.perf_counter() - t0
    results.get("throughput", {}).pop("_generated", None)
    results["wall_seconds"] = time.perf_counter() - t_start
    results["machine"]["load_average_end"] = os.getloadavg()
    results["goals"] = report.goals(results)
    _write(results, out_dir, log)
    return results


def _run_header(pair: Any, settings: Settings, prompts: list, pair_name: str, command: str) -> dict[str, Any]:
    """What was measured, where and how: the results before any section runs."""
    head = getattr(pair, "feature_head", None)
    return {
        "started_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "pair": {
            "kind": pair_name,
            "target": getattr(pair, "target_name", "target"),
            "draft": getattr(pair, "draft_name", "draft"),
            "target_params": parameter_count(pair.target),
            "draft_params": parameter_count(pair.draft),
            "dtype": str(next(pair.target.parameters()).dtype).removeprefix("torch."),
            "device": str(next(pair.target.parameters()).device),
        },
        "draft_file": _draft_file() if pair_name == "default" else None,
        "feature_head": head.info if head is not None else None,
        "settings": settings.to_dict(),
        "prompt_tokens": [len(p) for p in prompts],
        "machine": machine(),
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS")},
        "peak_rss_mb": {"after_load": peak_rss_mb()},
    }


def _choose_threads(pair: Any, prompts: list, threads_arg: str, log: Log) -> dict[str, Any]:
    if threads_arg == "auto":
        chosen = threads.probe(pair, prompts[0], sorted({1, min(2, os.cpu_count() or 1)}), 2, log)
    else:
        torch.set_num_threads(int(threads_arg))
        chosen = {"chosen": int(threads_arg), "how": "--threads"}
    return {**chosen, "interop": torch.get_num_interop_threads()}


def _section_runs(pair: Any, prompts: list, settings: Settings, log: Log, pair_name: str) -> dict[str, Any]:
    """Each section's run (given the results so far), in the order the suite runs them."""

    def app(results: dict[str, Any]) -> Any:
        baseline = (results.get("theory") or {}).get("cost", {}).get("target_ms_per_token", {}).get("median")
        return app_step.run(pair, prompts, settings, log, baseline)

    def load_run(results: dict[str, Any]) -> Any:
        opts = load.Options(pair=pair_name, sessions=(1,) if pair_name == "tiny" else load.Options.sessions)
        return load.run(opts, say=log)

    return {
        "throughput": lambda results: throughput.run(pair, prompts, settings, log),
        "lockstep": lambda results: lockstep.run(pair, prompts, settings, log),
        "theory": lambda results: theory.run(pair, prompts, results["throughput"], settings, log),
        "proposers": lambda results: proposers.run(
            pair, load_prompts(pair.tokenizer, settings.proposer_prompts), settings, log
        ),
        "app_step": app,
        "paging": lambda results: paging.run(settings, log),
        "memory": lambda results: memory.run(pair, prompts, settings, log),
        "profile": lambda results: profiling.run(pair, prompts[0], settings, log),
        "load": load_run,
    }


def _write(results: dict[str, Any], out_dir: Path, log: Log) -> None:
    """docs/benchmarks.{json,md}, keeping the sections other commands wrote there."""
    out_dir.mkdir(parents=True, exist_ok=True)
    kept = separate.read(out_dir, exclude=set(results))  # sections other commands wrote: kept as they are
    (out_dir / "benchmarks.json").write_text(json.dumps(results, indent=1, default=_jsonable) + "\n")
    (out_dir / "benchmarks.md").write_text(report.markdown(results))
    if "load" in results:
        separate.update_markdown(out_dir / "benchmarks.md", "load", load.markdown(results["load"]))
    separate.carry_over(kept, out_dir)
    log(f"wrote {out_dir / 'benchmarks.md'} and benchmarks.json ({results['wall_seconds']:.0f} s)")


def _draft_file() -> dict[str, Any] | None:
    """Which draft weights were measured: the draft is retrained now and then, and α depends on it."""
    import hashlib

    from specviz.models import default_draft_dir

    path = default_draft_dir() / "model.safetensors"
    if not path.is_file():
        return None
    stat = path.stat()
    return {
        "path": str(path.relative_to(path.parents[2])) if len(path.parents) > 2 else str(path),
        "modified_utc": dt.datetime.fromtimestamp(stat.st_mtime, dt.UTC).isoformat(timespec="seconds"),
        "sha256_12": hashlib.sha256(path.read_bytes()).hexdigest()[:12],
        "bytes": stat.st_size,
    }


def _jsonable(x: Any) -> Any:
    if isinstance(x, tuple):
        return list(x)
    return str(x)
