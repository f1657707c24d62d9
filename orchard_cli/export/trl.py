"""`--format trl`: what TRL's `SFTTrainer` (and `trl sft`) reads, with orchard's own mask.

One row per orchard training sample (`orchard train`'s builder, per-call by default, `--builder
merged` for one row per run of consecutive turns), tokenized for `--model` exactly as
`orchard train` tokenizes it: the model's chat template with orchard's tool-call format where the
template renders no tools, recorded token ids where they are the model's own (`--token-ids`).

Columns:
- `input_ids`: the sample's tokens;
- `assistant_masks`: 1 on the tokens orchard trains on (the assistant's answers, their end-of-turn
  token included), 0 elsewhere. TRL takes a dataset holding `input_ids` as pre-tokenized and builds
  its labels from this mask (`assistant_masks` always applies), so TRL trains on exactly orchard's
  tokens. This is the mask column, not TRL's `assistant_only_loss=True`, which needs generation
  markers in the chat template (SmolLM2's has none);
- `messages` (OpenAI chat, as in `--format hf`) and `tools` (JSON): the conversation the sample was
  made from (its last turn's prompt and answer), for reading and for re-tokenizing with another
  template (then the mask is TRL's to make);
- `metadata`: JSON (episode, verdict, task, teacher, turns, trained tokens).

The folder: train/data-*.parquet, README.md (the dataset card `datasets.load_dataset(DIR)` reads).
"""

from __future__ import annotations

import json
from pathlib import Path

from orchard_cli.export import ExportOptions, ExportResult
from orchard_cli.export.samples import build, by_status, card, check_out, conversation, metadata

IGNORE = -100


def export_trl(path: str | Path, out: str | Path, options: ExportOptions) -> ExportResult:
    from orchard_cli.export.hf import chat_messages, message_type, pyarrow, write_shards

    pa, _ = pyarrow()
    out = Path(out)
    check_out(out)
    built = build(path, options, "per-call")
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("assistant_masks", pa.list_(pa.int8())),
                        ("messages", pa.list_(message_type(pa))), ("tools", pa.string()), ("metadata", pa.string())])
    rows = []
    for sample in built.samples:
        messages, tools = conversation(sample, rendered=False)
        # a sample's first token is never trained (nothing before it predicts it), as in orchard train
        mask = [0] + [int(label != IGNORE) for label in sample.labels[1:]]
        rows.append({"input_ids": sample.input_ids, "assistant_masks": mask, "messages": chat_messages(messages),
                     "tools": json.dumps(tools, ensure_ascii=False), "metadata": metadata(built, sample)})
    files = write_shards(rows, schema, out / "train")
    stats = built.stats
    (out / "README.md").write_text(card(
        "Trajectories distilled with orchard, as TRL SFT samples",
        f"Pre-tokenized for `{options.base_model}` ({stats.format} rendering, builder {stats.builder}, max length "
        f"{stats.max_seq_len}): `input_ids` and `assistant_masks` (1 on the {stats.trainable_tokens} trained tokens "
        f"of {stats.tokens}). `trl sft --dataset_name DIR ...` trains on exactly those tokens."), encoding="utf-8")
    return ExportResult(format="trl", out=str(out), files=files, rows=len(rows), by_status=by_status(built),
                        skipped=built.report.episodes_read - len(built.episodes), samples=stats.model_dump())
