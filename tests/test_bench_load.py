"""The load benchmark (bench/load.py): its arithmetic and report offline, and one real served
session on the tiny pair through the websocket client (a smoke run, not a measurement)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import load, separate
from bench.suite import OPTIONAL_SECTIONS, SECTIONS


def test_load_is_optional_and_defaults_to_one_to_sixteen_sessions():
    assert "load" not in SECTIONS and "load" in OPTIONAL_SECTIONS  # scripts/bench.sh does not run it
    assert load.Options().sessions == (1, 4, 8, 16)
    assert load.PATTERN.count(load.NEXT_PHASE) == 5 and load.PATTERN[-1] == load.NEXT_CYCLE


def test_summary_percentiles_errors_and_busy_counts():
    logs = [load.SessionLog(open_s=1.0), load.SessionLog(open_s=3.0)]
    logs[0].clicks = [(load.NEXT_PHASE, float(s)) for s in range(1, 11)] + [(load.NEXT_CYCLE, 4.0)]
    logs[1].errors = ["no render within 300 s"]
    logs[1].busy_clicks = 2
    row = load.summarize(2, logs, wall_s=9.0)
    assert row["next_phase"]["n"] == 10 and row["next_phase"]["p50_s"] == 5.5
    assert row["next_phase"]["p95_s"] == pytest.approx(9.55)  # numpy's linear interpolation
    assert row["next_cycle"]["p50_s"] == 4.0 and row["open"]["p50_s"] == 2.0
    assert row["errors"] == 1 and row["busy_clicks"] == 2 and row["clicks"] == 11
    row.update(rss_after_start_mb=500.0, rss_peak_mb=620.0, rss_end_mb=600.0, server_cores=0.4, browser_cores=1.55)
    md = load.markdown(
        {
            "client": "ws",
            "pair": "tiny",
            "clicks_per_session": 11,
            "think_s": 0.5,
            "pattern": list(load.PATTERN),
            "server_env": {"SPECVIZ_MAX_DECODING": "2"},
            "cores": 2,
            "rows": [row],
        }
    )
    assert "| 2 | 5.50 s | 9.55 s | 10.00 s | 4.00 s |" in md and "| 1 | 2 / 11 | 500 MB | 620 MB | 0.40 | 1.55 |" in md
    assert row["every_click_s"][-1] == (load.NEXT_CYCLE, 4.0)
    assert "`SPECVIZ_MAX_DECODING=2`" in md


def test_the_table_replaces_its_own_section_in_a_report(tmp_path):
    report = tmp_path / "benchmarks.md"
    report.write_text("# Benchmarks\n\nother sections\n")
    separate.update_markdown(report, "load", "## Load\nfirst\n")
    separate.update_markdown(report, "load", "## Load\nsecond\n")
    text = report.read_text()
    assert text.startswith("# Benchmarks\n\nother sections\n") and "second" in text and "first" not in text
    assert text.count(separate.markers("load")[0]) == 1
    data = tmp_path / "benchmarks.json"
    data.write_text(json.dumps({"memory": {"x": 1}}))
    separate.update_json(data, "load", {"rows": []})
    assert json.loads(data.read_text()) == {"memory": {"x": 1}, "load": {"rows": []}}


def test_auto_client_needs_chromium_for_the_browser():
    expected = "browser" if Path(load.CHROMIUM).exists() else "ws"
    assert load.pick_client("auto") == expected
    assert load.pick_client("ws") == "ws"


def test_one_served_session_on_the_tiny_pair_steps_without_errors():
    opts = load.Options(sessions=(1,), pair="tiny", client="ws", clicks=6, think_s=0.05, timeout_s=120)
    result = load.run(opts, say=lambda msg: None)
    (row,) = result["rows"]
    assert row["errors"] == 0, row["error_samples"]
    assert row["next_phase"]["n"] == 5 and row["next_cycle"]["n"] == 1
    assert row["open"]["n"] == 1 and row["rss_peak_mb"] >= row["rss_after_start_mb"] > 50


def test_a_suite_run_keeps_the_sections_other_commands_wrote(tmp_path):
    separate.update_markdown(tmp_path / "benchmarks.md", "browser_latency", "## Browser latency\nold table\n")
    separate.update_json(tmp_path / "benchmarks.json", "browser_latency", {"rows": {"next_phase": 1}})
    kept = separate.read(tmp_path, exclude={"load"})
    (tmp_path / "benchmarks.md").write_text("# Benchmarks\n\nfresh suite report\n")  # what the suite writes
    (tmp_path / "benchmarks.json").write_text(json.dumps({"memory": {}}))
    separate.carry_over(kept, tmp_path)
    text = (tmp_path / "benchmarks.md").read_text()
    assert text.startswith("# Benchmarks\n\nfresh suite report\n") and "old table" in text
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    assert data == {"memory": {}, "browser_latency": {"rows": {"next_phase": 1}}}
    assert separate.read(tmp_path, exclude={"browser_latency"}) == {}  # about to be rewritten: not kept
