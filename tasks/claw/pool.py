"""Service sets for claw episodes (orchard_cli.tasks.kit.leases): each a `ClawServices` in a folder of its
own under ORCHARD_HOME/claw, removed when the set stops. Every claw task uses the same kind of
set, so any free one serves (the family resets it to the task's fixture)."""

from __future__ import annotations

import shutil
from orchard_cli.tasks.kit.leases import LeasePool, set_folder

KEY = "claw"


class OwnedServices:
    """A ClawServices and the folder it lives in (gone with it)."""

    def __init__(self) -> None:
        from orchard_cli.tasks.claw.services import ClawServices

        self.root = set_folder("claw", "services-")
        self.services = ClawServices(self.root)
        try:
            self.services.start()
        except BaseException:
            self.stop()
            raise

    def failed(self) -> str | None:
        return self.services.failed()

    def stop(self) -> None:
        self.services.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class ServicePool(LeasePool[OwnedServices]):
    def __init__(self) -> None:
        super().__init__(prefix="svc")
