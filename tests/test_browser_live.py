"""A live lecture in real Chromium: a lecturer's page and two students' pages (each its own browser
context, as two laptops), on one `streamlit run app.py` with the tiny random pair.

The students follow the lecturer through every phase of several cycles and into a new run, one
branches off and rejoins, the class answers a question that the lecturer reveals, both sides
reload, and the room's route refuses what a student's page may not do. Clicks are Playwright's
actionable clicks (hit-tested, as a person's)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from bench.load import CHROMIUM

LIVE = "/api/specviz/live"  # specviz.ui.live_route.PATH

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
]


@pytest.fixture(scope="module")
def lecture(server, browser):
    """The lecturer's page with a live lecture started, and the room's code."""
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(server, wait_until="domcontentloaded")
    _button(page, "next_phase").wait_for()
    page.locator("[data-testid='stSidebar'] summary", has_text="Live lecture").first.click()
    _button(page, "live_start").click()
    panel = page.locator("[data-testid='stSidebar']").get_by_text("Room code").first
    panel.wait_for()
    code = re.search(r"Room code (\w+)", panel.inner_text()).group(1)
    yield page, code
    context.close()


def _button(page, key: str):
    return page.locator(f".st-key-{key} button").first


def _student(browser, server: str, code: str, width: int = 1366, height: int = 768):
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.set_default_timeout(60_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}{LIVE}/{code}", wait_until="domcontentloaded")
    page.wait_for_function("window.__specvizLive && window.__specvizLive.room && window.__specvizStage.state.shown")
    return page, errors


def _cur(page) -> int:
    return page.evaluate("window.__specvizStage.state.cur")


def _lecturer_step(page) -> int:
    """Next phase clicked like a person; the step the lecturer's stage then shows."""
    before = _cur(page)
    _button(page, "next_phase").click()
    page.wait_for_function(f"window.__specvizStage.state.cur === {before + 1} && !window.__specvizStage.state.waiting")
    return before + 1


def _follows(student, step: int, run: int | None = None) -> None:
    cond = f"window.__specvizStage.state.cur === {step}"
    if run is not None:
        cond += f" && window.__specvizStage.state.run === {run}"
    student.wait_for_function(cond, timeout=20_000)


def test_students_follow_every_phase_branch_and_rejoin_and_follow_into_a_new_run(server, browser, lecture):
    lecturer, code = lecture
    a, a_errors = _student(browser, server, code)
    b, b_errors = _student(browser, server, code, 390, 844)  # a phone
    assert _cur(a) == _cur(b) == _cur(lecturer)
    for _ in range(11):  # two whole cycles and a phase: every phase of a cycle, twice
        step = _lecturer_step(lecturer)
        _follows(a, step)
        _follows(b, step)
        assert a.evaluate("window.__specvizStage.state.shown.title") == lecturer.evaluate(
            "window.__specvizStage.state.shown.title")
    assert "Following the lecturer" in a.locator("#where").inner_text()

    a.locator("#back").click()  # branch: two steps back through the room's steps
    a.locator("#back").click()
    here = _cur(a)
    assert here == _cur(lecturer) - 2 and "2 steps behind the lecturer" in a.locator("#where").inner_text()
    step = _lecturer_step(lecturer)
    _follows(b, step)
    assert _cur(a) == here  # stays where the student went
    a.wait_for_function("document.getElementById('where').textContent.startsWith('3 steps behind')")
    a.keyboard.press("f")  # Follow
    _follows(a, step)
    assert a.locator("#follow").is_hidden() and "Following" in a.locator("#where").inner_text()

    old_run = lecturer.evaluate("window.__specvizStage.state.run")  # a setting changed: a new run
    checked = lecturer.locator("[data-testid='stSidebar'] input[type=radio]:checked").all_inner_texts()
    other = "Feature head (EAGLE-style)" if not any("Feature" in c for c in checked) else "Draft model (a small LM)"
    lecturer.get_by_text(other).click()
    lecturer.wait_for_function(f"window.__specvizStage.state.run !== {old_run}")
    step = _lecturer_step(lecturer)
    new_run = lecturer.evaluate("window.__specvizStage.state.run")
    _follows(a, step, new_run)
    _follows(b, step, new_run)
    assert not a_errors and not b_errors, (a_errors, b_errors)


def test_the_class_answers_the_lecturer_reveals_and_reloads_lose_nothing(server, browser, lecture):
    lecturer, code = lecture
    a, _ = _student(browser, server, code)
    b, _ = _student(browser, server, code)
    while lecturer.evaluate("window.__specvizStage.state.shown.title").split("· ")[-1] != "Target verifies":
        step = _lecturer_step(lecturer)
    _follows(a, step)
    ask = _button(lecturer, "live_ask")
    ask.wait_for(timeout=10_000)  # the glance fragment draws it at the verify phase
    ask.click()
    for student in (a, b):
        student.locator("#poll button.sv-option").first.wait_for(timeout=10_000)
    options = a.locator("#poll button.sv-option")
    assert options.count() >= 2 and "truth" not in a.locator("#poll").inner_text()
    options.nth(1).click()
    b.locator("#poll button.sv-option").nth(0).click()
    b.locator("#poll button.sv-option").nth(1).click()  # changed before the reveal: still one answer
    lecturer.locator("[data-testid='stSidebar']").get_by_text("2 answered").wait_for(timeout=5_000)

    b.reload()  # a student reloads: the same student (the key is in the tab's session storage)
    b.wait_for_function("window.__specvizLive.room && window.__specvizLive.room.poll")
    assert b.evaluate("window.__specvizLive.room.poll.yours") == 1 and _cur(b) == _cur(lecturer)

    before = _cur(lecturer)
    _button(lecturer, "live_reveal").click()
    dialog = lecturer.locator("[data-testid='stDialog']")
    dialog.locator(".js-plotly-plot").wait_for(timeout=20_000)  # the class's answers, as a histogram
    lecturer.wait_for_function(f"window.__specvizStage.state.cur === {before + 1}")  # and the stage moved on
    _follows(a, before + 1)
    a.locator("#poll .sv-truth").wait_for(timeout=10_000)
    counts = a.evaluate("window.__specvizLive.room.poll.counts")
    assert counts[1] == 2 and sum(counts) == 2 and "your answer" in a.locator("#poll").inner_text()
    lecturer.keyboard.press("Escape")

    lecturer.reload()  # the lecturer reloads: the same room comes back with the run
    lecturer.locator("[data-testid='stSidebar']").get_by_text(f"Room code {code}").wait_for(timeout=60_000)
    lecturer.wait_for_function("window.__specvizStage && window.__specvizStage.state.shown")
    step = _lecturer_step(lecturer)
    _follows(a, step)


def test_the_rooms_route_refuses_what_a_students_page_may_not_do(server, browser, lecture):
    _, code = lecture
    page = browser.new_page()
    api = page.request
    url = f"{server}{LIVE}/{code}"
    student = api.post(url, data={"do": "join"}).json()["student"]
    assert api.post(url, data={"do": "reveal", "student": student, "poll": 1}).status == 403
    assert api.post(url, data={"do": "move", "step": 0}).status == 403
    assert api.post(url, data={"do": "answer", "student": "someone-else", "poll": 1, "option": 0}).status == 403
    assert api.post(url, data={"do": "answer", "student": student, "poll": 1, "option": 0}).status == 409  # revealed
    assert api.post(url, data={"do": "answer", "student": student, "poll": 99, "option": 0}).status == 400
    assert api.post(url, data="{not json", headers={"Content-Type": "application/json"}).status == 400
    here = json.dumps({"do": "here", "student": student, "step": 1}).replace(": 1}", ": 1e999}")  # infinity
    assert api.post(url, data=here, headers={"Content-Type": "application/json"}).status == 400
    assert api.post(url, data="x" * 200_000, headers={"Content-Type": "application/json"}).status == 413
    gone = api.get(f"{server}{LIVE}/NOPE7")
    assert gone.status == 404 and "no live lecture has the code NOPE7" in gone.text()
    page.goto(f"{server}{LIVE}")  # the join page: a code typed goes to its room
    page.locator("#code").fill(code.lower())
    page.get_by_role("button", name="Join").click()
    page.wait_for_function("window.__specvizLive && window.__specvizLive.room")
    assert page.url.endswith(f"{LIVE}/{code}")
    page.close()


def _to_resolve(lecturer) -> int:
    """The lecturer steps on to a cycle's resolve phase, with at least one cycle done before it."""
    step = _cur(lecturer)
    while step < 9 or step % 5 != 4:  # step 5c + 4: cycle c's resolve (timeline.at)
        step = _lecturer_step(lecturer)
    return step


def _view(page, key_start: str) -> dict:
    """Waits until the open tab shows a view whose key starts with `key_start`; its key and figures."""
    page.wait_for_function(f"""(window.__specvizViews.key || '').startsWith({json.dumps(key_start)}) &&
        !document.getElementById('views').hasAttribute('aria-busy')""", timeout=20_000)
    return page.evaluate("""() => ({key: window.__specvizViews.key,
        figures: document.querySelectorAll('#views .js-plotly-plot .main-svg').length > 0
          ? document.querySelectorAll('#views .js-plotly-plot').length : 0})""")


def _fits(page, width: int, before: int) -> None:
    """The page fits the screen before the views open and after (the panel and its figures within the
    screen: what is wider scrolls in its own box); tabs big enough for a thumb, text big enough to read."""
    assert before <= width, f"the follower's page is {before} px wide on a {width} px screen"
    sizes = page.evaluate("""() => ({page: document.documentElement.scrollWidth,
        panel: document.getElementById('views').getBoundingClientRect().right,
        tabs: [...document.querySelectorAll('.svf-tabs [role=tab]')].map(t => t.getBoundingClientRect().height),
        font: parseFloat(getComputedStyle(document.getElementById('views')).fontSize),
        figs: [...document.querySelectorAll('#views .js-plotly-plot')].filter(f => !f.closest('.svf-scroll'))
          .map(f => f.getBoundingClientRect().right)})""")
    assert sizes["page"] <= width and sizes["panel"] <= width, sizes
    assert min(sizes["tabs"]) >= 44 and sizes["font"] >= 16, sizes
    assert sizes["figs"] and all(right <= width for right in sizes["figs"]), sizes


def test_a_student_opens_the_other_views_at_any_step_and_keeps_following(server, browser, lecture):
    lecturer, code = lecture
    for width, height in ((390, 844), (1366, 768)):  # a phone, a laptop
        step = _to_resolve(lecturer)
        page, errors = _student(browser, server, code, width, height)
        hosts: set[str] = set()
        page.on("request", lambda r, hosts=hosts: hosts.add(r.url.split("/")[2]))
        before = page.evaluate("document.documentElement.scrollWidth")
        page.locator("#tab-charts").click()
        cycle = (step - 1) // 5
        shown = _view(page, f"charts:{cycle}:resolve:")
        assert shown["figures"] >= 3  # q, the acceptance tests, (p vs q,) the resolve's distribution
        _fits(page, width, before)
        _lecturer_step(lecturer)  # rollback, then the next cycle's draft
        _follows(page, _lecturer_step(lecturer))  # an open tab does not stop the following...
        assert _view(page, f"charts:{cycle + 1}:draft:")["figures"] == 1  # ...and the view follows the stage
        page.locator("#back").click()  # branched: back to the resolve phase of the cycle before
        page.locator("#back").click()
        assert _cur(page) == _cur(lecturer) - 2
        _view(page, f"charts:{cycle}:resolve:")
        positions = page.locator("#views .svf-pos[aria-pressed=false]")
        if positions.count():  # p vs q at another draft position
            pos = positions.first.get_attribute("data-pos")
            positions.first.click()
            _view(page, f"charts:{cycle}:resolve:{pos}")
            assert page.locator(f"#views .svf-pos[data-pos='{pos}']").get_attribute("aria-pressed") == "true"
        here = _cur(page)
        page.locator("#tab-charts").focus()
        page.keyboard.press("ArrowRight")  # the tablist's own keys: the next tab, the stage stays
        assert page.evaluate("document.activeElement.id") == "tab-stats" and _cur(page) == here
        stats = _view(page, f"stats:{cycle}")
        assert stats["figures"] >= 1 and page.locator("#views table tbody tr").count() == cycle
        _fits(page, width, before)
        page.keyboard.press("ArrowRight")
        page.locator("#views").get_by_text("Common misconceptions").wait_for()
        assert "bonus token" in page.locator("#views").inner_text()
        page.keyboard.press("f")  # Follow, with a tab open
        _follows(page, _cur(lecturer))
        page.locator("#tab-stats").click()
        step = _lecturer_step(lecturer)
        _follows(page, step)
        _view(page, f"stats:{step // 5}")
        assert page.locator("#views").is_visible() and "Following" in page.locator("#where").inner_text()
        assert hosts == {server.split("/")[2]} and not errors, (hosts, errors)  # nothing from another host
        page.screenshot(path=f"test-artifacts/browser/live-views-{width}.png", full_page=True)
        page.context.close()


def test_a_student_tries_the_cycle_on_screen_on_a_decoder_of_their_own(server, browser, lecture):
    """The follower's link opens the app on a fork of the lecture's run (ui/fork.py): the same text so far,
    the cycle on screen stepped at the student's pace on the student's own decoder; the lecture goes on."""
    lecturer, code = lecture
    step = _to_resolve(lecturer)
    cycle = (step - 1) // 5
    student, errors = _student(browser, server, code)
    link = student.locator("#fork")
    link.wait_for()
    assert link.inner_text() == f"Try cycle {cycle + 1} yourself ↗"
    with student.context.expect_page() as opened:
        link.click()
    fork = opened.value
    fork.set_default_timeout(120_000)
    fork.get_by_text(f"Your own try of cycle {cycle + 1} of the live lecture {code}").first.wait_for()
    fork.wait_for_function(f"window.__specvizStage && window.__specvizStage.state.cur === {5 * cycle}")
    assert "differs from the lecture" not in fork.locator("[data-testid='stMain']").inner_text()
    for _ in range(step - 5 * cycle):  # the student's follower page, back to the same step of the lecture
        student.locator("#back").click()
    student.wait_for_function(f"window.__specvizStage.state.cur === {5 * cycle}")
    same = "(p) => window.__specvizStage.state.shown.strip"
    assert fork.evaluate(same, None) == student.evaluate(same, None)  # the text so far is the lecture's
    lecturer_at = _cur(lecturer)
    assert _lecturer_step(fork) == 5 * cycle + 1  # the fork's own cycle, computed by its own decoder
    assert _cur(lecturer) == lecturer_at and not errors
    fork.close()
    student.context.close()


def test_a_class_joins_at_once_over_http_and_the_lecturer_keeps_going_up_to_the_rooms_cap(server, browser, lecture):
    """200 joins released at one instant on the real server: each answers with a student of its own while
    the lecturer's stage keeps stepping; a second burst past the room's cap gets 429 with the room's words
    for the joins over it. (The times are `bench.live_join`'s: no timing is asserted here.)"""
    from bench.live_join import burst
    from specviz.room import MAX_STUDENTS

    lecturer, code = lecture
    url = f"{server}{LIVE}/{code}"
    results, waiter = burst(url, 200)
    for _ in range(2):
        _lecturer_step(lecturer)  # the lecturer's page answers meanwhile
    waiter.join(180)
    assert len(results) == 200 and {s for s, _, _ in results} == {200}, Counter(s for s, _, _ in results)
    assert len({key for _, key, _ in results}) == 200
    over, waiter = burst(url, MAX_STUDENTS - 150)  # 450 and what came before: past the cap
    waiter.join(180)
    statuses = Counter(s for s, _, _ in over)
    assert set(statuses) <= {200, 429} and statuses[429] >= 50 and sum(statuses.values()) == MAX_STUDENTS - 150
    assert {m for s, m, _ in over if s == 429} == {f"this room is full ({MAX_STUDENTS} students)"}
    _lecturer_step(lecturer)
    late = browser.new_page()  # a student's page at the full room says so, in the room's words
    late.goto(f"{server}{LIVE}/{code}", wait_until="domcontentloaded")
    late.locator("#where").get_by_text(f"Cannot join: this room is full ({MAX_STUDENTS} students)").wait_for()
    late.close()
