"""Browsers for miniwob episodes: one jailed Chromium per worker (tasks/kit/browser_pool.py) that
may read MiniWoB++'s HTML and nothing else of the host's files; a fresh context per episode."""

from __future__ import annotations

from orchard_cli.tasks.kit.browser_pool import BrowserPool

KIND = "miniwob"


def miniwob_pool() -> BrowserPool:
    from orchard_cli.tasks.miniwob.suite import html_root

    return BrowserPool(KIND, lambda: [str(html_root())])
