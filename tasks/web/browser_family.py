"""What the browser families (web, miniwob, live-web) share on top of `LeasedFamily`: an episode's
`BrowserEpisode` kept in its `Live`, the web action space as its tools, and the first part of
`collect` (the tools closed, the answer tool's answer, the dispatches, the screenshots).
"""

from __future__ import annotations

from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.evidence import SCREENSHOT, STEP_SHOT, Evidence
from orchard_cli.tasks.base import Task
from orchard_cli.tasks.leased import Live, LeasedFamily


class BrowserFamily(LeasedFamily):
    def browse(self, live: Live, episode: Any) -> Any:
        """`episode` becomes the episode's browser, in place of an earlier one (closed)."""
        with self._lock:
            if live.episode is not None:
                live.episode.close()
            live.episode = episode
        return episode

    def tools(self, task: Task, sandbox: SandboxHandle) -> Any:
        from orchard_cli.tasks.web.actions import tool_specs
        from orchard_cli.tools import ToolSession

        live, _ = self.live(sandbox)
        return self.session_for(live, lambda: ToolSession(tool_specs(), live.episode))

    def browser_evidence(self, live: Live, evidence: Evidence, before_shots: Any = None) -> Any:
        """No action lands after this; the answer tool's answer (over the harness's last message),
        the dispatches, the last page and the page after each step (where kept) go in `evidence`.
        `before_shots(episode)` runs first, before the screenshot's time passes (MiniWoB reads its
        reward while its episode timer still runs). Returns the browser episode (None if setup never
        made one)."""
        self.end_tools(live, "a browser action")
        episode = live.episode
        if live.session is not None:
            evidence.dispatches = live.session.dispatches
        if episode is None:
            return None
        if episode.answer is not None:
            evidence.answer = episode.answer
        if before_shots is not None:
            before_shots(episode)
        shot = episode.screenshot()
        if shot:
            evidence.attachments[SCREENSHOT] = shot
        for step, png in episode.shots:
            evidence.attachments[STEP_SHOT.format(step)] = png
        return episode
