"""Evidence: what an episode left behind for its grader, typed and stored with the episode.

A family's `collect(task, sandbox, solution, baseline)` reads it from the episode's own sandbox
before that sandbox is destroyed (or a solver hands it over directly: a predictions file's patch).
`grade(task, evidence, sandbox)` reads only this (plus, for families that grade in place, the
still-live sandbox), so a run can be graded again later without the agent (`orchard eval
regrade RUN`) and a judge can be added afterwards.

The fields cover the three kinds of work: a patch (software engineering), a final answer (every
family), files and command outputs read after the episode, service-state snapshots (mail,
calendar), and the log of tool calls the agent dispatched. A family uses the ones it needs.

Stored as `evidence.json` in the episode's log folder, and inside each trajectory record.
This module is a leaf of the core.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

EVIDENCE_SCHEMA_VERSION = 1
EVIDENCE_FILE = "evidence.json"
SCREENSHOT = "last-screenshot.png"
"""The attachment a web episode leaves: the page as the episode ended (`Evidence.attachments`)."""
STEP_SHOT = "step-{:03d}.png"
"""The page after action N (0: the start page), what a vision judge reads (`orchard judge`)."""


class CommandOutput(BaseModel):
    """A command run in the sandbox after the episode, and what it printed."""

    model_config = ConfigDict(extra="forbid")

    command: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""


class Dispatch(BaseModel):
    """One tool call the agent made through orchard's tool surface, in order."""

    model_config = ConfigDict(extra="forbid")

    seq: int = 0
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    status: int | None = None
    """The service's answer status (HTTP status for tools served over HTTP)."""
    result: Any = None
    at: float = 0.0


class Evidence(BaseModel):
    """What a grader reads. Every field is optional; empty evidence is a null attempt."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = EVIDENCE_SCHEMA_VERSION
    patch: str | None = None
    """A unified diff of the workspace against its state after setup (SWE)."""
    answer: str | None = None
    """The agent's final answer: its last message, or what it passed to an answer tool."""
    files: dict[str, str] = Field(default_factory=dict)
    """Workspace files read after the episode: path -> text."""
    commands: list[CommandOutput] = Field(default_factory=list)
    state: dict[str, Any] = Field(default_factory=dict)
    """Service-state snapshots by service name (a mailbox, a calendar), as JSON."""
    dispatches: list[Dispatch] = Field(default_factory=list)
    state_before: dict[str, Any] = Field(default_factory=dict)
    """`state` as it was when the solver started (the task's fixture as the services hold it):
    what `orchard view` diffs `state` against."""
    logs: dict[str, str] = Field(default_factory=dict)
    """Protocol logs by service (what clients did over IMAP, SMTP, CalDAV), for a person to read."""
    attachments: dict[str, bytes] = Field(default_factory=dict, exclude=True)
    """Binary files the episode left for a person (a web episode's last screenshot), by file name:
    written beside evidence.json in the episode's log folder, never inside it."""

    def is_empty(self) -> bool:
        """Nothing was produced: no patch, answer, files, commands, state or tool calls."""
        return not ((self.patch or "").strip() or (self.answer or "").strip() or self.files
                    or self.commands or self.state or self.dispatches)
