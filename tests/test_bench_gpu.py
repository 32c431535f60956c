"""bench/gpu.py (the GPU benchmark that scripts/device_check.sh runs) works end to end on a CPU with
tiny shapes: every section runs, the forced acceptance patterns give exactly their tokens per cycle,
and a CPU run is labelled as a smoke and never lands in docs/. No timing is checked."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

from bench import gpu
from bench.common import REPO


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu")
    assert gpu.main(["--tiny", "--device", "cpu", "--out", str(out), "--tests-summary", "16 passed, 0 failed"]) == 0
    return json.loads((out / "gpu.json").read_text()), (out / "gpu.md").read_text()


def test_every_section_runs_and_forced_patterns_are_exact(smoke):
    data, _ = smoke
    s = gpu.GpuSettings.tiny()
    assert data["kind"] == "cpu-smoke" and data["skipped"] == []
    assert data["baseline"]["c"] > 0
    rows = data["cycles"]["rows"]
    assert {r["proposer"] for r in rows} == {"draft model", "feature head", "feature head (128 tokens)"}
    for k in s.ks:  # K = 1 has no separate "reject at K" (it is "reject at 1")
        want = set(gpu.PATTERNS) if k > 1 else set(gpu.PATTERNS[:2])
        assert {r["pattern"] for r in rows if r["proposer"] == "draft model" and r["k"] == k} == want
    for r in rows:
        assert r["tokens_seen"] == [r["tokens_per_cycle"]] * s.cycles, r
        expected_accepted = r["k"] if r["pattern"] == "all accepted" else r["tokens_per_cycle"] - 1
        assert r["accepted_seen"] == [expected_accepted] * s.cycles, r
        assert r["ms_per_cycle"]["median"] > 0 and r["speedup_vs_plain"] > 0
    assert set(data["cycles"]["marginal_draft_ms"]) == {r["proposer"] for r in rows}
    verify = data["verify"]
    assert [r["k"] for r in verify["rows"]] == list(s.verify_ks)
    assert verify["rows"][0]["v"] == pytest.approx(1.0)
    assert verify["context"] == s.verify_context  # K/V of that many positions before each timed pass
    paging = data["paging"]
    assert [r["context"] for r in paging["rows"]] == list(s.contexts)
    assert all(r["paged_over_contiguous_decode_ms"] > 0 for r in paging["rows"])


def test_report_is_labelled_a_cpu_smoke(smoke):
    _, md = smoke
    assert md.startswith("# CPU smoke, not a GPU measurement")
    for heading in ("## Headline", "## Baseline", "## ms per cycle vs K", "## Verify cost v(K)",
                    "## Paged vs contiguous cache"):
        assert heading in md, heading
    assert "16 passed, 0 failed" in md
    assert "| draft model | 4 | reject at K | 4 |" in md


def test_cpu_runs_never_write_into_docs(tmp_path, monkeypatch):
    before = (REPO / "docs" / "gpu.md").exists() and (REPO / "docs" / "gpu.md").stat().st_mtime
    monkeypatch.setattr(gpu.tempfile, "mkdtemp", lambda prefix: str(tmp_path / "smoke"))
    monkeypatch.setattr(gpu, "GpuSettings", _Faster)
    assert gpu.main(["--tiny", "--device", "cpu"]) == 0
    assert (tmp_path / "smoke" / "gpu.md").read_text().startswith("# CPU smoke")
    after = (REPO / "docs" / "gpu.md").exists() and (REPO / "docs" / "gpu.md").stat().st_mtime
    assert before == after
    assert gpu.main(["--device", "cpu"]) == 2  # the full shapes are refused on a CPU


class _Faster(gpu.GpuSettings):
    @staticmethod
    def tiny() -> gpu.GpuSettings:
        return gpu.GpuSettings(shapes="tiny", dtype="float32", ks=(2,), head_ks=(2,), prompt_len=6, warmup_cycles=1,
                               cycles=1, baseline_tokens=2, verify_context=16, verify_ks=(0, 2), contexts=(16,),
                               reps=1, budget_s=60.0)


def test_forced_patterns_and_marginal_cost():
    assert gpu.forced("all accepted", 3) == ((1, True), (2, True), (3, True))
    assert gpu.forced("reject at 1", 3) == ((1, False),)
    assert gpu.forced("reject at K", 3) == ((1, True), (2, True), (3, False))
    rows = [{"proposer": "p", "k": k, "pattern": "reject at 1", "ms_per_cycle": {"median": 2 + 3 * k}}
            for k in (1, 2, 4)]
    assert gpu.marginal_draft_ms(rows)["p"] == pytest.approx(3.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the script would run for real")
def test_device_check_stops_clearly_without_a_gpu():
    done = subprocess.run(["bash", "scripts/device_check.sh"], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "torch sees no CUDA device" in done.stdout and "--cpu-smoke" in done.stdout
    assert not (REPO / "docs" / "gpu.md").exists() or "CPU smoke" not in (REPO / "docs" / "gpu.md").read_text()
