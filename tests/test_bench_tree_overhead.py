"""bench/tree_overhead.py on the tiny pair: every configuration gets a row with its split, the
shares lie in [0, 100], the wall clock's wrappers come out again, and `--into` writes its own
section (kept by a suite run). No timing is checked: numbers from a test run mean nothing."""

from __future__ import annotations

import json

import pytest

import specviz
from bench import separate, tree_overhead
from bench.common import prompt_set
from specviz import engine
from specviz import tree as trees


@pytest.fixture(scope="module")
def tiny():
    pair = specviz.build_tiny_pair(seed=0)
    return pair, [ids[:40] for ids in prompt_set(pair.tokenizer, "natural", 2)]


def test_rows_shares_and_split(tiny):
    pair, prompts = tiny
    grow, step = trees.grow, engine.SpeculativeDecoder.step
    result = tree_overhead.run({"float32": pair}, {"float32": prompts}, cycles=2, log=lambda msg: None)
    assert trees.grow is grow and engine.SpeculativeDecoder.step is step  # the wrappers are gone
    assert "forward" not in vars(pair.target) and "full_logits" not in vars(pair.feature_head)
    rows = result["rows"]
    assert {(r["layout"], r["temperature"], r["instrument"]) for r in rows} == {
        (lay, t, i) for lay in ("contiguous", "paged") for t in (0.0, 1.0) for i in (False, True)}
    for r in rows:
        assert r["cycles"] == 2 * len(prompts)
        for key in ("machinery_pct", "max_cycle_pct", "non_forward_pct", "profile_pct"):
            assert 0.0 <= r[key] <= 100.0, (key, r[key])
        assert set(r["parts_ms"]) == set(tree_overhead.PARTS) == set(r["profile_parts_ms"])
        assert all(v >= 0 for v in r["parts_ms"].values())
        assert r["parts_ms"]["growth"] > 0 and r["parts_ms"]["mask"] > 0 and r["parts_ms"]["records"] > 0
        assert r["machinery_ms"] == pytest.approx(sum(r["parts_ms"].values()))
        # The cross-check: the machinery fits in what the forwards leave of a cycle.
        assert r["forward_ms"] > 0 and r["machinery_ms"] <= r["cycle_ms"] - r["forward_ms"] + 1e-6
    assert isinstance(result["met"], bool) and result["worst_pct"] == max(r["machinery_pct"] for r in rows)


def test_report_and_its_own_section(tmp_path, capsys):
    out = tmp_path / "docs"
    out.mkdir()
    (out / "benchmarks.md").write_text("# Benchmarks\n\nsuite text\n")
    args = ["--tiny", "--dtypes", "float32", "--prompts", "1", "--cycles", "1", "--temperatures", "0",
            "--layouts", "paged", "--instrument", "off", "--note", "The machine was shared.", "--into", str(out)]
    assert tree_overhead.main(args) == 0
    text = (out / "benchmarks.md").read_text()
    assert text.startswith("# Benchmarks\n\nsuite text") and text.count("<!-- tree_overhead:begin -->") == 1
    assert "The machine was shared." in text and "| float32 | paged | 0 | off |" in text
    result = json.loads((out / "benchmarks.json").read_text())["tree_overhead"]
    assert len(result["rows"]) == 1 and result["shape"]["tree_nodes"] == 16
    assert "tree_overhead" in separate.SEPARATE  # a suite run keeps the section
