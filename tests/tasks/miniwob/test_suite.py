"""The MiniWoB++ suite on a bare Playwright page (no jail, no orchard browser): an episode starts
from a seed with an instruction, the task's own reward reads back solved, failed, timed out or
abandoned, and a seed always gives the same episode."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

from orchard_cli.errors import MissingDependencyError, UnknownNameError
from orchard_cli.tasks.miniwob import suite

sys.path.insert(0, str(Path(__file__).parent))
import page_solvers as solvers  # noqa: E402 - scripted solutions on a bare page, this folder's helper

pytestmark = pytest.mark.chromium
SHELL = os.environ.get("ORCHARD_CHROMIUM") or "/usr/lib/chromium/chromium-headless-shell"
FIVE = ["click-button", "click-link", "enter-text", "click-checkboxes", "click-dialog"]


def _missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "needs playwright (pip install playwright==1.65.0)"
    if importlib.util.find_spec("miniwob") is None:
        return f"needs MiniWoB++'s HTML ({suite.INSTALL})"
    if not Path(SHELL).is_file():
        return f"needs {SHELL} (apt-get install chromium-headless-shell)"
    return None


class Browser:
    """One headless Chromium for the module, driven on an event loop of its own."""

    def __init__(self) -> None:
        from playwright.async_api import async_playwright

        self.loop = asyncio.new_event_loop()
        self.playwright = self.run(async_playwright().start())
        self.browser = self.run(self.playwright.chromium.launch(executable_path=SHELL, args=["--no-sandbox"]))

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def page(self):
        return self.run(self.browser.new_page())

    def close(self) -> None:
        self.run(self.browser.close())
        self.run(self.playwright.stop())
        self.loop.close()


@pytest.fixture(scope="module")
def chromium():
    reason = _missing()
    if reason:
        if os.environ.get("ORCHARD_TEST_STRICT") == "1":
            pytest.fail(f"prerequisite missing under ORCHARD_TEST_STRICT=1: {reason}")
        pytest.skip(reason)
    browser = Browser()
    yield browser
    browser.close()


@pytest.fixture()
def page(chromium):
    page = chromium.page()
    yield page
    chromium.run(page.close())


def test_the_package_holds_the_suite_and_names_its_install_line_when_absent(monkeypatch):
    if importlib.util.find_spec("miniwob") is None:
        pytest.skip(f"needs {suite.INSTALL}")
    names = suite.task_names()
    assert len(names) == 130 and set(FIVE) <= set(names) and set(solvers.solvable()) <= set(names)
    assert suite.task_url("click-button").startswith("file://") and (suite.html_root() / "core" / "core.js").is_file()
    with pytest.raises(UnknownNameError, match="click-button"):
        suite.task_url("click-buton")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(MissingDependencyError) as info:
        suite.html_root()
    assert info.value.hint == "pip install --no-deps miniwob==1.1.0"


@pytest.mark.parametrize("name", FIVE)
def test_a_scripted_solution_is_rewarded_1_and_ends_the_episode(chromium, page, name):
    started = chromium.run(suite.start(page, name, 3))
    assert started["utterance"] and started["url"].endswith(f"/{name}.html")
    assert chromium.run(suite.reward(page)) == {"done": False, "reward": 0.0, "raw_reward": 0.0, "reason": None,
                                               "success": False, "full_credit": False}
    chromium.run(solvers.solve(page, name, started["utterance"]))
    got = chromium.run(suite.reward(page))
    assert got["done"] and got["raw_reward"] == 1.0 and got["success"] and got["full_credit"]
    assert 0.99 < got["reward"] <= 1.0  # scaled by the time taken, out of EPISODE_MAX_MS


@pytest.mark.parametrize("name", ["enter-text", "click-tab", "click-checkboxes", "login-user"])
def test_a_near_miss_ends_the_episode_with_no_reward(chromium, page, name):
    started = chromium.run(suite.start(page, name, 3))
    chromium.run(solvers.near_miss(page, name, started["utterance"]))
    got = chromium.run(suite.reward(page))
    assert got["done"] and got["raw_reward"] <= 0 and got["reward"] <= 0 and not got["success"]


def test_one_seed_is_one_episode_and_another_seed_another(chromium, page):
    def episode(name, seed):
        started = chromium.run(suite.start(page, name, seed))
        return started["utterance"], started["fields"], chromium.run(page.locator("#area").inner_html())

    first = episode("enter-text", 11)
    assert first[1] == {"target": first[0].split('"')[1]}  # the package's own field extractor
    assert episode("enter-text", 11) == first
    assert episode("enter-text", 12) != first
    assert episode("click-checkboxes", 5) == episode("click-checkboxes", 5)


def test_an_instruction_shown_as_a_picture_is_put_in_words(chromium, page):
    started = chromium.run(suite.start(page, "use-colorwheel-2", 0))  # a colour swatch in the page
    assert re.fullmatch(r"Select the following color #[0-9a-f]{6} with the color picker and hit Submit\.",
                        started["utterance"])
    started = chromium.run(suite.start(page, "click-menu-2", 2))  # a jQuery UI icon in the page
    assert started["utterance"].endswith('the item with the "ui-icon-stop" icon.')


def test_the_display_for_people_is_hidden_so_clicks_after_the_end_do_not_wait(chromium, page):
    started = chromium.run(suite.start(page, "click-test-2", 0))
    cover = page.locator("#sync-task-cover")
    chromium.run(solvers.solve(page, "click-test-2", started["utterance"]))
    assert chromium.run(cover.is_hidden()) and chromium.run(page.locator("#reward-display").is_hidden())
    chromium.run(page.get_by_role("button", name="TWO").click(timeout=2000))  # no START cover in the way
    assert chromium.run(suite.reward(page))["raw_reward"] == 1.0  # only the first judgement counts

    chromium.run(suite.start(page, "click-test-2", 0, hide_display=False))
    assert chromium.run(page.locator("#reward-display").is_visible())


def test_the_task_times_out_by_itself_and_leaving_the_page_reads_as_a_failure(chromium, page):
    chromium.run(suite.start(page, "click-test", 1, max_time_ms=200))
    chromium.run(page.wait_for_timeout(400))
    got = chromium.run(suite.reward(page))
    assert got["done"] and got["raw_reward"] == -1.0 and got["reason"] == "timed out"

    chromium.run(suite.start(page, "click-test", 1))
    chromium.run(page.reload())  # a reloaded page is a new, unstarted task: not the episode we started
    got = chromium.run(suite.reward(page))
    assert got["done"] and got["reward"] == 0.0 and "left the task page" in got["reason"]
