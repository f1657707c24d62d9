"""The run viewer: a static site for a whole run, that opens from disk and stays fast at 10,000
episodes because each page loads only what it shows.

    SITE/index.html           the app (HTML, CSS and script in one file; no network, no CDN)
    SITE/data/index.js        the scorecard and one short row per episode (the list filters,
                              sorts and pages these in the browser: 100 rows drawn at a time)
    SITE/data/e/<n>.js        one episode's page data (`detail.episode_detail`), loaded on open
    SITE/shots/...            its screenshots and the images its model saw, hard-linked (copied
                              across file systems) so the folder can be copied or served anywhere

Data files are scripts (`window.ORCHARD_INDEX = ...`, `orchardEpisode(n, ...)`), not JSON: a page
opened from disk (file://) may load scripts but not fetch files. Text goes into the page as text
(never as HTML), so a task's or a model's words cannot run in it.

`build_site(source, out, compare=...)` writes it; `--compare RUN_B` adds B's episodes and a
per-task table that lines the two runs up.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from importlib import resources
from pathlib import Path
from typing import Any

from orchard_cli.viewer.detail import episode_detail
from orchard_cli.viewer.sources import Entry, Source

SITE_FORMAT = 1
COLUMNS = ("n", "run", "task", "attempt", "category", "model", "tokens", "seconds", "calls", "steps", "score",
           "groups", "shot", "error")
"""The index's row layout (rows are arrays, not objects: a 10,000-episode index stays ~2-3 MB)."""


class ShotStore:
    """Screenshots and model-seen images linked into the site, each once."""

    def __init__(self, site: Path) -> None:
        self.site = site
        self.root = site / "shots"
        self._done: dict[Path, str] = {}
        self._images: dict[str, str | None] = {}

    def put(self, path: Path, name: str) -> str | None:
        path = Path(path)
        if path in self._done:
            return self._done[path]
        if not path.is_file():
            return None
        target = self.root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.unlink()
        try:
            os.link(path, target)
        except OSError:  # another file system, or links not allowed: a copy
            shutil.copy2(path, target)
        url = target.relative_to(self.site).as_posix()
        self._done[path] = url
        return url

    def image(self, folder: Path | None, name: str) -> str | None:
        if name not in self._images:
            safe = "".join(c for c in name if c.isalnum() or c in ".-_")
            self._images[name] = self.put(folder / safe, f"img/{safe}") if folder and safe == name else None
        return self._images[name]


def _app() -> str:
    return resources.files("orchard_cli.viewer").joinpath("app.html").read_text(encoding="utf-8")


def _script(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _dump(value: Any) -> str:
    # </script> and U+2028 cannot end the script early: JSON escapes for both
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str) \
        .replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _row(n: int, run: int, e: Entry, shot: str | None) -> list[Any]:
    return [n, run, e.task, e.attempt, e.category, e.model, e.tokens, round(e.seconds, 1), e.calls, e.steps,
            None if e.score is None else round(e.score, 3), e.groups or None, shot,
            (e.error or "")[:200] or None]


def _card(card: dict[str, Any] | None) -> dict[str, Any] | None:
    """The scorecard without its per-check table (one row per task and check: the list has them)."""
    if card is None:
        return None
    return {k: v for k, v in card.items() if k not in ("by_check",)}


def _episodes(source: Source, run: int, start: int, site: Path, store: ShotStore, said: list[str]) -> list[list[Any]]:
    rows = []
    images = source.images()
    folder = site / "data" / "e"
    for n, entry in enumerate(source.entries(), start):
        prefix = f"{run}/{n}"

        def shots(path: Path, prefix: str = prefix) -> str | None:
            return store.put(path, f"{prefix}/{path.name}")

        detail = episode_detail(entry, shots, lambda name: store.image(images, name))
        detail["run"] = run
        _script(folder / f"{n}.js", f"orchardEpisode({n},{_dump(detail)});\n")
        last = next((s["shot"] for s in reversed(detail["steps"]) if s.get("shot")), None)
        rows.append(_row(n, run, entry, last))
    said.append(f"{len(rows)} episode(s) from {source.path}")
    return rows


def _compare(rows: list[list[Any]]) -> list[list[Any]]:
    """Per task: A's and B's attempts ([n, category] each, by attempt), in A's order then B's."""
    tasks: dict[str, list[list[list[Any]]]] = {}
    for row in rows:
        tasks.setdefault(row[2], [[], []])[row[1]].append([row[0], row[4], row[3]])
    out = []
    for task, (a, b) in tasks.items():
        out.append([task, [x[:2] for x in sorted(a, key=lambda x: x[2])], [x[:2] for x in sorted(b, key=lambda x: x[2])]])
    return out


def build_site(source: Source, out: str | Path, *, compare: Source | None = None,
               categories: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """Write the site for `source` (and `compare`) into `out`; returns what was written."""
    started = time.monotonic()
    site = Path(out)
    data = site / "data"
    if (data / "e").is_dir():  # a site written before: its episodes go (a new run may have fewer)
        shutil.rmtree(data / "e")
    if (site / "shots").is_dir():
        shutil.rmtree(site / "shots")
    (data / "e").mkdir(parents=True, exist_ok=True)
    store = ShotStore(site)
    said: list[str] = []
    runs = [source] + ([compare] if compare is not None else [])
    rows: list[list[Any]] = []
    for number, run in enumerate(runs):
        rows += _episodes(run, number, len(rows), site, store, said)
    known: dict[str, dict[str, str]] = {}
    for run in runs:
        known.update(run.categories())
    known.update(categories or {})
    index = {
        "format": SITE_FORMAT, "columns": list(COLUMNS), "rows": rows, "categories": known,
        "runs": [{"title": r.title, "path": str(r.path), "scorecard": _card(r.scorecard())} for r in runs],
        "compare": _compare(rows) if compare is not None else None, "made_at": time.time(),
    }
    _script(data / "index.js", f"window.ORCHARD_INDEX={_dump(index)};\n")
    _script(site / "index.html", _app())
    return {"site": str(site / "index.html"), "episodes": len(rows), "runs": len(runs),
            "screenshots": len(store._done), "seconds": round(time.monotonic() - started, 2), "said": said}


__all__ = ["build_site"]
