"""The reshaped engine decodes exactly as the engine it replaced (tests/golden_runs.py recorded it).

Each golden case is decoded again and compared field by field: tokens, verdicts, u draws, cache
events, snapshots, top-N lists, the proposer's notes and the next draws of both random streams.
Run files written by the old code still open, and replay in another layout as they did.
"""

from __future__ import annotations

import json

import golden_runs
import pytest

from specviz.runfile import load_run

GOLDEN = golden_runs.load()


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_engine_decodes_as_the_golden_run(name):
    got = json.loads(json.dumps(golden_runs.run_case(golden_runs.cases()[name])))
    diffs = golden_runs.differences(GOLDEN[name], got)
    assert not diffs, f"{len(diffs)} differences, first: {diffs[:5]}"


def test_the_residual_tolerance_holds_for_every_recorded_rejection():
    """RESIDUAL_TOL assumes no sampled rejection divides its residual by less than RESIDUAL_MASS_MIN."""
    masses = golden_runs.rejected_masses(GOLDEN)
    assert len(masses) > 100 and min(masses) >= golden_runs.RESIDUAL_MASS_MIN, min(masses)


def test_the_comparison_tells_a_rounding_from_a_change():
    """Within the derived tolerance: the cross-CPU difference seen on an AVX2-only EPYC; beyond it: not."""
    want = {"residual_top": [{"prob": 0.7793066501617432}], "ratio": 0.5}
    assert not golden_runs.differences(want, {"residual_top": [{"prob": 0.7793054580688477}], "ratio": 0.5})
    assert golden_runs.differences(want, {"residual_top": [{"prob": 0.785}], "ratio": 0.5})
    assert golden_runs.differences(want, {"residual_top": [{"prob": 0.7793066501617432}], "ratio": 0.501})


@pytest.mark.parametrize("name", sorted(golden_runs.RUN_FILES))
def test_an_old_run_file_opens_and_replays_as_it_did(name):
    text = (golden_runs.GOLDEN.parent / f"{name}.run.json").read_text()
    record = load_run(text)
    assert len(record.traces) > 2 and record.proposer == golden_runs.RUN_FILES[name]["proposer"]
    want = json.loads((golden_runs.GOLDEN.parent / f"{name}.replayed.json").read_text())
    diffs = golden_runs.differences(want, golden_runs.replayed(text))
    assert not diffs, f"{len(diffs)} differences, first: {diffs[:5]}"
