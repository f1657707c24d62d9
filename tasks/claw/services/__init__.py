"""Real services for claw episodes: SMTP (aiosmtpd), IMAP (pymap) and CalDAV/CardDAV (radicale)
on the host's loopback, one Maildir and one radicale store behind both the protocols and the tools.

    ClawServices     start (cold), reset(fixture) per attempt (warm), call (the ToolBackend),
                     snapshot, protocol_log, failed, stop
    ServicesFixture  what an attempt starts from (task.yaml's `services:`)
    ACTIONS          every tool action: description and input schema

Imported lazily: the SMTP server's process imports `mailstore` without the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchard_cli.tasks.claw.services.catalogue import ACTIONS
    from orchard_cli.tasks.claw.services.fixture import ServicesFixture
    from orchard_cli.tasks.claw.services.claw_services import ClawServices

__all__ = ["ACTIONS", "ClawServices", "ServicesFixture"]
_WHERE = {"ACTIONS": "catalogue", "ClawServices": "claw_services", "ServicesFixture": "fixture"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
