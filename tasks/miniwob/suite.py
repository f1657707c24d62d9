"""The MiniWoB++ suite: the ~130 single-page tasks of the `miniwob` package (1.1.0, MIT), run on a
Playwright async `Page` that orchard drives. No selenium, gymnasium or browsergym is needed: the
package is only a folder of HTML (`pip install --no-deps miniwob==1.1.0`) and is never imported.

An episode, in the task page's own JavaScript (html/core/core.js):

    Math.seedrandom(seed)         seeds Math.random (seedrandom ships inside core.js)
    core.EPISODE_MAX_TIME = ms    after this long the task ends itself: reward -1, 'timed out'
    core.startEpisodeReal()       runs the task's genProblem() and starts that timer
    WOB_TASK_READY                true once the task can be acted on
    core.getUtterance()           the instruction (#query's text); the *-nl-turk and
                                  email-inbox-forward-nl tasks return {utterance, fields} instead.
                                  Two tasks show part of it as a picture, which `start` puts in
                                  words as BrowserGym does: use-colorwheel-2's swatch (its hex
                                  colour) and click-menu-2's icon (its class, "ui-icon-stop")
    core.endEpisode(r, scaled, reason)   called by the task when it judges an action; it sets
        WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL (r), WOB_REWARD_GLOBAL (r, times
        1 - elapsed/EPISODE_MAX_TIME when scaled), WOB_REWARD_REASON; only its first call counts.

Rewards lie in [-1, 1]; a few tasks give partial credit (click-checkboxes-soft, the drawing tasks).
`success` follows BrowserGym's reading: the episode is done and its raw reward is above 0.
"""

from __future__ import annotations

import difflib
import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

from orchard_cli.errors import MissingDependencyError, UnknownNameError, UsageError

INSTALL = "pip install --no-deps miniwob==1.1.0"
EPISODE_MAX_MS = 1_000_000
"""How long an episode may run before the task ends it (ms): BrowserGym's choice, ~17 minutes, so
that the agent's turn limit decides, not the task's own 7-30 s."""

NONDETERMINISTIC = frozenset({"click-pie", "click-pie-nodelay", "stock-market", "terminal", "visual-addition"})
"""Tasks whose page may differ between two starts with one seed: BrowserGym's four, and
stock-market, whose prices move on a timer. (Started on a fresh page each time, every other task
gave the same DOM and the same screenshot for one seed here; the `miniwob` package's longer list
is of state left over when an episode restarts without reloading, which `start` never does.)"""
REAL_TIME = frozenset({"button-delay", "chase-circle", "hover-shape", "moving-items", "simon-says"})
"""Tasks that need timed or continuous input; BrowserGym leaves them out of its 125."""

_MARKER = "__orchardMiniwob"
_HIDE_CSS = "#reward-display, #click-canvas, #sync-task-cover { display: none !important; }"

_START_JS = """({seed, maxTime, hide, marker, css}) => {
  if (typeof core === 'undefined' || typeof core.startEpisodeReal !== 'function')
    throw new Error('not a MiniWoB++ task page');
  if (hide) {
    const style = document.createElement('style');
    style.textContent = css;
    document.head.appendChild(style);
  }
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = maxTime;
  core.startEpisodeReal();
  window[marker] = {seed: seed};
}"""

_UTTERANCE_JS = """() => {
  const u = core.getUtterance();
  if (u !== null && typeof u === 'object') return {utterance: u.utterance, fields: u.fields || {}};
  const query = document.getElementById('query');
  if (!query.querySelector('.cc, .ui-icon')) return {utterance: u, fields: null};
  const hex = (rgb) => '#' + rgb.match(/\\d+/g).slice(0, 3).map(n => (+n).toString(16).padStart(2, '0')).join('');
  const words = Array.from(query.childNodes, (node) => {
    if (node.nodeType !== 1) return node.textContent;
    if (node.classList.contains('cc')) return hex(node.style.backgroundColor);
    const icon = Array.from(node.classList).find(c => c.startsWith('ui-icon-'));
    return icon ? '"' + icon + '"' : node.textContent;
  });
  return {utterance: words.join(' ').replace(/\\s+/g, ' ').trim(), fields: null};
}"""

_REWARD_JS = """(marker) => {
  if (typeof window[marker] === 'undefined' || typeof core === 'undefined') return null;
  return {done: WOB_DONE_GLOBAL, reward: WOB_REWARD_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL,
          reason: WOB_REWARD_REASON, episode_id: WOB_EPISODE_ID};
}"""


def html_root() -> Path:
    """The installed package's `html` folder (`miniwob/`, `core/`, `common/` ...)."""
    spec = importlib.util.find_spec("miniwob")  # finds the folder without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("MiniWoB++ tasks need the 'miniwob' package's HTML", hint=INSTALL)
    root = Path(list(spec.submodule_search_locations)[0]) / "html"
    if not (root / "core" / "core.js").is_file() or not (root / "miniwob").is_dir():
        raise MissingDependencyError(f"the 'miniwob' package at {root.parent} has no html/core/core.js",
                                     hint=f"reinstall it: {INSTALL} --force-reinstall")
    return root


def task_names() -> list[str]:
    """Every MiniWoB++ task in the package (html/miniwob/<name>.html), sorted. The flight.* tasks
    (html/flight/) need an HTTP server and are not among them."""
    return sorted(path.stem for path in (html_root() / "miniwob").glob("*.html"))


def task_url(name: str) -> str:
    """The task page's file:// URL. A browser that routes every request must let
    `html_root().as_uri()` through: Playwright's routes see file:// requests too."""
    names = task_names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=5)
        raise UnknownNameError(f"no MiniWoB++ task {name!r}"
                               + (f"; did you mean {', '.join(close)}?" if close else ""),
                               hint=f"{len(names)} tasks in {html_root() / 'miniwob'}")
    return (html_root() / "miniwob" / f"{name}.html").as_uri()


async def start(page: Any, name: str, seed: int, *, max_time_ms: int = EPISODE_MAX_MS,
                hide_display: bool = True) -> dict[str, Any]:
    """Load task `name` in `page`, seed it and start one episode. Returns {"name", "seed", "url",
    "utterance", "fields"}; `fields` are the instruction's key/value pairs (the package's own
    extractor, or the task's when it returns them), {} when unknown.

    `hide_display` hides what MiniWoB draws for people beside the task: the reward and timer
    panel, the click canvas, and the START cover it puts back over the task when an episode ends
    (a cover that would make every later click wait for its timeout).
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**53:
        raise UsageError(f"a MiniWoB++ seed is an integer in [0, 2**53), not {seed!r}")
    if max_time_ms <= 0:
        raise UsageError(f"max_time_ms must be positive, not {max_time_ms}")
    url = task_url(name)
    await page.goto(url, wait_until="load")
    await page.evaluate(_START_JS, {"seed": seed, "maxTime": max_time_ms, "hide": hide_display,
                                    "marker": _MARKER, "css": _HIDE_CSS})
    await page.wait_for_function("() => WOB_TASK_READY === true", timeout=10_000)
    got = await page.evaluate(_UTTERANCE_JS)
    utterance = got["utterance"]
    fields = got["fields"] if got["fields"] is not None else extract_fields(name, utterance)
    return {"name": name, "seed": seed, "url": url, "utterance": utterance,
            "fields": {str(k): str(v) for k, v in fields.items()}}


async def reward(page: Any) -> dict[str, Any]:
    """The episode's state: {"done", "reward", "raw_reward", "reason", "success", "full_credit"}.
    `success` is BrowserGym's and the literature's (raw reward > 0: partial credit counts, and so
    does find-greatest's 0.1 for a wrong card); `full_credit` asks for a raw reward of 1. A page
    that is no longer the started episode (navigated away, reloaded) reads as done with reward 0."""
    try:
        got = await page.evaluate(_REWARD_JS, _MARKER)
    except Exception as exc:  # the page is navigating or closed
        got, why = None, f"the task page could not be read: {str(exc).splitlines()[0]}"
    else:
        why = "the browser left the task page (or reloaded it)"
    if got is None:
        return {"done": True, "reward": 0.0, "raw_reward": 0.0, "reason": why, "success": False,
                "full_credit": False}
    done = bool(got["done"])
    raw = float(got["raw_reward"] or 0.0)
    reason = got["reason"]
    return {"done": done, "reward": float(got["reward"] or 0.0), "raw_reward": raw,
            "reason": None if reason is None else str(reason), "success": done and raw > 0,
            "full_credit": done and raw >= 1.0}


def extract_fields(name: str, utterance: str) -> dict[str, str]:
    """The instruction's fields by the package's own per-task extractor (miniwob/fields.py, which
    needs only the standard library); {} when it has none or the utterance does not parse."""
    extractors = _package_extractors()
    if name not in extractors:
        return {}
    try:
        return {str(k): str(v) for k, v in extractors[name](utterance)}
    except (ValueError, KeyError, AttributeError, IndexError):
        return {}


@cache
def _package_extractors() -> dict[str, Any]:
    source = html_root().parent / "fields.py"
    spec = importlib.util.spec_from_file_location("_orchard_miniwob_fields", source)
    if spec is None or spec.loader is None or not source.is_file():
        return {}
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:  # a different package version; fields are a convenience only
        return {}
    return dict(getattr(module, "FIELD_EXTRACTORS", {}))
