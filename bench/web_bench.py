"""Web benchmark: one browser step through orchard against a bare Playwright loop doing the same
on the same page, browser start (cold and warm), and pages per second with 1 and 2 workers.

Both sides drive the same Chromium binary (Debian's headless shell) on the same web-mini shop
(the real apps server, seed 1001). A step is what an agent's turn costs the browser: an action
(a click on a link that loads a page), the page settling to its DOM, and the observation
(Playwright's AI accessibility snapshot, the title, the URL). orchard's step goes through the
tool surface (ToolSession: schema check, dispatch log) to the episode's browser loop thread and
its Chromium in a bubblewrap jail; the bare loop calls Playwright's sync API on an unjailed
browser. Goal: orchard / bare <= 1.2.

  cold   start Playwright's driver and the browser (orchard: in its jail; bare: unjailed)
  warm   a new episode: context, first page loaded, first observation (orchard: BrowserSession.open)

Usage: .venv/bin/python bench/web_bench.py [--steps 40] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("ORCHARD_HOME", tempfile.mkdtemp(prefix="orchard-bench-"))

from orchard_cli.tasks.kit.browser_actions import tool_specs  # noqa: E402
from orchard_cli.tasks.web.apps.control import WebApps  # noqa: E402
from orchard_cli.tasks.kit.browser import ARGS, WebBrowser, browser_binary  # noqa: E402
from orchard_cli.tasks.kit.browser_session import BrowserSession  # noqa: E402
from orchard_cli.tools import ToolSession  # noqa: E402

_TEMP = tempfile.TemporaryDirectory(prefix="web-bench-")


def tmp() -> Path:
    """A folder for a browser or the apps, removed with the run's own when the bench ends."""
    return Path(tempfile.mkdtemp(dir=_TEMP.name))


LINKS = ("role=link[name='All products']", "role=link[name=/^Cart/]")
"""Two pages a step alternates between (each click loads a page)."""


def med(values: list[float]) -> float:
    return statistics.median(values) * 1000


def bare_steps(origin: str, steps: int) -> tuple[list[float], list[float], list[float]]:
    """(cold, warm, step) seconds with Playwright's sync API on an unjailed browser."""
    from playwright.sync_api import sync_playwright

    cold, warm, step = [], [], []
    for _ in range(3):  # as orchard's cold start: Playwright's driver, then the browser
        started = time.perf_counter()
        p = sync_playwright().start()
        browser = p.chromium.launch(executable_path=browser_binary(), args=ARGS)
        cold.append(time.perf_counter() - started)
        browser.close()
        p.stop()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_binary(), args=ARGS)
        for _ in range(5):
            started = time.perf_counter()
            context = browser.new_context(viewport={"width": 1280, "height": 720})
            page = context.new_page()
            page.goto(origin + "/", wait_until="domcontentloaded")
            page.aria_snapshot(mode="ai"), page.title(), page.url
            warm.append(time.perf_counter() - started)
            context.close()
        context = browser.new_context(viewport={"width": 1280, "height": 720})
        page = context.new_page()
        page.goto(origin + "/", wait_until="domcontentloaded")
        for i in range(steps):
            started = time.perf_counter()
            page.locator(LINKS[i % 2]).click()
            page.wait_for_load_state("domcontentloaded")
            page.aria_snapshot(mode="ai"), page.title(), page.url
            step.append(time.perf_counter() - started)
        browser.close()
    return cold, warm, step


def orchard_steps(origins: dict[str, str], steps: int) -> tuple[list[float], list[float], list[float]]:
    cold, warm, step = [], [], []
    for _ in range(3):
        root = tmp()
        started = time.perf_counter()
        browser = WebBrowser(root).start()
        cold.append(time.perf_counter() - started)
        browser.stop()
    browser = WebBrowser(tmp()).start()
    try:
        for _ in range(5):
            started = time.perf_counter()
            episode = BrowserSession(browser, origins)
            episode.open("shop:/")
            warm.append(time.perf_counter() - started)
            episode.close()
        episode = BrowserSession(browser, origins)
        episode.open("shop:/")
        session = ToolSession(tool_specs(), episode)
        for i in range(steps):
            started = time.perf_counter()
            reply = session.call("click", {"selector": LINKS[i % 2]})
            step.append(time.perf_counter() - started)
            assert reply.ok, reply.error
        episode.close()
    finally:
        browser.stop()
    return cold, warm, step


def pages_per_second(origins: dict[str, str], workers: int, seconds: float) -> float:
    """Steps per second over `workers` threads, each with its own browser (as a run's workers)."""
    browsers = [WebBrowser(tmp()).start() for _ in range(workers)]
    counts = [0] * workers
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        episode = BrowserSession(browsers[i], origins)
        episode.open("shop:/")
        session = ToolSession(tool_specs(), episode)
        while time.monotonic() < stop:
            assert session.call("click", {"selector": LINKS[counts[i] % 2]}).ok
            counts[i] += 1
        episode.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for b in browsers:
        b.stop()
    return sum(counts) / seconds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    apps = WebApps(tmp())
    apps.start()
    try:
        apps.reset({"seed": 1001})
        origins = apps.origins()
        b_cold, b_warm, b_step = bare_steps(origins["shop"], args.steps)
        o_cold, o_warm, o_step = orchard_steps(origins, args.steps)
        print(f"web step benchmark: {args.steps} steps on the web-mini shop ({os.cpu_count()} cores)")
        print(f"{'':28}{'orchard':>12}{'bare Playwright':>18}{'ratio':>8}")
        for name, ours, bare in (("step (act + observe), ms", o_step, b_step),
                                 ("browser start cold, ms", o_cold, b_cold),
                                 ("episode start warm, ms", o_warm, b_warm)):
            print(f"{name:28}{med(ours):12.1f}{med(bare):18.1f}{med(ours) / med(bare):8.2f}")
        one = pages_per_second(origins, 1, args.seconds)
        two = pages_per_second(origins, 2, args.seconds)
        print(f"pages per second (orchard steps): 1 worker {one:.1f}, 2 workers {two:.1f} (x{two / one:.2f})")
    finally:
        apps.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
