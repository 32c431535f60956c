"""bench.quality's --merge: a partial rerun lays its rows over a report's, keeping the others."""

from __future__ import annotations

import json

import pytest

from bench import quality


def _row(proposer: str, tpv: float, dtype: str = "float32") -> dict:
    return {"dtype": dtype, "set": "natural", "proposer": proposer, "shape": "chain:4", "temperature": 0.0,
            "tokens_per_verify": tpv}


def test_merge_replaces_what_was_measured_again_and_keeps_the_rest(tmp_path):
    report = tmp_path / "benchmarks.json"
    report.write_text(json.dumps({"quality": {"prompts": 12, "max_new": 48,
                                              "rows": [_row("feature", 1.5), _row("lookup", 1.3)]}}))
    new = {"prompts": 12, "max_new": 48, "rows": [_row("feature", 1.8), _row("feature", 1.7, "bfloat16")]}
    rows = {(r["proposer"], r["dtype"]): r["tokens_per_verify"] for r in quality.merged(new, report)["rows"]}
    assert rows == {("feature", "float32"): 1.8, ("lookup", "float32"): 1.3, ("feature", "bfloat16"): 1.7}
    md = quality.quality_markdown(quality.merged(new, report), "")
    assert "| lookup |" in md and "1.80" in md and "1.50" not in md


def test_merge_refuses_rows_measured_on_other_prompts(tmp_path):
    report = tmp_path / "benchmarks.json"
    report.write_text(json.dumps({"quality": {"prompts": 24, "max_new": 48, "rows": [_row("lookup", 1.3)]}}))
    with pytest.raises(SystemExit, match="--prompts"):
        quality.merged({"prompts": 12, "max_new": 48, "rows": []}, report)
    assert quality.merged({"prompts": 12, "max_new": 48, "rows": []}, tmp_path / "none.json")["rows"] == []
