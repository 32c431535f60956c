"""Golden runs: what the decoder did, recorded once, so a reshaped engine can be held to it.

Each case decodes a tiny random pair (tests/engine_helpers.make_pair) under one setting of the
matrix seeds x proposers x layouts/policies x chain/tree x T=0/T=1, plus what-if cases, and
keeps every trace whole (tokens, verdicts, u draws, cache events, snapshots, top-N lists) with
the next draws of both random streams after the run (the RNG stream a cycle consumed).
Timings (`timings_ms`, `total_ms`) are dropped: they are the only fields that are not a function of the config.

    python tests/golden_runs.py        # (re)record tests/golden/runs.json.gz from the current code

`tests/test_golden.py` decodes the same cases with the current code and compares: integers and
strings exactly, floats to a tolerance derived from float32 rounding (`FLOAT_TOL`: another CPU's
kernels sum in another order).
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
        trace.pop("timings_ms"), trace.pop("total_ms")
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
ADDED_SINCE = {"matched": None, "source": "", "auto": None, "total_ms": None, "cost_law": None, "polls": []}


# How far a recorded float may move on another CPU (or thread count, or kernel): the rule, from the
# arithmetic. Every float in a golden run is a probability, a ratio of two (min(1, p/q)) or an overlap
# sum_x min(p, q), so the comparison is absolute on values in [0, 1]. A float32 reduction of n terms in
# another order (another CPU's GEMM blocking) moves its result by at most gamma_n = n*u of the terms'
# magnitude (Higham, Accuracy and Stability of Numerical Algorithms, 3.1), u = 2**-24. A logit of the
# tiny pair passes through at most 16 such reductions in series (2 layers x (RMSNorm, q/k/v, the
# attention's softmax sum, o, RMSNorm, gate/up, down) + the final norm and the LM head), each of at
# most n = 128 terms (2 x hidden), and its softmax through one more over the 64-token vocabulary:
# 17 x 128 x u = 1.3e-4 < 2**-12 = FLOAT_TOL. A residual max(0, p - q) / S is renormalised by the
# rejected mass S = 1 - overlap, which scales an absolute error by 1/S: the golden runs' sampled
# rejections all have S >= 1/16 (RESIDUAL_MASS_MIN, checked by tests/test_golden.py), hence
# RESIDUAL_TOL = FLOAT_TOL / RESIDUAL_MASS_MIN. (A greedy residual is one-hot: exact. A tree's residual
# after a second rejected sibling is divided again; its masses are not recorded, so that case rests on
# the same bound with no check.) Tokens,
# verdicts, u draws, events and snapshots are not floats of the model and are compared exactly.
FLOAT_TOL = 2.0**-12
RESIDUAL_MASS_MIN = 1 / 16
RESIDUAL_TOL = FLOAT_TOL / RESIDUAL_MASS_MIN


def differences(want, got, where: str = "", tol: float = FLOAT_TOL) -> list[str]:
    """Where `got` differs from `want`: ints/strings/None exactly, floats to `tol` (absolute on
    probabilities, relative above 1; `RESIDUAL_TOL` under a residual); a field added since the recording
    must hold its `ADDED_SINCE` default."""
    if isinstance(want, dict) and isinstance(got, dict):
        added = {k for k in set(got) - set(want) if k in ADDED_SINCE and got[k] == ADDED_SINCE[k]}
        odd = (set(want) ^ set(got)) - added
        out = [f"{where}: keys {sorted(odd)}"] if odd else []
        for key in want.keys() & got.keys():
            out += differences(want[key], got[key], f"{where}.{key}", RESIDUAL_TOL if key == "residual_top" else tol)
        return out
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        if len(want) != len(got):
            return [f"{where}: length {len(want)} != {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in differences(a, b, f"{where}[{i}]", tol)]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        ok = abs(want - got) <= tol * max(1.0, abs(want))
        return [] if ok else [f"{where}: {want!r} != {got!r}"]
    return [] if want == got and type(want) is type(got) else [f"{where}: {want!r} != {got!r}"]


def rejected_masses(runs: dict) -> list[float]:
    """S = 1 - overlap at each sampled chain rejection of the golden runs (what a residual is divided by)."""
    return [1.0 - draft["overlap"] for run in runs.values() for trace in run["traces"]
            if trace["residual_top"] and not trace["tree"] and trace["temperature"] > 0
            for draft in trace["drafts"] if draft["verdict"] == "rejected"]  # fmt: skip


if __name__ == "__main__":
    record()
