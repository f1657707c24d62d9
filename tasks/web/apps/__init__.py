"""The web-mini suite's local sites, real enough for DeepShop/WebArena-style tasks: a shop
(catalogue, search, facets, variants, cart, checkout), a wiki (pages, history, edit), webmail
(over claw's Maildir store) and a room-booking site (availability, a validated form, cancel).

    WebApps      the host side: start, reset(fixture), query, requests, snapshot, stop (control.py)
    WebFixture   what an attempt starts from (fixture.py)
    SITES        the site names

One process serves them all (server.py), one loopback port per site; its control channel is its
stdin/stdout, never HTTP. Imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchard_cli.tasks.web.apps.control import SITES, WebApps
    from orchard_cli.tasks.web.apps.fixture import WebFixture

__all__ = ["SITES", "WebApps", "WebFixture"]
_WHERE = {"SITES": "control", "WebApps": "control", "WebFixture": "fixture"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
