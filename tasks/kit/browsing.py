"""What the browser families (web, miniwob, live-web) share on top of `LeasedEpisode`: the
episode's `BrowserSession` (a fresh context of a leased, jailed Chromium), the web action space as
its tools, and the browser's part of the evidence (the tools closed, the answer tool's answer,
the dispatches, the screenshots).
"""

from __future__ import annotations

from typing import Any

from orchard_cli.evidence import SCREENSHOT, STEP_SHOT, Evidence
from orchard_cli.family import Requirements
from orchard_cli.tasks.kit.leases import LeasedEpisode

BROWSER = ("bubblewrap", "chromium", "playwright")
"""What a browser episode needs on this machine (orchard_cli.prereqs)."""


class BrowsingEpisode(LeasedEpisode):
    """An episode browsing in a leased browser (its set: `owned.browser`)."""

    requires = Requirements(host=list(BROWSER))
    tool_label = "a browser action"
    browser: Any = None
    """The episode's BrowserSession, once setup opened it."""

    def browse(self, session: Any) -> Any:
        """`session` becomes the episode's browser, in place of an earlier one (closed)."""
        with self._lock:
            if self.browser is not None:
                self.browser.close()
            self.browser = session
        return session

    def tools(self) -> Any:
        from orchard_cli.tasks.kit.browser_actions import tool_specs
        from orchard_cli.tools import ToolSession

        if self.owned is None:
            return None
        return self.session_for(lambda: ToolSession(tool_specs(), self.browser))

    def failure(self) -> str | None:
        """The leased set died, a tool call found it gone, or the page crashed."""
        return super().failure() or (self.browser.crashed if self.browser is not None else None)

    def browser_evidence(self, evidence: Evidence, before_shots: Any = None) -> Any:
        """No action lands after this; the answer tool's answer (over the harness's last message),
        the last page and the page after each step (where kept) go in `evidence`.
        `before_shots(session)` runs first, before the screenshot's time passes (MiniWoB reads its
        reward while its episode timer still runs). Returns the browser session (None if setup
        never made one)."""
        self.end_tools()  # collect ended them already (LeasedEpisode.collect, with the dispatches)
        session = self.browser
        if session is None:
            return None
        if session.answer is not None:
            evidence.answer = session.answer
        if before_shots is not None:
            before_shots(session)
        shot = session.screenshot()
        if shot:
            evidence.attachments[SCREENSHOT] = shot
        for step, png in session.shots:
            evidence.attachments[STEP_SHOT.format(step)] = png
        return session

    def __exit__(self, *exc: object) -> None:
        self.end_tools()  # no call still running lands on a closed browser
        with self._lock:
            browser, self.browser = self.browser, None
        if browser is not None:
            browser.close()
        super().__exit__(*exc)


def prompt_text(instruction: str, sites: dict[str, str]) -> str:
    """A browser task as the agent gets it: the instruction, how the tools work, the sites."""
    lines = [instruction.strip(), "", "You use a web browser through your tools (click, fill, select_option, "
             "press, scroll, goto, go_back, tabs...); each returns the page as an accessibility tree whose "
             "elements have ids (`[ref=e12]`: pass `e12` as `bid`). Call `observe` first to see the page."]
    if sites:
        lines.append("The sites you may use: " + ", ".join(f"{name} ({url})" for name, url in sites.items())
                     + "; `goto` also takes `site:/path`.")
    lines.append("When you are done, call `answer` with your final answer for the user (a short text; "
                 "'done' when nothing was asked).")
    return "\n".join(lines)
