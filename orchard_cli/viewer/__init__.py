"""The run viewer (`orchard view RUN`): a static site for a whole run that stays fast at 10,000
episodes. `sources.py` reads runs (pluggable: `orchard.viewers` entry points), `detail.py` makes
one episode's page data, `site.py` writes the site, `app.html` is the page that shows it."""

from __future__ import annotations

from orchard_cli.viewer.site import build_site
from orchard_cli.viewer.sources import Entry, Source, open_source, readers

__all__ = ["Entry", "Source", "build_site", "open_source", "readers"]
