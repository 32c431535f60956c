"""The device checks (docs/design.md §7) on any torch device, in float32 and bfloat16, without pytest.

Four checks on the tiny random pairs of `engine_helpers.make_pair`, each one a plain function that
raises `AssertionError` when it fails:

* layout parity: each KV layout, fed in lock step with `transformers.DynamicCache` through prefill,
  decode, a verify-sized append, truncate and re-append, gives the same logits and K/V;
* the cache invariant after every cycle, for every proposer (draft model, feature head, lookup);
* greedy equality: at temperature 0 the committed tokens are the target's own greedy choices;
* exactness: the joint law of the first two generated tokens matches the target's exact one
  (chi-square), and the same samples reject the draft's law (the control that shows power).

`tests/test_cuda.py` runs them under pytest whenever CUDA is present. `scripts/device_check.sh` runs
that file, or, on a machine without pytest, this file directly:

    python tests/cuda_checks.py [--device cuda] [--quick] [--json results.json]

which prints one line per check and closes with "N passed, N failed" (exit status 1 on a failure).
Nothing here needs scipy, pytest or anything beyond torch and transformers.

Tolerances. float32 allows float noise between incremental and one-shot attention (and between
GPU kernels chosen for different shapes); bfloat16 has 8 mantissa bits, so K/V of magnitude ~0.4
differ by a few units in the last place (~0.002 each) when computed in different shapes. Every
tolerance is far below what a bookkeeping bug produces, and each check measures such a bug (a
cache compared with a sequence one token off) to show that it would have failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script: the repository root holds specviz
    sys.path.insert(0, str(HERE.parent))
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from engine_helpers import make_pair  # noqa: E402
from tiny_models import tiny_model  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from specviz import DecodeConfig, FeatureHead, SpeculativeDecoder  # noqa: E402
from specviz.autoregressive import AutoregressiveDecoder  # noqa: E402
from specviz.kv import create_cache  # noqa: E402
from specviz.models import ModelPair  # noqa: E402
from specviz.proposers import registry  # noqa: E402
from specviz.runtime import max_abs_kv_diff  # noqa: E402
from specviz.sampling import process_logits  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Tolerance:
    logits: float  # |logits - reference logits| in lock step
    kv: float  # |K/V - reference K/V| (parity in lock step; invariant against a fresh prefill)
    greedy_gap: float  # a greedy token's logit may sit this far below the maximum (near-ties)
    bug: float  # a cache compared with a sequence one token off must differ by more than this


TOLERANCE = {
    "float32": Tolerance(logits=1e-4, kv=5e-4, greedy_gap=1e-3, bug=1e-2),
    "bfloat16": Tolerance(logits=0.1, kv=0.03, greedy_gap=0.25, bug=0.1),
}
PROMPT = [3, 17, 42, 5, 9, 28, 11, 3, 17]  # ends on an earlier 2-gram: prompt lookup proposes too
PARITY_CASES = [("contiguous", 16, "free"), ("paged", 3, "free"), ("paged", 3, "keep"), ("paged", 1, "free")]
PROPOSERS = registry.names()  # every proposer in the table


def on_device(pair: ModelPair, device: str, dtype: torch.dtype, head_vocab=None, seed: int = 0) -> ModelPair:
    """The same pair moved to `device`/`dtype`, with its feature head rebuilt for the moved target
    (a head borrows the target's embedding and output head, so it is bound after the move)."""
    target = pair.target.to(device=device, dtype=dtype)
    draft = pair.draft.to(device=device, dtype=dtype)
    head = FeatureHead.random(target, seed=seed, vocab=head_vocab)
    return ModelPair(target=target, draft=draft, tokenizer=None, feature_head=head)


def tokens(n: int, seed: int, vocab: int = 64) -> list[int]:
    return torch.randint(2, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


# --------------------------------------------------------------------------- layout parity


class LockStep:
    """A specviz cache and a DynamicCache fed the same tokens; `worst` collects the largest
    logits and K/V differences seen after every forward and truncate."""

    def __init__(self, model, device: str, cache, worst: dict[str, float]) -> None:
        self.model, self.device, self.cache, self.worst = model, device, cache, worst
        self.ref = DynamicCache(config=model.config)
        self.fed: list[int] = []

    def feed(self, ids: list[int], phase: str) -> None:
        self.cache.reserve(ids, phase)
        x = torch.tensor([ids], device=self.device)
        ours = self.model(x, past_key_values=self.cache, use_cache=True).logits.float()
        theirs = self.model(x, past_key_values=self.ref, use_cache=True).logits.float()
        self.worst["logits"] = max(self.worst["logits"], (ours - theirs).abs().max().item())
        self.fed.extend(ids)
        self.compare()

    def truncate(self, length: int) -> None:
        self.cache.truncate(length, "rollback")
        self.ref.crop(length - len(self.fed))  # DynamicCache.crop takes minus the positions to remove
        del self.fed[length:]
        self.compare()

    def compare(self) -> None:
        assert self.cache.get_seq_length() == self.ref.get_seq_length() == len(self.fed)
        for i, layer in enumerate(self.ref.layers):
            keys, values = self.cache.dense_kv(i)
            assert keys.device.type == torch.device(self.device).type, keys.device
            assert keys.shape == layer.keys.shape, (keys.shape, layer.keys.shape)
            diff = max((keys - layer.keys).abs().max().item(), (values - layer.values).abs().max().item())
            self.worst["kv"] = max(self.worst["kv"], diff)


@torch.inference_mode()
def check_layout_parity(device: str, dtype_name: str, arch: str = "llama") -> dict:
    """Every layout, in lock step with a DynamicCache: same logits, same K/V, on `device`."""
    tol = TOLERANCE[dtype_name]
    model = tiny_model(arch).to(device=device, dtype=DTYPES[dtype_name])
    worst = {"logits": 0.0, "kv": 0.0}
    for layout, page, policy in PARITY_CASES:
        run = LockStep(model, device, create_cache(model, layout, page_size=page, policy=policy, max_len=64,
                                                   initial_len=4), worst)
        run.feed(tokens(6, 0), "prefill")
        for step in range(2):
            run.feed(tokens(1, 10 + step), "decode")
        run.feed(tokens(5, 1), "verify")  # grows past initial_len
        run.truncate(9)
        run.feed(tokens(4, 2), "verify")  # different tokens into the rolled-back slots
        # Power: the same cache against a fresh prefill of a sequence one token off.
        wrong = list(run.fed)
        wrong[len(wrong) // 2] = (wrong[len(wrong) // 2] + 1) % 64
        bug = max_abs_kv_diff(model, run.cache, wrong)
        assert bug > tol.bug, f"{layout}: a one-token-off sequence differs by only {bug}"
    assert worst["logits"] < tol.logits, worst
    assert worst["kv"] < tol.kv, worst
    return worst


# --------------------------------------------------------------------------- invariant


def check_invariant(device: str, dtype_name: str, layout: str = "paged") -> dict:
    """After every cycle, for each proposer: target cache = committed minus newest, proposer's
    cache a prefix, both equal to a fresh prefill up to the dtype's noise."""
    tol = TOLERANCE[dtype_name]
    pair = on_device(make_pair("llama"), device, DTYPES[dtype_name])
    worst: dict[str, float] = {}
    for proposer in PROPOSERS:
        cfg = DecodeConfig(k=3, proposer=proposer, temperature=1.0, seed=1, cache_layout=layout, page_size=3,
                           max_new_tokens=30, check_invariant=True)
        dec = SpeculativeDecoder(pair, cfg)
        dec.start(PROMPT)
        kinds: set[str] = set()
        diff = 0.0
        for _ in range(8):
            if dec.finished:
                break
            trace = dec.step()
            kinds.update(e.kind for e in trace.emitted)
            n = len(dec.committed)
            assert dec.target_cache.get_seq_length() == n - 1, (proposer, dec.target_cache.get_seq_length(), n)
            if dec.draft_cache is not None:
                assert dec.draft_cache.get_seq_length() <= n - 1
            assert dec.target_cache.get_seq_length() == n - 1
            diff = max(diff, *trace.invariant_max_abs_diff.values())
        assert diff < tol.kv, (proposer, diff)
        if proposer == "draft":  # a disagreeing draft: both endings of a cycle happened
            assert {"corrected", "bonus"} <= kinds, kinds
        worst[proposer] = diff
    # Power: the target cache against the committed sequence with one token changed.
    committed = dec.committed[: dec.target_cache.get_seq_length()]
    committed[len(committed) // 2] = (committed[len(committed) // 2] + 1) % 64
    bug = max_abs_kv_diff(pair.target, dec.target_cache, committed)
    assert bug > tol.bug, f"a one-token-off sequence differs by only {bug}"
    worst["one_token_off"] = bug
    return worst


# --------------------------------------------------------------------------- greedy equality


@torch.inference_mode()
def check_greedy(device: str, dtype_name: str, arch: str = "llama") -> dict:
    """Temperature 0: every committed token is the target's argmax (float32: exactly the tokens
    of `generate`; bfloat16: within the dtype's noise of the maximum, so a near-tie that the
    verify pass's shape rounds the other way is not a failure), for both layouts and proposers."""
    tol = TOLERANCE[dtype_name]
    pair = on_device(make_pair(arch), device, DTYPES[dtype_name])
    new = 24
    prompt = PROMPT
    ids = torch.tensor([prompt], device=device)
    reference = pair.target.generate(ids, do_sample=False, max_new_tokens=new, min_new_tokens=new)[0].tolist()
    out: dict[str, object] = {"equal_to_generate": {}}
    worst_gap = 0.0
    for layout, k, proposer in [("paged", 4, "draft"), ("contiguous", 3, "draft"), ("paged", 2, "feature"),
                                ("contiguous", 4, "lookup")]:
        dec = SpeculativeDecoder(pair, DecodeConfig(k=k, proposer=proposer, temperature=0, cache_layout=layout,
                                                    page_size=4, max_new_tokens=new))
        dec.start(prompt)
        dec.generate()
        committed = dec.committed
        assert len(committed) == len(prompt) + new
        logits = pair.target(torch.tensor([committed], device=device)).logits[0].float()
        chosen = torch.tensor(committed[len(prompt):], device=device)
        rows = logits[len(prompt) - 1 : -1]
        gap = (rows.max(-1).values - rows.gather(1, chosen[:, None])[:, 0]).max().item()
        worst_gap = max(worst_gap, gap)
        name = f"{layout}-k{k}-{proposer}"
        out["equal_to_generate"][name] = committed == reference
        if dtype_name == "float32":
            assert committed == reference, (name, committed, reference)
        assert gap <= tol.greedy_gap, (name, gap)
    ar = AutoregressiveDecoder(pair.target, DecodeConfig(temperature=0, max_new_tokens=new))
    ar.start(prompt)
    plain = ar.committed + ar.generate()
    if dtype_name == "float32":
        assert plain == reference
    out["worst_gap"] = worst_gap
    return out


# --------------------------------------------------------------------------- exactness

VOCAB = 8
EXACT_PROMPT = [1, 5, 2, 7]


def chi_square(counts: collections.Counter, expected: dict, n: int) -> tuple[float, float]:
    """Chi-square statistic and p-value (outcomes expected < 5 times pooled), without scipy:
    the p-value is the regularised upper incomplete gamma Q(dof/2, stat/2)."""
    observed, wanted, pool_obs, pool_exp = [], [], 0, 0.0
    for outcome, prob in expected.items():
        if prob * n >= 5:
            observed.append(counts[outcome])
            wanted.append(prob * n)
        else:
            pool_obs += counts[outcome]
            pool_exp += prob * n
    if pool_exp > 0:
        observed.append(pool_obs)
        wanted.append(pool_exp)
    total = sum(wanted)
    wanted = [w * sum(observed) / total for w in wanted]
    stat = sum((o - w) ** 2 / w for o, w in zip(observed, wanted))
    dof = len(observed) - 1
    pvalue = torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                     torch.tensor(stat / 2, dtype=torch.float64)).item()
    return stat, pvalue


@torch.inference_mode()
def exact_joint(model, cfg: DecodeConfig, prompt=EXACT_PROMPT, length: int = 2) -> dict[tuple[int, ...], float]:
    device = next(model.parameters()).device
    joint: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        longer = {}
        for prefix, prob in joint.items():
            logits = model(torch.tensor([[*prompt, *prefix]], device=device)).logits[0, -1].float()
            probs = process_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p).cpu()
            longer.update({(*prefix, tok): prob * float(probs[tok]) for tok in range(VOCAB)})
        joint = longer
    return joint


def seeded_windows(pair: ModelPair, cfg: DecodeConfig, prompt: list[int], runs: int, window: int = 2):
    """For seeds 0 .. runs-1: a fresh decoder stepped until `window` tokens follow the prompt, with
    the traces of those steps — the sample behind every distribution test of the decoder."""
    for seed in range(runs):
        dec = SpeculativeDecoder(pair, cfg.replace(seed=seed))
        dec.start(prompt)
        traces = []
        while len(dec.committed) < len(prompt) + window:
            traces.append(dec.step())
        yield dec, traces


def check_exactness(device: str, dtype_name: str, runs: int = 1000) -> dict:
    """The first two generated tokens of `runs` seeded speculative runs follow the target's exact
    joint law (chi-square p > 0.01) and reject the draft's (p < 1e-4): accepted, corrected and
    bonus tokens all occur."""
    pair = on_device(make_pair("llama", vocab_size=VOCAB, noise=1.0, seed=3), device, DTYPES[dtype_name], seed=3)
    cfg = DecodeConfig(k=3, temperature=1.0, page_size=2, instrument=False, max_new_tokens=16)
    expected = exact_joint(pair.target, cfg)
    draft_law = exact_joint(pair.draft, cfg)
    counts: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    for dec, traces in seeded_windows(pair, cfg, EXACT_PROMPT, runs):
        kinds.update(t.kind for tr in traces for t in tr.emitted)
        counts[tuple(dec.committed[len(EXACT_PROMPT) : len(EXACT_PROMPT) + 2])] += 1
    stat, pvalue = chi_square(counts, expected, runs)
    _, draft_p = chi_square(counts, draft_law, runs)
    floor = max(10, runs // 30)
    assert min(kinds["accepted"], kinds["corrected"], kinds["bonus"]) >= floor, dict(kinds)
    assert pvalue > 0.01, (stat, pvalue)
    assert draft_p < 1e-4, f"the samples do not tell the target from the draft (p = {draft_p})"
    return {"runs": runs, "chi2": stat, "p_value": pvalue, "p_value_vs_draft_law": draft_p, "kinds": dict(kinds)}


# --------------------------------------------------------------------------- the runner


def cases(device: str, quick: bool = False) -> list[tuple[str, Callable[[], dict]]]:
    """(name, thunk) for every check: each dtype x (parity per architecture, invariant per layout,
    greedy per architecture, exactness)."""
    runs = 300 if quick else 1000
    out: list[tuple[str, Callable[[], dict]]] = []
    for dt in DTYPES:
        for arch in ("llama", "qwen2", "gpt2"):
            out.append((f"parity[{dt}-{arch}]", lambda dt=dt, arch=arch: check_layout_parity(device, dt, arch)))
        for layout in ("paged", "contiguous"):
            out.append((f"invariant[{dt}-{layout}]", lambda dt=dt, layout=layout: check_invariant(device, dt, layout)))
        for arch in ("llama", "gpt2"):
            out.append((f"greedy[{dt}-{arch}]", lambda dt=dt, arch=arch: check_greedy(device, dt, arch)))
        out.append((f"exactness[{dt}]", lambda dt=dt: check_exactness(device, dt, runs)))
    return out


def run_all(device: str, quick: bool = False, only: str = "", log: Callable[[str], None] = print) -> dict:
    results, passed, failed = [], 0, 0
    for name, thunk in cases(device, quick):
        if only and only not in name:
            continue
        t0 = time.perf_counter()
        try:
            detail = thunk()
            status = "passed"
            passed += 1
        except Exception as exc:  # noqa: BLE001 - report every failure, then go on
            detail = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=4)}
            status = "failed"
            failed += 1
        seconds = time.perf_counter() - t0
        results.append({"name": name, "status": status, "seconds": round(seconds, 2), "detail": detail})
        log(f"{status.upper():6} {name} ({seconds:.1f} s){'' if status == 'passed' else ': ' + detail['error']}")
    summary = f"{passed} passed, {failed} failed"
    return {"device": device, "quick": quick, "passed": passed, "failed": failed, "summary": summary,
            "results": results}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="300 exactness runs instead of 1000 (CPU smoke)")
    ap.add_argument("--only", default="", help="run only the checks whose name contains this")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    if args.device == "cpu":
        torch.set_num_threads(1)
    report = run_all(args.device, args.quick, args.only)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    print(report["summary"])
    return 1 if report["failed"] or not report["passed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
