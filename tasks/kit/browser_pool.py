"""Browsers alone for browser episodes (orchard_cli.tasks.kit.leases): one jailed Chromium per worker, a fresh
context per episode, with no local web apps beside it (MiniWoB++'s pages from the package's HTML,
the live web). `kind` names the folder under ORCHARD_HOME and the lease key; `read_only` the host
folders the browser may read (nothing else of the host's files)."""

from __future__ import annotations

import shutil
from typing import Callable

from orchard_cli.tasks.kit.leases import LeasePool, set_folder


class BrowserSet:
    def __init__(self, kind: str, read_only: list[str]) -> None:
        from orchard_cli.tasks.kit.browser import WebBrowser

        self.root = set_folder(kind, "browser-")
        self.browser = WebBrowser(self.root, read_only=read_only)
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
    """`read_only` is called when a browser starts (a package's folder is found then, not at import)."""

    def __init__(self, kind: str, read_only: Callable[[], list[str]] = list) -> None:
        super().__init__(prefix="browser")
        self.kind = kind
        self.read_only = read_only

    def lease_set(self) -> tuple[str, BrowserSet]:
        """A running browser (its set: `.browser`) and its lease id."""
        return self.lease(self.kind, lambda: BrowserSet(self.kind, self.read_only()))
