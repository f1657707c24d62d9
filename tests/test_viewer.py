"""`orchard view RUN`: the run viewer in a real browser (Chromium driven by Playwright).

The runs are real: web-mini in bubblewrap with real local web apps, orchard's own web agent driven
by a scripted model (one episode answers right, one wrong), and a gold run of the same two tasks
(no model ran: its evidence and grading must still show). The site is written once with
`--compare`; the browser opens it from disk (file://), filters the list, opens episodes, and
finds their dispatches, screenshots, model calls, state changes and grading; the folder copied
elsewhere still shows its screenshots.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from orchard_cli.main import main
from orchard_cli.models.scripted import ScriptedEndpoint

pytestmark = [pytest.mark.chromium, pytest.mark.bwrap]
TASKS = "booking-availability-7003,booking-availability-7019"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("viewer")
    model = ScriptedEndpoint(['goto("booking:/availability")', 'answer("10:00")',
                              'goto("booking:/availability")', 'answer("23:00")'], model="teacher")
    info = model.start()
    try:
        assert main(["eval", "web-mini", "--instances", TASKS, "--harness", "web", "--model", "teacher",
                     "--base-url", info.base_url, "--max-turns", "4", "--out", str(root / "agent"), "--quiet"]) == 0 or \
            json.loads((root / "agent" / "scorecard.json").read_text())["total"] == 2
    finally:
        model.stop()
    assert main(["eval", "web-mini", "--instances", TASKS, "--predictions", "gold", "--out", str(root / "gold"),
                 "--quiet"]) == 0
    assert main(["view", str(root / "agent"), "--compare", str(root / "gold")]) == 0
    return root


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    from orchard_cli.tasks.kit.browser import browser_binary

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=browser_binary())
        yield chromium
        chromium.close()


def _open(browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector("#episodes tbody tr")
    return page, errors


def _loaded_images(page, selector: str) -> int:
    return page.eval_on_selector_all(selector, "els => els.filter(e => e.complete && e.naturalWidth > 0).length")


def test_the_list_filters_and_an_episode_shows_every_step(site, browser):
    page, errors = _open(browser, (site / "agent" / "view" / "index.html").as_uri())
    assert page.locator("#episodes tbody tr").count() == 4  # A's two and B's two
    assert page.locator("#compare tbody tr.changed").count() == 1  # the wrong answer resolves in gold
    page.select_option("select[aria-label=outcome]", "unresolved")
    page.wait_for_function("document.querySelectorAll('#episodes tbody tr').length === 1")
    assert "booking-availability-7019" in page.inner_text("#episodes tbody")
    assert "filtered from 4" in page.inner_text("#count")
    page.click("#episodes tbody tr")
    page.wait_for_selector("#steps")
    steps = page.inner_text("#steps")
    assert "goto" in steps and "answer" in steps and "23:00" in steps
    page.wait_for_function("[...document.querySelectorAll('#steps img')].every(i => i.complete)")
    assert _loaded_images(page, "#steps img") >= 3  # the start page and the page after each action
    page.click("#calls details.call:first-of-type > summary")  # the first call folds open
    calls = page.inner_text("#calls")
    assert "Model calls (2)" in calls and 'answer("23:00")' in calls and 'goto("booking:/availability")' in calls
    assert "Grading" in page.inner_text("#grading") and "failed" in page.inner_text("#grading")
    page.click("#back")
    page.wait_for_selector("#episodes tbody tr")
    assert page.locator("#episodes tbody tr").count() == 1  # the filter is kept
    assert not errors, errors


def test_scorecard_rows_link_to_their_episodes_and_gold_shows_its_evidence(site, browser):
    page, errors = _open(browser, (site / "agent" / "view" / "index.html").as_uri())
    page.locator("a.outcome-link").first.click()  # A's outcomes: resolved 1
    page.wait_for_function("document.querySelectorAll('#episodes tbody tr').length === 1")
    page.goto((site / "agent" / "view" / "index.html").as_uri() + "#run=1")
    page.wait_for_function("document.querySelectorAll('#episodes tbody tr').length === 2")
    page.locator("#episodes tbody tr").first.click()
    page.wait_for_selector("#grading")
    assert "no model ran" in page.inner_text("#calls")
    assert "answer" in page.inner_text("#steps") and "passed" in page.inner_text("#grading")
    assert "Final answer" in page.inner_text("#evidence")
    assert not errors, errors


def test_the_copied_folder_keeps_its_screenshots(site, browser, tmp_path):
    copy = tmp_path / "elsewhere"
    shutil.copytree(site / "agent" / "view", copy)
    page, errors = _open(browser, (copy / "index.html").as_uri())
    page.wait_for_function("[...document.querySelectorAll('img.thumb')].every(i => i.complete)")
    assert _loaded_images(page, "img.thumb") == 4
    assert not errors, errors


def test_the_scorecard_page_copied_alone_keeps_its_thumbnails(site, browser, tmp_path):
    alone = tmp_path / "scorecard.html"
    shutil.copy(site / "agent" / "scorecard.html", alone)  # without the run folder beside it
    page = browser.new_page()
    page.goto(alone.as_uri())
    page.wait_for_function("[...document.querySelectorAll('#screenshots img')].every(i => i.complete)")
    assert _loaded_images(page, "#screenshots img") == 1  # the unresolved attempt's last page
    assert page.locator("td.id a[href='logs/booking-availability-7019/attempt-1/']").count() == 1


def test_a_reply_cut_at_the_token_limit_says_so_and_folds(browser, tmp_path):
    """As the walkthrough's SmolLM2 run showed: one reply repeating a line to the token limit filled
    three screens twice (the call and the final answer), and nothing said why the agent stopped."""
    reply = "You can call tools. to call a bash command in the repository and return its output.\n\n" * 40
    model = ScriptedEndpoint([{"content": reply, "finish_reason": "length"}], model="small")
    info = model.start()
    try:
        main(["eval", "calc", "--limit", "1", "--harness", "bash", "--model", "small", "--base-url", info.base_url,
              "--max-turns", "2", "--out", str(tmp_path / "run"), "--quiet"])
    finally:
        model.stop()
    assert main(["view", str(tmp_path / "run")]) == 0
    page, errors = _open(browser, (tmp_path / "run" / "view" / "index.html").as_uri())
    page.locator("#episodes tbody tr").first.click()
    page.wait_for_selector("#grading")
    assert "stopped: length (the token limit)" in page.inner_text("#calls summary")
    for box in ("#calls", "#evidence"):
        shown = page.inner_text(box)
        assert re.search(r"show all \(3,\d{3} characters, (79|80|81) lines\)", shown), shown[:2000]
        assert shown.count("You can call tools.") <= 12 + 1  # the start, not all 40 (folded ones are hidden)
    page.click("#evidence details.long > summary, #evidence .long summary")
    assert page.inner_text("#evidence").count("You can call tools.") >= 40
    assert not errors, errors
