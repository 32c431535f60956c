"""Golden runs: what the decoder did, recorded once, so a reshaped engine can be held to it.

Each case decodes a tiny random pair (tests/engine_helpers.make_pair) under one setting of the
matrix seeds x proposers x layouts/policies x chain/tree x T=0/T=1, plus what-if cases, and
keeps every trace whole (tokens, verdicts, u draws, cache events, snapshots, top-N lists) with
the next draws of both random streams after the run (the RNG stream a cycle consumed).
Timings are dropped (they are the only field that is not a function of the config).

    python tests/golden_runs.py        # (re)record tests/golden/runs.json.gz from the current code

`tests/test_golden.py` decodes the same cases with the current code and compares: integers and
strings exactly, floats to 1e-6 (a vectorised rule may sum in another order).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from engine_helpers import make_pair  # noqa: E402

from specviz import DecodeConfig, SpeculativeDecoder  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "runs.json.gz"
PROMPT = [3, 17, 5, 9, 3, 17, 5, 22, 41, 3, 17]  # repeats, so prompt lookup finds matches
LAYOUTS = {"contiguous": dict(cache_layout="contiguous"),
           "paged3-free": dict(cache_layout="paged", page_size=3, free_policy="free"),
           "paged3-keep": dict(cache_layout="paged", page_size=3, free_policy="keep")}
SHAPES = {"chain": dict(k=4), "tree": dict(k=3, tree_width=2, tree_nodes=7)}


def cases() -> dict[str, dict]:
    """name -> DecodeConfig fields (plus the pair's seed)."""
    out: dict[str, dict] = {}
    for seed in (0, 1):
        for proposer in ("draft", "feature", "lookup"):
            for layout, lay in LAYOUTS.items():
                for shape, shp in SHAPES.items():
                    for temp in (0.0, 1.0):
                        name = f"s{seed}-{proposer}-{layout}-{shape}-T{temp:g}"
                        out[name] = dict(seed=seed, proposer=proposer, temperature=temp, **lay, **shp)
    for proposer in ("draft", "feature", "lookup"):  # what-if: forced accepts and rejects, T=1 and T=0
        for temp in (0.0, 1.0):
            out[f"whatif-accept-{proposer}-T{temp:g}"] = dict(
                seed=3, proposer=proposer, temperature=temp, k=4, forced_outcomes=((1, True), (2, True)))
            out[f"whatif-reject-{proposer}-T{temp:g}"] = dict(
                seed=4, proposer=proposer, temperature=temp, k=4, forced_outcomes=((2, False),))
    out["topk-topp-draft"] = dict(seed=5, proposer="draft", temperature=0.8, top_k=10, top_p=0.9, k=3)
    out["adaptive-draft"] = dict(seed=6, proposer="draft", temperature=1.0, k=5, draft_confidence=0.5)
    return out


_PAIRS: dict[int, object] = {}


def run_case(fields: dict) -> dict:
    """Decode one case; the traces as plain dicts without timings, and the streams' next draws."""
    fields = dict(fields)
    pair_seed = fields.get("seed", 0) % 2
    if pair_seed not in _PAIRS:
        _PAIRS[pair_seed] = make_pair("llama", seed=pair_seed)
    cfg = DecodeConfig(max_new_tokens=24, check_invariant=False, **fields)
    dec = SpeculativeDecoder(_PAIRS[pair_seed], cfg)
    dec.start(PROMPT)
    traces = []
    while not dec.finished:
        trace = dec.step().to_dict()
        trace.pop("timings_ms")
        traces.append(trace)
    streams = {role: torch.rand(4, generator=gen).tolist() for role, gen in dec._session.generators.items()}
    return {"committed": dec.committed, "traces": traces, "streams": streams}


RUN_FILES = {"draft-chain": dict(seed=0, proposer="draft", k=4, temperature=1.0),
             "feature-tree": dict(seed=1, proposer="feature", k=3, tree_width=2, tree_nodes=7, temperature=1.0)}
REPLAY_LAYOUT = dict(cache_layout="paged", page_size=2, free_policy="keep")


def run_file(fields: dict) -> str:
    """One run as a run file (specviz.runfile), written by the current code."""
    from specviz.runfile import record_run

    pair_seed = fields["seed"] % 2
    if pair_seed not in _PAIRS:
        _PAIRS[pair_seed] = make_pair("llama", seed=pair_seed)
    cfg = DecodeConfig(max_new_tokens=16, cache_layout="contiguous", **fields)
    dec = SpeculativeDecoder(_PAIRS[pair_seed], cfg)
    dec.start(PROMPT)
    prefill = (dec.target_cache.snapshot(len(PROMPT)), dec.proposer.snapshot(len(PROMPT)))
    traces = []
    while not dec.finished:
        traces.append(dec.step())
    record = record_run(fields["proposer"], "tiny", fields["proposer"], cfg, "golden", False, PROMPT, prefill,
                        traces, dec.token_text, max_context=dec.max_context)
    return record.to_json()


def replayed(text: str) -> dict:
    """The run file replayed in another layout, as plain dicts (what `test_golden` compares)."""
    from specviz.replay import replay_run
    from specviz.runfile import load_run

    record = replay_run(load_run(text), **REPLAY_LAYOUT)
    return json.loads(record.to_json())


def record() -> None:
    torch.set_num_threads(1)  # as tests/conftest.py: float results depend on the thread count
    runs = {name: run_case(fields) for name, fields in cases().items()}
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_bytes(gzip.compress(json.dumps(runs, sort_keys=True).encode(), mtime=0))
    print(f"{len(runs)} runs -> {GOLDEN} ({GOLDEN.stat().st_size / 1e6:.2f} MB)")
    for name, fields in RUN_FILES.items():
        text = run_file(fields)
        (GOLDEN.parent / f"{name}.run.json").write_text(text)
        (GOLDEN.parent / f"{name}.replayed.json").write_text(json.dumps(replayed(text), sort_keys=True))


def load() -> dict:
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


# Trace fields added after the recording, with the value every recorded (pre-retrieval) run must hold.
ADDED_SINCE = {"matched": None, "source": ""}


def differences(want, got, where: str = "", tol: float = 1e-6) -> list[str]:
    """Where `got` differs from `want`: ints/strings/None exactly, floats to `tol` (relative or absolute);
    a field added since the recording must hold its `ADDED_SINCE` default."""
    if isinstance(want, dict) and isinstance(got, dict):
        added = {k for k in set(got) - set(want) if k in ADDED_SINCE and got[k] == ADDED_SINCE[k]}
        odd = (set(want) ^ set(got)) - added
        out = [f"{where}: keys {sorted(odd)}"] if odd else []
        for key in want.keys() & got.keys():
            out += differences(want[key], got[key], f"{where}.{key}", tol)
        return out
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        if len(want) != len(got):
            return [f"{where}: length {len(want)} != {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in differences(a, b, f"{where}[{i}]", tol)]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        ok = abs(want - got) <= tol * max(1.0, abs(want))
        return [] if ok else [f"{where}: {want!r} != {got!r}"]
    return [] if want == got and type(want) is type(got) else [f"{where}: {want!r} != {got!r}"]


if __name__ == "__main__":
    record()
