"""Browsers for miniwob episodes (orchard_cli.leases): one jailed Chromium per worker that may
read MiniWoB++'s HTML and nothing else of the host's files; a fresh context per episode."""

from __future__ import annotations

import shutil
from typing import Any

from orchard_cli.leases import LeasePool, set_folder

KEY = "miniwob"


class BrowserSet:
    def __init__(self) -> None:
        from orchard_cli.tasks.miniwob.suite import html_root
        from orchard_cli.tasks.web.browser import WebBrowser

        self.root = set_folder("miniwob", "browser-")
        self.browser = WebBrowser(self.root, read_only=[str(html_root())])
        try:
            self.browser.start()
        except BaseException:
            self.stop()
            raise

    def failed(self) -> str | None:
        return self.browser.failed()

    def stop(self) -> None:
        self.browser.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class BrowserPool(LeasePool[BrowserSet]):
    def __init__(self) -> None:
        super().__init__(prefix="browser")

    def lease_browser(self) -> tuple[str, Any]:
        lease, owned = self.lease(KEY, BrowserSet)
        return lease, owned.browser
