"""`orchard distill export FILE --format hf --out DIR`: trajectories as a Hugging Face dataset in
the layout of the published Orchard data (config per task family, `<family>/train/*.parquet`):

- `tools`: the tool schemas, a JSON string;
- `messages`: a list of {role, content, tool_call_id, tool_calls: [{id, type, function: {name,
  arguments}}]} (OpenAI chat; content is a string);
- `metadata`: a JSON string with `verify_status` (the verdict category: resolved, unresolved,
  empty_patch, ...), the task, teacher, harness, tokens, cost and the final patch.

A README.md with the dataset card's `configs` and features goes beside it, so `datasets` loads
the folder as it loads the published one. pandas/pyarrow come with the `swe` extra and are
imported only here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from orchard_cli.errors import MissingDependencyError, UsageError
from orchard_cli.export import ExportOptions, ExportResult
from orchard_cli.trajectory import Trajectory

ROWS_PER_FILE = 10_000
INSTALL = "pip install 'orchard-cli[swe]'"


def pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError as exc:
        raise MissingDependencyError("exporting a dataset needs pyarrow, which is not installed",
                                     hint=INSTALL) from exc
    return pa, pq


def write_shards(items: list[Any], schema: Any, folder: Path, make: Callable[[Any], dict[str, Any]] = lambda r: r
                 ) -> list[str]:
    """`items` (each made a row by `make`, one shard at a time) as `folder`/data-NNNNN-of-NNNNN.parquet
    files of at most ROWS_PER_FILE rows; returns their paths."""
    pa, pq = pyarrow()
    folder.mkdir(parents=True, exist_ok=True)
    shards = [items[i:i + ROWS_PER_FILE] for i in range(0, len(items), ROWS_PER_FILE)]
    files = []
    for n, shard in enumerate(shards):
        target = folder / f"data-{n:05d}-of-{len(shards):05d}.parquet"
        pq.write_table(pa.Table.from_pylist([make(item) for item in shard], schema=schema), target)
        files.append(str(target))
    return files


def message_type(pa: Any) -> Any:
    """An OpenAI chat message as a Parquet struct (content a string; image parts as JSON)."""
    call = pa.struct([("id", pa.string()), ("type", pa.string()),
                      ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
    return pa.struct([("role", pa.string()), ("content", pa.string()),
                      ("tool_call_id", pa.string()), ("tool_calls", pa.list_(call))])


def _schema(pa: Any) -> Any:
    return pa.schema([("tools", pa.string()), ("messages", pa.list_(message_type(pa))), ("metadata", pa.string())])


def _text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)  # image parts and the like, kept losslessly


def chat_messages(messages: list[dict[str, Any]], images: Path | None = None) -> list[dict[str, Any]]:
    """Messages in `message_type`'s shape; image references back inline as data URLs (`images`:
    the folder beside the trajectories file)."""
    from orchard_cli.images import internalize

    out = []
    for m in messages:
        if images is not None:
            m = {**m, "content": internalize(m.get("content"), images)}
        calls = [{"id": c.get("id"), "type": c.get("type", "function"),
                  "function": {"name": (c.get("function") or {}).get("name"),
                               "arguments": (c.get("function") or {}).get("arguments")}}
                 for c in m.get("tool_calls") or ()]
        out.append({"role": m.get("role"), "content": _text(m.get("content")),
                    "tool_call_id": m.get("tool_call_id"), "tool_calls": calls or None})
    return out


def row(t: Trajectory, images: Path | None = None) -> dict[str, Any]:
    """One trajectory as one dataset row; its images (files in `images`, beside the trajectories
    file) back inline as data URLs: a dataset has no folder beside it."""
    messages = chat_messages(t.messages, images)
    metadata = {
        "verify_status": t.outcome.category, "resolved": t.outcome.resolved, "reward": t.outcome.reward,
        "instance_id": t.task_id, "suite": t.suite, "family": t.family,
        "repo": t.metadata.get("repo"), "harness": t.harness, "harness_version": t.harness_version,
        "model": t.model, "attempt": t.attempt, "episode_id": t.episode_id, "source": t.source,
        "num_calls": len(t.calls), "tokens_in": t.tokens_in, "tokens_out": t.tokens_out,
        "cost_usd": t.cost_usd, "duration_seconds": t.duration_seconds, "errors": t.errors,
        "patch": t.patch, "problem_statement": t.problem_statement,
        "orchard_version": t.metadata.get("orchard_version"),
    }
    return {"tools": json.dumps(t.tools, ensure_ascii=False), "messages": messages,
            "metadata": json.dumps(metadata, ensure_ascii=False)}


def _card(families: list[str], counts: dict[str, int]) -> str:
    lines = ["---", "configs:"]
    for family in families:
        lines += [f"- config_name: {family}", "  data_files:", "  - split: train",
                  f'    path: "{family}/train/*.parquet"']
    lines += ["dataset_info:"]
    for family in families:
        lines += [f"- config_name: {family}", "  features:", "  - name: tools", "    dtype: string",
                  "  - name: messages", "    list:", "    - name: role", "      dtype: string",
                  "    - name: content", "      dtype: string", "    - name: tool_call_id",
                  "      dtype: string", "    - name: tool_calls", "      list:", "      - name: id",
                  "        dtype: string", "      - name: type", "        dtype: string",
                  "      - name: function", "        struct:", "        - name: name",
                  "          dtype: string", "        - name: arguments", "          dtype: string",
                  "  - name: metadata", "    dtype: string", "  splits:", "  - name: train",
                  f"    num_examples: {counts[family]}"]
    lines += ["---", "", "# Trajectories distilled with orchard", "",
              "One row per agent episode: `messages` (OpenAI chat with tool calls), `tools` (JSON), and "
              "`metadata` (JSON; `verify_status` is the graded verdict of the episode's final patch).", ""]
    return "\n".join(lines)


def export_hf(path: str | Path, out: str | Path, options: ExportOptions) -> ExportResult:
    """Write the dataset folder; an existing non-empty folder is refused (nothing is overwritten)."""
    keep = options.keep or "all"
    from orchard_cli.images import images_dir
    from orchard_cli.records import ReadReport
    from orchard_cli.trajectory import read_trajectories

    pa, _ = pyarrow()  # fails early, before reading, when pyarrow is missing
    report = ReadReport(path=str(path))
    trajectories = read_trajectories(path, report=report)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} is not empty", hint="export into a new folder")
    chosen = [t for t in trajectories if keep == "all" or t.outcome.resolved]
    if not chosen:
        raise UsageError(f"no trajectories to export from {path}"
                         + (" (none resolved; try --keep all)" if trajectories else ""))
    by_family: dict[str, list[Trajectory]] = {}
    for t in chosen:
        by_family.setdefault(t.family, []).append(t)
    schema = _schema(pa)
    files: list[str] = []
    for family, items in sorted(by_family.items()):
        files += write_shards(items, schema, out / family / "train", lambda t: row(t, images_dir(path)))
    counts = {f: len(v) for f, v in by_family.items()}
    (out / "README.md").write_text(_card(sorted(by_family), counts), encoding="utf-8")
    by_status: dict[str, int] = {}
    for t in chosen:
        by_status[t.outcome.category] = by_status.get(t.outcome.category, 0) + 1
    return ExportResult(format="hf", out=str(out), files=files, rows=len(chosen), by_status=dict(sorted(by_status.items())),
                        skipped=len(trajectories) - len(chosen), unreadable=report.bad_lines,
                        torn_tail=report.torn_tail)
