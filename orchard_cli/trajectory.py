"""The trajectory record: one agent episode on one task, as `orchard distill` and `orchard eval`
write it (one JSON object per line, append-only; see `orchard_cli.records`).

An episode's identity is (suite, task_id, harness, model, attempt): `episode_key` hashes it, so
resuming skips finished episodes across teachers. `calls` are the recording proxy's records, as
the harness's own model traffic went by; `messages` / `tools` are the normalised conversation (OpenAI
chat messages with `tool_calls`, tool schemas in chat form) that training reads. Runs of
`orchard eval --predictions` write the same record with no calls (`source: "predictions"`), so
graded patches are experience too.

`read_trajectories` is the one reader: the latest line of each episode id wins (an episode run
again by `--resume` replaces its earlier line), torn tails are skipped.

Schema 2 adds `evidence` (what the grader read) and lets `outcome.category` be any category a
family declares; schema 1 records read as before (no evidence).

This module is a leaf of the core: it never imports tasks or harnesses.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.proxy.calls import CallRecord
from orchard_cli.records import ReadReport, iter_jsonl

SCHEMA_VERSION = 2


def episode_key(suite: str, task_id: str, harness: str, model: str, attempt: int) -> str:
    """Stable id of an episode: the same task, harness, model and attempt give the same id."""
    raw = "\x1f".join([suite, task_id, harness, model, str(attempt)])
    return "ep-" + hashlib.sha256(raw.encode()).hexdigest()[:16]


class TrajectoryOutcome(BaseModel):
    """The grader's verdict on the episode's final patch."""

    model_config = ConfigDict(extra="forbid")

    resolved: bool
    category: str
    """A core category (orchard_cli.outcome) or one the task's family declares."""
    reward: float = 0.0
    details: dict[str, Any] = Field(default_factory=dict)
    """Grader details: test counts, FAIL_TO_PASS / PASS_TO_PASS results, the error if any."""


class Trajectory(BaseModel):
    """One episode. Documented field by field; `schema_version` changes with any breaking edit.
    Images in `calls` and `messages` are files beside the trajectories file: see CallRecord."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1, 2] = SCHEMA_VERSION
    episode_id: str
    """`episode_key(suite, task_id, harness, model, attempt)`."""
    task_id: str
    suite: str
    family: str = "swe"
    source: Literal["agent", "predictions"] = "agent"
    """'agent' when a harness ran a model; 'predictions' for graded patches from `eval`."""
    harness: str
    """Harness name (bash, codex, openclaw, zeroclaw), or 'predictions' / 'gold' / 'empty'."""
    harness_version: str | None = None
    model: str
    """The model (teacher) name as sent to the endpoint; never a key or an authenticated URL."""
    attempt: int = 0
    problem_statement: str = ""
    calls: list[CallRecord] = Field(default_factory=list)
    """Every model call the harness made, as the recording proxy saw it, in order."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """The normalised conversation: OpenAI chat messages (system, user, assistant with
    `tool_calls`, tool) of the episode's last call plus the final answer."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """Tool schemas in OpenAI chat form ({"type": "function", "function": {...}})."""
    outcome: TrajectoryOutcome
    patch: str = ""
    """The final diff of the workspace, as graded (families graded on a patch)."""
    evidence: Evidence | None = None
    """Everything the grader read (schema 2); `orchard eval regrade` and judges read it again."""
    started_at: float = Field(default_factory=time.time)
    duration_seconds: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    """None when the model's price is unknown (never 0 for unknown)."""
    harness_exit_code: int | None = None
    errors: list[str] = Field(default_factory=list)
    """What went wrong along the way (harness crash, capped episode, upstream failures)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form: repo, dataset sha256, orchard version, seed."""


def read_trajectories(path: str | Path, *, report: ReadReport | None = None,
                      strict: bool = False) -> list[Trajectory]:
    """The trajectories of a file, the latest line of each episode, in the order of those lines.
    A torn tail is skipped (and noted in `report`); a record that is not a trajectory is a
    one-line UsageError, and with `strict` so is a line that is not a JSON record."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"trajectory file {path} does not exist", hint="write one with `orchard distill --out FILE`")
    report = report if report is not None else ReadReport(path=str(path))
    if path.suffix == ".json":
        return [read_atif(path)]
    latest: dict[str, Trajectory] = {}
    for number, row in enumerate(iter_jsonl(path, report), 1):
        try:
            record = Trajectory.model_validate(row)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "record"
            raise UsageError(f"{path}: record {number} is not a trajectory ({exc.error_count()} problem(s), "
                             f"first: {where}: {first['msg']})",
                             hint="pass files written by `orchard distill` or `orchard eval`") from None
        latest.pop(record.episode_id, None)
        latest[record.episode_id] = record
    if strict and report.bad_lines:
        raise UsageError(f"{path}: line {report.bad_lines[0]} is not a JSON record with a schema_version",
                         hint="pass files written by `orchard distill` or `orchard eval`")
    return list(latest.values())


MAX_ATIF_BYTES = 256 << 20


def read_atif(path: Path) -> Trajectory:
    """An ATIF trajectory file (Harbor's, or `orchard distill export --format atif`) as one
    trajectory record: its steps as chat messages. The verdict is what orchard wrote in
    `extra.orchard`; a file without one (a Harbor run's) is `unscored`, not resolved, so
    `orchard train` takes it only with --include-unresolved."""
    import json

    from orchard_cli.atif import READABLE, Trajectory as Atif, is_atif, to_messages

    try:
        if path.stat().st_size > MAX_ATIF_BYTES:
            raise UsageError(f"{path}: over {MAX_ATIF_BYTES >> 20} MiB, more than an ATIF trajectory holds")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: not a JSON file ({exc})") from None
    if not is_atif(data):
        raise UsageError(f"{path}: not an ATIF trajectory (no schema_version ATIF-v1.x)",
                         hint="pass a trajectories .jsonl file, or an ATIF trajectory.json")
    version = str(data.get("schema_version"))
    if version not in READABLE:
        newer = " (it adds embedded subagent trajectories and trajectory ids)" if version == "ATIF-v1.7" else ""
        raise UsageError(f"{path}: {version}{newer} is not a version orchard reads "
                         f"({READABLE[0]} to {READABLE[-1]})")
    try:
        atif = Atif.model_validate(data)
        messages = to_messages(atif)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"{path}: not a valid ATIF trajectory: {'.'.join(str(p) for p in first['loc'])}: "
                         f"{first['msg']}") from None
    except ValueError as exc:  # after ValidationError, which is one
        raise UsageError(f"{path}: not read: {exc}") from None
    mine = (atif.extra or {}).get("orchard") or {}
    try:
        if not isinstance(mine, dict):
            raise ValueError("extra.orchard is not an object")
        resolved = bool(mine.get("resolved", False))
        reward, attempt = float(mine.get("reward") or 0.0), int(mine.get("attempt") or 0)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{path}: not a valid ATIF trajectory: extra.orchard: {exc}") from None
    outcome = TrajectoryOutcome(resolved=resolved, category=str(mine.get("category") or ("resolved" if resolved else "unscored")),
                                reward=reward, details={"atif_schema_version": atif.schema_version})
    metrics = atif.final_metrics
    return Trajectory(episode_id=atif.session_id, task_id=str(mine.get("task_id") or atif.session_id),
                      suite=str(mine.get("suite") or "atif"), family=str(mine.get("family") or "atif"),
                      harness=atif.agent.name, harness_version=atif.agent.version,
                      model=atif.agent.model_name or "unknown", attempt=attempt,
                      messages=messages, tools=atif.agent.tool_definitions or [], outcome=outcome,
                      tokens_in=(metrics.total_prompt_tokens or 0) if metrics else 0,
                      tokens_out=(metrics.total_completion_tokens or 0) if metrics else 0,
                      metadata={"source": "atif", "file": str(path)})


def check_trajectory_file(path: str | Path) -> None:
    """A one-line UsageError unless `path` holds trajectories (a torn final line, the mark of a
    writer killed mid-record, is fine): what `--resume` appends to."""
    path = Path(path)
    report = ReadReport(path=str(path))
    try:
        found = read_trajectories(path, report=report, strict=True)
    except UsageError as exc:
        raise UsageError(f"--resume: {exc.message}", hint="name the trajectories file of the run to continue") from None
    if not found:
        with path.open("rb") as fh:
            start = fh.read(16)
        if not start.startswith(b'{"schema_version"'):
            raise UsageError(f"--resume: {path} holds no trajectories (it is not a file orchard wrote)",
                             hint="name the trajectories file of the run to continue, or choose another --out")
