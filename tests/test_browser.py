"""The served app in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright).

Starts `streamlit run app.py` on a free port with the tiny random pair, waits until the server
answers, clicks through every phase of two cycles and a Play, checks that the plotly charts render
and that no exception box appears, and saves screenshots under test-artifacts/ (gitignored).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

# One launch recipe (Chromium flags, `streamlit run` on a free port) for the browser test and the load bench.
from bench.load import CHROMIUM, CHROMIUM_ARGS, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc, url = start_server("tiny", ready_s=90)
    try:
        yield url
    finally:
        stop_server(proc)


def _wait_idle(page, timeout_ms: int = 60_000) -> None:
    """Wait until Streamlit has finished the current script run and the KV chart's tween ended."""
    page.wait_for_timeout(300)
    page.wait_for_selector("[data-testid='stStatusWidget']", state="detached", timeout=timeout_ms)
    page.wait_for_timeout(900)


def test_click_through_two_cycles_and_play(server: str) -> None:
    from playwright.sync_api import sync_playwright

    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS / "browser", ignore_errors=True)
    out = ARTIFACTS / "browser"
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 2600})
        page.set_default_timeout(120_000)  # the machine may be busy with other jobs
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server, wait_until="domcontentloaded")
        next_phase = page.get_by_role("button", name="Next phase")
        next_phase.wait_for(timeout=90_000)
        _wait_idle(page)
        page.wait_for_selector(".js-plotly-plot", timeout=30_000)
        page.screenshot(path=str(out / "00-prefill.png"), full_page=True)
        phases = ["draft", "verify", "accept", "resolve", "rollback"]
        for cycle in range(2):
            for i, phase in enumerate(phases):
                next_phase.click()
                _wait_idle(page)
                page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)
                assert page.locator("[data-testid='stException']").count() == 0, f"exception at {phase}"
                page.screenshot(path=str(out / f"{cycle + 1:02d}-{i + 1}-{phase}.png"), full_page=True)
        # The KV chart, proposals, acceptance, p-vs-q and residual/bonus charts are on the page.
        assert page.locator(".js-plotly-plot").count() >= 4
        heat = page.locator(".js-plotly-plot .heatmaplayer")
        assert heat.count() >= 1
        status = page.locator("[data-testid='stMarkdown']", has_text="committed before this cycle").first
        before = status.inner_text()
        page.get_by_role("button", name="Play").click()
        page.wait_for_timeout(3500)
        for _ in range(30):  # the timer advances a phase every second; allow for a busy machine
            status = page.locator("[data-testid='stMarkdown']", has_text="committed before this cycle").first
            if status.inner_text() != before:
                break
            page.wait_for_timeout(500)
        assert status.inner_text() != before, "Play did not advance"
        page.screenshot(path=str(out / "20-playing.png"), full_page=True)
        page.get_by_role("button", name="Pause").click()
        _wait_idle(page)
        assert page.locator("[data-testid='stException']").count() == 0
        assert page.locator(".js-plotly-plot").count() >= 1
        page.screenshot(path=str(out / "21-paused.png"), full_page=True)
        # Export: both downloads work from the browser (their data is produced on click).
        page.get_by_role("tab", name="Export").click()
        with page.expect_download() as dl:
            page.get_by_role("button", name="Current figures (standalone HTML)").click()
        html = Path(dl.value.path()).read_text()
        assert "Plotly.addFrames" in html and "Target cache" in html
        _wait_idle(page)
        with page.expect_download() as dl:
            page.get_by_role("button", name="Traces (JSON)").click()
        assert Path(dl.value.path()).read_text().startswith("[{")
        browser.close()
    assert not errors, errors


@pytest.mark.slow
def test_default_pair_in_the_browser() -> None:
    """The real default pair: opens, steps one cycle phase by phase; screenshots for the docs."""
    from playwright.sync_api import sync_playwright

    out = ARTIFACTS / "browser-default"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    proc, url = start_server("default", ready_s=90)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 2600})
            page.set_default_timeout(300_000)
            page.goto(url, wait_until="domcontentloaded")
            page.wait_for_selector(".js-plotly-plot", timeout=300_000)
            _wait_idle(page, 300_000)
            page.screenshot(path=str(out / "0-prefill.png"), full_page=True)
            for i, phase in enumerate(["draft", "verify", "accept", "resolve", "rollback"]):
                page.get_by_role("button", name="Next phase").click()
                _wait_idle(page, 300_000)
                assert page.locator("[data-testid='stException']").count() == 0
                page.screenshot(path=str(out / f"{i + 1}-{phase}.png"), full_page=True)
            browser.close()
    finally:
        stop_server(proc)
