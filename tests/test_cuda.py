"""The device checks (tests/cuda_checks.py) under pytest.

On a machine with CUDA every check runs there, in float32 and bfloat16: layout parity, the cache
invariant for every proposer, greedy equality and exactness (scripts/device_check.sh runs this file
on a GPU machine). Without CUDA those are skipped, and the same checks run on the CPU in their fast
form (exactness has its own CPU test, test_exactness.py), so the code the GPU run depends on is
exercised on every machine; the runner's failure path is tested too.
"""

from __future__ import annotations

import cuda_checks as cc
import pytest
import torch

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA_CASES = [name for name, _ in cc.cases("cuda")]


@needs_cuda
@pytest.mark.parametrize("name", CUDA_CASES)
def test_on_cuda(name):
    detail = dict(cc.cases("cuda"))[name]()
    print(name, detail)


def test_every_kind_of_check_is_scheduled_for_both_dtypes():
    for dtype in cc.DTYPES:
        for kind in ("parity", "invariant", "greedy", "exactness"):
            assert any(n.startswith(f"{kind}[{dtype}") for n in CUDA_CASES), (kind, dtype)


@pytest.mark.parametrize("dtype", list(cc.DTYPES))
def test_checks_on_cpu(dtype):
    assert cc.check_layout_parity("cpu", dtype, "qwen2")["kv"] < cc.TOLERANCE[dtype].kv
    worst = cc.check_invariant("cpu", dtype, "paged")
    assert set(worst) == {*cc.PROPOSERS, "one_token_off"}
    assert worst["one_token_off"] > cc.TOLERANCE[dtype].bug  # the check can tell a wrong cache
    greedy = cc.check_greedy("cpu", dtype, "llama")
    assert all(greedy["equal_to_generate"].values())


def test_chi_square_without_scipy_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    import collections

    expected = {0: 0.5, 1: 0.3, 2: 0.2}
    counts = collections.Counter({0: 60, 1: 25, 2: 15})
    stat, p = cc.chi_square(counts, expected, 100)
    ref = scipy_stats.chisquare([60, 25, 15], [50, 30, 20])
    assert stat == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue)


def test_runner_reports_a_failing_check(monkeypatch, capsys):
    """A check that fails is reported as failed, the closing line counts it, and the exit status is 1."""
    strict = cc.Tolerance(logits=1e-4, kv=5e-4, greedy_gap=1e-3, bug=1e9)  # no cache differs by 1e9
    monkeypatch.setitem(cc.TOLERANCE, "float32", strict)
    assert cc.main(["--device", "cpu", "--only", "parity[float32-llama]"]) == 1
    out = capsys.readouterr().out
    assert "FAILED parity[float32-llama]" in out and "one-token-off" in out
    assert out.strip().splitlines()[-1] == "0 passed, 1 failed"
