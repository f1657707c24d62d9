"""`--format verl-sft`: verl's multi-turn SFT Parquet (`MultiTurnSFTDataset`, read with
`data.multiturn.enable=true data.multiturn.messages_key=messages`).

One row per orchard training sample (`--builder merged` by default: a run of consecutive turns of
an episode; per-call gives one row per model call), its `messages` the sample's conversation (its
last turn's prompt and answer) as plain {role, content} strings, with tool calls and tool results
in orchard's tool-call format and the tools described in the system message (what `orchard
serve` shows a model; `models.toolcall`). verl renders each row with the model's chat template
and trains every assistant message of it. No `tools` column: Parquet cannot hold every tool's
JSON schema as the dict verl hands to the template.

What verl does not keep of orchard's training (docs/training.md): the recorded token ids (verl
re-tokenizes), the end of an assistant turn as orchard cuts it (verl's mask covers what the
template writes after the end-of-turn token), and a row whose history holds an assistant message
an earlier row already trained (a merge break) trains it again.
"""

from __future__ import annotations

from pathlib import Path

from orchard_cli.export import ExportOptions, ExportResult
from orchard_cli.export.samples import build, by_status, card, check_out, conversation, metadata



def export_verl_sft(path: str | Path, out: str | Path, options: ExportOptions) -> ExportResult:
    from orchard_cli.export.hf import pyarrow, write_shards

    pa, _ = pyarrow()
    out = Path(out)
    check_out(out)
    built = build(path, options, "merged")
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema([("messages", pa.list_(message)), ("metadata", pa.string())])
    rows = []
    for sample in built.samples:
        messages, _ = conversation(sample, rendered=True)
        rows.append({"messages": [{"role": m["role"], "content": m["content"]} for m in messages],
                     "metadata": metadata(built, sample)})
    files = write_shards(rows, schema, out / "train")
    (out / "README.md").write_text(card(
        "Trajectories distilled with orchard, as verl multi-turn SFT rows",
        "`messages` per row (orchard's tool-call format). Train with verl's SFT trainer: "
        "`data.train_files=DIR/train/data-00000-of-00001.parquet data.multiturn.enable=true "
        "data.multiturn.messages_key=messages` (docs/training.md)."), encoding="utf-8")
    return ExportResult(format="verl-sft", out=str(out), files=files, rows=len(rows), by_status=by_status(built),
                        skipped=built.report.episodes_read - len(built.episodes), samples=built.stats.model_dump())
