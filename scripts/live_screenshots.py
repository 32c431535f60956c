"""Screenshots of a live lecture (docs/img/live-*.png): the lecturer's screen with the class's
answers at 1920x1080, a follower at 1366x768 and on a phone at 390x844, after a question revealed,
and a follower at 1366x768 with the Distributions tab open under the stage.

    python scripts/live_screenshots.py [--out docs/img]

The real app (`streamlit run`, the tiny pair) in headless Chromium, clicked as a person clicks; the
same launch recipe as the benchmarks (bench.load, bench.live).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.live import LIVE, lecturer_page  # noqa: E402
from bench.load import CHROMIUM, CHROMIUM_ARGS, start_server, stop_server  # noqa: E402


def follower(browser, url: str, width: int, height: int):
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_function("window.__specvizStage && window.__specvizStage.state.shown", timeout=60_000)
    return page


def tabs(page, path: Path) -> None:
    """The follower's Distributions tab for the step on screen, scrolled to its first figures."""
    page.locator("#tab-charts").click()
    page.wait_for_function("document.querySelectorAll('#views .js-plotly-plot .main-svg').length >= 2",
                           timeout=60_000)
    page.evaluate("window.scrollTo(0, document.querySelector('.svf-tabs').getBoundingClientRect().top"
                  " + window.scrollY - 70)")
    page.wait_for_timeout(500)
    page.screenshot(path=str(path))


def main(argv: list[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    out = ap.parse_args(argv).out
    out.mkdir(parents=True, exist_ok=True)
    proc, url = start_server("tiny", ready_s=120)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            lecturer, code = lecturer_page(browser, url)
            room = f"{url}{LIVE}/{code}"
            students = [follower(browser, room, 1366, 768), follower(browser, room, 390, 844),
                        follower(browser, room, 1366, 768)]
            while lecturer.evaluate("window.__specvizStage.state.shown.title").split("· ")[-1] != "Target verifies":
                lecturer.locator(".st-key-next_phase button").first.click()
                lecturer.wait_for_timeout(400)
            lecturer.locator(".st-key-live_ask button").first.click()
            for i, page in enumerate(students):
                page.locator("#poll button.sv-option").nth(min(i, 1)).click()
            lecturer.locator("[data-testid='stSidebar']").get_by_text("3 answered").wait_for(timeout=10_000)
            lecturer.locator(".st-key-live_reveal button").first.click()
            lecturer.locator("[data-testid='stDialog'] .js-plotly-plot").wait_for(timeout=30_000)
            for page in students[:2]:
                page.locator("#poll .sv-truth").wait_for(timeout=10_000)
            lecturer.wait_for_timeout(800)
            lecturer.screenshot(path=str(out / "live-lecturer-1920x1080.png"))
            students[0].screenshot(path=str(out / "live-follower-1366x768.png"))
            students[1].screenshot(path=str(out / "live-follower-390x844.png"), full_page=True)
            tabs(students[2], out / "live-follower-tabs-1366x768.png")
            browser.close()
    finally:
        stop_server(proc)
    print(f"wrote {out}/live-*.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
