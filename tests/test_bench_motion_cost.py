"""The motion-cost benchmark (bench/motion_cost.py) end to end on the tiny pair: a real run page in
real headless Chromium, every mode stepped and its CPU read (a smoke run, not a measurement)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import motion_cost

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(motion_cost.CHROMIUM).exists(), reason="Debian chromium is not installed"),
]


def test_every_mode_steps_the_page_and_reads_chromium_cpu():
    result = motion_cost.run("tiny", cycles=1, clicks=4, gap=0.2, log=lambda m: None)
    assert list(result["modes"]) == list(motion_cost.MODES)
    for name, mode in result["modes"].items():
        assert mode["shown"] == 4, (name, mode)  # every press stepped the page (the stage's own counter)
        assert mode["ms_per_click"] > 0 and "renderer" in mode["per_kind_ms"], (name, mode)
    md = motion_cost.markdown(result)
    assert md.count("\n| ") == 1 + len(motion_cost.MODES) and "reduced motion" in md
