"""The benchmark harness runs end to end on the tiny pair with tiny settings (no timing checks:
numbers from a test run mean nothing; this only proves every section and the report work)."""

from __future__ import annotations

import json

import specviz
from bench.common import Settings
from bench.suite import SECTIONS, run_suite
from specviz.proposers import registry


def test_bench_suite_end_to_end_on_tiny_pair(tmp_path):
    pair = specviz.build_tiny_pair(seed=0)
    results = run_suite(
        pair,
        Settings.tiny(),
        tmp_path,
        threads_arg="1",
        pair_name="tiny",
        command="python -m bench --tiny",
        log=lambda msg: None,
    )

    data = json.loads((tmp_path / "benchmarks.json").read_text())
    for section in ("throughput", "lockstep", "theory", "proposers", "app_step", "paging", "memory"):
        assert section in data, section
    assert "profile" in SECTIONS and data["profile"]["torch_ops"]
    assert data["throughput"]["samples"] and data["theory"]["rows"]
    # 5 engine goals + the proposer bounds (acceptance, tokens/cycle, alpha, cost, speed)
    assert len(results["goals"]) == 10, [g["goal"] for g in results["goals"]]
    assert sum("proposer" in g["goal"] for g in results["goals"]) == 5
    prop = data["proposers"]
    assert set(prop["proposers"]) == set(registry.names())  # the tiny pair runs every proposer in the table
    assert {row["proposer"] for row in prop["rows"]} == set(registry.names())
    assert all(row["same_text_as_greedy"] for row in prop["rows"])  # T=0 output is the target's greedy text
    assert all(isinstance(g["met"], bool) for g in results["goals"])
    assert data["threads"]["chosen"] == 1

    md = (tmp_path / "benchmarks.md").read_text()
    for heading in (
        "## Goals",
        "## 1. Decoding throughput",
        "## 2. Against theory",
        "## Proposers: draft model vs feature head vs prompt lookup",
        "## 3. App step latency",
        "## 4. Paged-cache cost",
        "## 5. Memory",
        "## 6. Profiles",
    ):
        assert heading in md, heading
    assert "No GPU" in md
