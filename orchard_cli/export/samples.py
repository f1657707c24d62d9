"""The training formats' rows: orchard train's own samples (the same episodes, filters, builder,
rendering and length policy), each with the conversation it was made from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchard_cli.errors import UsageError
from orchard_cli.export import ExportOptions


@dataclass
class Built:
    """The samples of a trajectories file for one tokenizer, and how they were made."""

    samples: list[Any]
    stats: Any
    report: Any
    encoder: Any
    episodes: dict[str, Any]
    """Episode id -> its episode (trajectory and turns)."""


def check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} is not empty", hint="export into a new folder")


def build(path: str | Path, options: ExportOptions, default_builder: str) -> Built:
    """orchard train's samples of `path` for `options.base_model` (resolved episodes unless
    `keep` is all)."""
    from orchard_cli.training.turns import EpisodeFilter, load_episodes
    from orchard_cli.training.model_loading import load_tokenizer
    from orchard_cli.training.samples import Encoder, build_samples

    if not options.base_model:
        raise UsageError("this format is tokenized for one model: name it with --model",
                         hint="e.g. --model smollm2, or the checkpoint folder the trainer starts from")
    episodes, report = load_episodes([path], EpisodeFilter(only_resolved=(options.keep or "resolved") == "resolved"))
    if not episodes:
        hint = "pass --keep all to export unresolved episodes too" if report.filtered.get("not_resolved") else None
        raise UsageError(f"no episode to export from {path} ({report.episodes_read} read)", hint=hint)
    encoder = Encoder.for_tokenizer(load_tokenizer(options.base_model))
    samples, stats = build_samples(episodes, encoder, builder=options.builder or default_builder,  # type: ignore[arg-type]
                                   max_seq_len=options.max_seq_len, token_ids=options.token_ids)
    if not samples:
        raise UsageError(f"the {len(episodes)} episode(s) gave no sample (template mismatches: "
                         f"{stats.template_mismatch}, too long: {stats.dropped_too_long})", hint="raise --max-seq-len")
    return Built(samples, stats, report, encoder, {e.trajectory.episode_id: e for e in episodes})


def conversation(sample: Any, rendered: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools) of a sample: its last turn's prompt and answer. `rendered`: as plain
    {role, content} messages in orchard's tool-call format (tools described in the system
    message), what a template without tools shows the model."""
    turn = sample.last_turn
    messages = list(turn.prompt) + [turn.answer]
    if not rendered:
        return messages, list(turn.tools or [])
    from orchard_cli.models.toolcall import render_messages

    return render_messages(messages, turn.tools, turn.tool_choice), []


def metadata(built: Built, sample: Any) -> str:
    t = built.episodes[sample.episode_id].trajectory
    return json.dumps({"episode_id": t.episode_id, "verify_status": t.outcome.category, "resolved": t.outcome.resolved,
                       "instance_id": t.task_id, "suite": t.suite, "family": t.family, "harness": t.harness,
                       "model": t.model, "turns": sample.turns, "trained_tokens": sample.trainable},
                      ensure_ascii=False)


def by_status(built: Built) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in built.episodes.values():
        counts[e.trajectory.outcome.category] = counts.get(e.trajectory.outcome.category, 0) + 1
    return dict(sorted(counts.items()))


def card(title: str, body: str) -> str:
    """A dataset card whose `configs` make `datasets.load_dataset(DIR)` read train/*.parquet."""
    return "\n".join(["---", "configs:", "- config_name: default", "  data_files:", "  - split: train",
                      '    path: "train/*.parquet"', "---", "", f"# {title}", "", body, ""])
