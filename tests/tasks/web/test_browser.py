"""The web family's browser: a real Chromium in a bubblewrap jail, driven by Playwright, on the
real web-mini apps. What the agent's actions do, what they answer when wrong, what the jail and
the allow-list keep out, and what a dead browser reads as (the service gone, not the agent)."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from orchard_cli.tasks.kit.browser_actions import tool_specs
from orchard_cli.tasks.web.apps.control import WebApps
from orchard_cli.tasks.kit.browser import WebBrowser, jail_argv
from orchard_cli.tasks.kit.browser_session import BrowserSession
from orchard_cli.tools import ToolSession

pytestmark = [pytest.mark.chromium, pytest.mark.bwrap]


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    apps = WebApps(tmp_path_factory.mktemp("apps"))
    apps.start()
    yield apps
    apps.stop()


@pytest.fixture()
def browser(tmp_path):
    browser = WebBrowser(tmp_path).start()
    yield browser
    browser.stop()


def _ref(observation: str, role: str, name: str) -> str:
    found = re.search(rf'{role} "{re.escape(name)}"[^\n]*\[ref=(\w+)\]', observation)
    assert found, f"no {role} {name!r} in:\n{observation[:3000]}"
    return found.group(1)


def test_the_jail_shows_the_browser_none_of_the_hosts_own_files(tmp_path):
    argv = jail_argv(tmp_path, [])
    seen = subprocess.run([*argv, "sh", "-c", "ls /; ls /root /work /etc/shadow 2>&1; echo $HOME"],
                          capture_output=True, text=True, timeout=60).stdout
    top = seen.split("ls:")[0].split()
    assert "usr" in top and "root" not in top and "work" not in top and "home" in top
    assert seen.count("No such file or directory") == 3 and seen.strip().endswith("/home/web")


def test_actions_by_id_and_by_selector_on_the_shop_and_the_errors_an_agent_gets(apps, browser):
    apps.reset({"seed": 1001})
    episode = BrowserSession(browser, apps.origins())
    try:
        page = episode.open("shop:/")
        assert page.startswith(f"URL: {apps.origins()['shop']}/") and "Accessibility tree" in page
        box = _ref(page, "searchbox", "Search products")
        assert episode.act("fill", {"bid": box, "value": "mug"}).ok
        after = episode.act("press", {"bid": box, "key": "Enter"})
        assert after.ok and "/search?q=mug" in after.result.splitlines()[0]

        stale = episode.act("click", {"bid": box})  # ids change with the page
        assert (stale.ok, stale.status) == (False, 400) and "no element" in stale.error
        started = time.monotonic()
        missing = episode.act("click", {"bid": "e9999"})
        assert missing.status == 400 and time.monotonic() - started < 3, "an unknown id fails at once"
        neither = episode.act("click", {})
        assert neither.status == 400 and "bid" in neither.error

        cart = episode.act("click", {"selector": "role=link[name=/^Cart/]"})
        assert cart.ok and "/cart" in cart.result.splitlines()[0]
        assert episode.act("go_back").result.splitlines()[0].endswith("/search?q=mug")
        tab = episode.act("new_tab", {"url": "shop:/orders"})
        assert "[1]" in tab.result and "(current)" in tab.result.splitlines()[2].split("[1]")[1]
        assert episode.act("tab_focus", {"index": 0}).result.splitlines()[0].endswith("/search?q=mug")
        assert episode.act("answer", {"text": "Blue Mug"}).ok and episode.answer == "Blue Mug"
        assert episode.screenshot()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        episode.close()


def test_sites_outside_the_task_are_blocked_and_recorded(apps, browser):
    apps.reset({"seed": 1001})
    shop = apps.origins()["shop"]
    episode = BrowserSession(browser, {"shop": shop})
    try:
        episode.open("shop:/")
        wiki = apps.origins()["wiki"]
        refused = episode.act("goto", {"url": wiki + "/"})
        assert refused.status == 400 and "outside this task's sites" in refused.error
        assert episode.act("goto", {"url": "file:///etc/passwd"}).status == 400
        written = episode.act("goto", {"url": "data:text/html,<script>fetch('http://192.0.2.1/')</script>"})
        assert written.status == 400, "the agent browses the sites, it does not write pages"
        # a page of an allowed site that loads things from elsewhere: no request leaves
        ws = wiki.replace("http", "ws", 1)
        probe = (f"<img src='{wiki}/pixel.png'><script>fetch('http://192.0.2.1/x');"
                 f"window.sock = new WebSocket('{ws}/socket');</script><h1>probe</h1>")
        browser.call(episode.page.set_content(probe))
        deadline = time.monotonic() + 10
        while len(episode.blocked) < 6 and time.monotonic() < deadline:
            time.sleep(0.1)
        urls = [b["url"] for b in episode.blocked]
        assert wiki + "/" in urls and "file:///etc/passwd" in urls and wiki + "/pixel.png" in urls
        assert "http://192.0.2.1/x" in urls and ws + "/socket" in urls and any(u.startswith("data:") for u in urls)
        assert not any(r["site"] == "wiki" for r in apps.requests()), "the wiki never saw a request"
    finally:
        episode.close()


def test_a_browser_that_dies_is_the_service_gone_never_the_agents_failure(apps, tmp_path):
    apps.reset({"seed": 1001})
    browser = WebBrowser(tmp_path).start()
    episode = BrowserSession(browser, apps.origins())
    try:
        episode.open("shop:/")
        session = ToolSession(tool_specs(), episode)
        assert session.call("observe", {}).ok
        subprocess.run(["pkill", "-9", "-f", f"ORCHARD_WEB_BROWSER {tmp_path}"], check=True, timeout=30)
        deadline = time.monotonic() + 30
        while browser.failed() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert browser.failed()
        reply = session.call("click", {"selector": "text=Search"})
        assert reply.status == 503 and session.failure
    finally:
        episode.close()
        browser.stop()
