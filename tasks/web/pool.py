"""Web sets for web episodes (orchard_cli.tasks.kit.leases): the local apps and a jailed browser, started
together once per worker in a folder of their own under ORCHARD_HOME/web (removed when the set
stops). Every web-mini task uses the same kind of set: the family resets the apps to the task's
fixture and opens a fresh browser context for each episode."""

from __future__ import annotations

import shutil

from orchard_cli.tasks.kit.leases import LeasePool, set_folder

KEY = "web"


class WebSet:
    """The apps (tasks/web/apps) and a WebBrowser, started together."""

    def __init__(self) -> None:
        from orchard_cli.tasks.web.apps.control import WebApps
        from orchard_cli.tasks.kit.browser import WebBrowser

        self.root = set_folder("web", "set-")
        self.apps = WebApps(self.root / "apps")
        self.browser = WebBrowser(self.root / "browser")
        try:
            (self.root / "browser").mkdir()
            self.apps.start()
            self.browser.start()
        except BaseException:
            self.stop()
            raise

    def failed(self) -> str | None:
        return self.apps.failed() or self.browser.failed()

    def stop(self) -> None:
        self.browser.stop()
        self.apps.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class WebPool(LeasePool[WebSet]):
    def __init__(self) -> None:
        super().__init__(prefix="web")

    def lease_set(self) -> tuple[str, WebSet]:
        return self.lease(KEY, WebSet)
