"""`--format atif`: each episode as an ATIF trajectory (Harbor's Agent Trajectory Interchange
Format, `orchard_cli.atif`, version ATIF-v1.4), one JSON file per episode, `<episode_id>.json`, for
Harbor-based tools to read.

Each file holds the episode's conversation as steps (system, user, agent), the agent's tool calls
and their observations, per agent step the call's token counts and, where the recording proxy
kept them, its token ids and log-probabilities; `extra.orchard` holds the task, the verdict and
the reward (ATIF has no field of its own for them), and `final_metrics` the totals. `index.jsonl`
lists the files with their verdicts. Episodes without a conversation (`--predictions` runs) are
skipped and counted.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchard_cli.export import ExportOptions, ExportResult


def export_atif(path: str | Path, out: str | Path, options: ExportOptions) -> ExportResult:
    from orchard_cli.atif import ATIF_VERSION, from_episode
    from orchard_cli.export.samples import check_out
    from orchard_cli.records import ReadReport, write_text
    from orchard_cli.trajectory import read_trajectories

    out = Path(out)
    check_out(out)
    report = ReadReport(path=str(path))
    records = read_trajectories(path, report=report)
    keep = options.keep or "all"
    out.mkdir(parents=True, exist_ok=True)
    files, index, status, skipped = [], [], {}, 0
    for record in records:
        if (keep == "resolved" and not record.outcome.resolved) or not record.messages:
            skipped += 1
            continue
        trajectory = from_episode(
            session_id=record.episode_id, agent=record.harness, agent_version=record.harness_version,
            model=record.model, messages=record.messages, tools=record.tools, calls=record.calls,
            started_at=record.started_at,
            extra={"orchard": {"suite": record.suite, "task_id": record.task_id, "family": record.family,
                               "attempt": record.attempt, "resolved": record.outcome.resolved,
                               "category": record.outcome.category, "reward": record.outcome.reward,
                               "rewards": (record.evidence.state.get("rewards") if record.evidence else None),
                               "trajectory_schema_version": record.schema_version}})
        if record.cost_usd is not None and trajectory.final_metrics is not None:
            trajectory.final_metrics.total_cost_usd = record.cost_usd
        name = f"{record.episode_id}.json"
        write_text(out / name, json.dumps(trajectory.dump(), indent=1) + "\n")
        files.append(name)
        index.append({"file": name, "schema_version": ATIF_VERSION, "task_id": record.task_id,
                      "resolved": record.outcome.resolved, "reward": record.outcome.reward})
        key = "resolved" if record.outcome.resolved else record.outcome.category
        status[key] = status.get(key, 0) + 1
    write_text(out / "index.jsonl", "".join(json.dumps(row) + "\n" for row in index))
    return ExportResult(format="atif", out=str(out), files=[*files, "index.jsonl"], rows=len(files),
                        by_status=status, skipped=skipped, unreadable=report.bad_lines, torn_tail=report.torn_tail)
