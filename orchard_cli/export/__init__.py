"""Trajectories out, in the formats the field exchanges: `orchard distill export FILE --format NAME
--out DIR`. One registry, a format name -> "module:function" imported only when chosen:

    hf        the published Orchard layout: one row per episode (tools, messages, metadata)
    trl       TRL's SFTTrainer: orchard's training samples, pre-tokenized for --model, with
              the assistant-only mask orchard trains on (`assistant_masks`), beside the
              conversational `messages` + `tools` they come from
    verl-sft  verl's multi-turn SFT Parquet: `messages` + `tools`, one row per orchard sample
    atif      Harbor's ATIF (ATIF-v1.4): one trajectory JSON per episode, steps, tool calls,
              observations, token ids and log-probabilities where recorded, the reward

Each exporter takes the trajectories file, a new folder and `ExportOptions`, and returns an
`ExportResult`. docs/training.md says which of orchard's training features each format keeps.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError

EXPORTERS = {
    "hf": "orchard_cli.export.hf:export_hf",
    "trl": "orchard_cli.export.trl:export_trl",
    "verl-sft": "orchard_cli.export.verl:export_verl_sft",
    "atif": "orchard_cli.export.atif:export_atif",
}


class ExportOptions(BaseModel):
    """What an exporter is asked to do besides the file and the folder."""

    model_config = ConfigDict(extra="forbid")

    keep: Literal["all", "resolved"] | None = None
    """Which episodes: all, or resolved only (None: the format's default: hf all, training formats
    resolved, as `orchard train`)."""
    base_model: str | None = None
    """The model the samples are tokenized for (trl, verl-sft): smollm2, a checkpoint folder or a hub id."""
    builder: Literal["per-call", "merged"] | None = None
    """orchard train's sample builder (default: trl per-call, verl-sft merged)."""
    max_seq_len: int = Field(2048, ge=16)
    token_ids: Literal["auto", "never"] = "auto"


class ExportResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    format: str = "hf"
    out: str
    files: list[str]
    rows: int
    by_status: dict[str, int]
    skipped: int
    """Trajectories left out (--keep resolved)."""
    unreadable: list[int] = []
    """1-based numbers of the file's lines that are not records (not JSON, no schema_version), left out."""
    torn_tail: bool = False
    """The file ends in a fragment without a newline (a writer died mid-record); it was left out."""
    samples: dict[str, Any] | None = None
    """The training formats: what building the samples did (orchard train's statistics)."""


def names() -> list[str]:
    return list(EXPORTERS)


def export(fmt: str, path: str | Path, out: str | Path, options: ExportOptions | None = None) -> ExportResult:
    """Write `path`'s trajectories to the new folder `out` in format `fmt`."""
    target = EXPORTERS.get(fmt)
    if target is None:
        raise UsageError(f"--format {fmt!r}: not an export format (valid: {', '.join(EXPORTERS)})")
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)(path, out, options or ExportOptions())


def export_hf(path: str | Path, out: str | Path, *, keep: Literal["all", "resolved"] = "all") -> ExportResult:
    """The `hf` format (kept for callers of the function)."""
    return export("hf", path, out, ExportOptions(keep=keep))
