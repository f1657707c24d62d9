"""Samples -> rows -> micro-batches -> optimizer steps, and the loss of one micro-batch.

Packing. With packing on, each epoch's shuffled samples are placed first-fit into rows of at most
`max_seq_len` tokens; a row holding several samples gives each its own position ids (restarting at
0), and transformers then builds a block-diagonal causal mask from them (no attention crosses a
sample boundary; no 2D attention mask is passed). Rows of one micro-batch are right-padded; the
padding is a sequence of its own with no loss. Without packing a row is one sample.

Loss. The sum of the token cross-entropies of every answer token of an optimizer step, divided by
the number of answer tokens in that step (so gradient accumulation and packing never change the
weight of a token). For the model families listed in `FAST_HEADS` only the answer positions go
through the LM head (its vocabulary-sized matmul is the largest single cost of a small model, and
most positions of an agent trajectory carry no loss); other families take the model's own logits.
A vision-language model's batch also holds its image inputs, which go into the model's forward pass
(its image features replace the embeddings of the image tokens, in order).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from orchard_cli.training.samples import IGNORE, Sample

# Causal LMs whose logits are exactly lm_head(decoder(x)) (no soft-capping or scaling).
FAST_HEADS = frozenset({"llama", "mistral", "qwen2", "qwen3", "phi3", "smollm3", "olmo2", "gemma", "starcoder2"})


@dataclass
class Row:
    samples: list[Sample]

    @property
    def length(self) -> int:
        return sum(len(s.input_ids) for s in self.samples)


@dataclass
class Step:
    micro_batches: list[list[Row]]
    epoch: int

    @property
    def tokens(self) -> int:
        return sum(r.length for mb in self.micro_batches for r in mb)

    @property
    def trainable(self) -> int:
        return sum(s.trainable for mb in self.micro_batches for r in mb for s in r.samples)


def pack_rows(samples: list[Sample], max_len: int, packing: bool) -> list[Row]:
    """First-fit packing in the given order (rows keep roughly that order)."""
    if not packing:
        return [Row([s]) for s in samples]
    rows: list[Row] = []
    room: list[int] = []
    for sample in samples:
        size = len(sample.input_ids)
        for i, left in enumerate(room):
            if size <= left:
                rows[i].samples.append(sample)
                room[i] -= size
                break
        else:
            rows.append(Row([sample]))
            room.append(max_len - size)
    return rows


def steps_per_epoch(n_samples: int, rows: int, batch_size: int, grad_accum: int) -> int:
    return math.ceil(rows / (batch_size * grad_accum)) if n_samples else 0


def epoch_steps(samples: list[Sample], *, epoch: int, seed: int, max_len: int, packing: bool,
                batch_size: int, grad_accum: int) -> list[Step]:
    """The optimizer steps of one epoch: a shuffle seeded by (seed, epoch), then rows, then batches."""
    order = list(samples)
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    rows = pack_rows(order, max_len, packing)
    per_step = batch_size * grad_accum
    out = []
    for start in range(0, len(rows), per_step):
        chunk = rows[start:start + per_step]
        out.append(Step([chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)], epoch))
    return out


def plan(samples: list[Sample], *, epochs: int, max_steps: int | None, seed: int, max_len: int,
         packing: bool, batch_size: int, grad_accum: int) -> list[Step]:
    """Every optimizer step of the run, in order: `epochs` passes, or as many as `max_steps` needs."""
    steps: list[Step] = []
    epoch = 0
    while samples and (len(steps) < max_steps if max_steps else epoch < epochs):
        steps += epoch_steps(samples, epoch=epoch, seed=seed, max_len=max_len, packing=packing,
                             batch_size=batch_size, grad_accum=grad_accum)
        epoch += 1
    return steps[:max_steps] if max_steps else steps


def collate(rows: list[Row], pad_id: int, device: Any) -> dict[str, Any]:
    """input_ids, position_ids and labels (B, L) for one micro-batch, plus the image inputs
    (pixel_values...) of the samples that show images."""
    import torch

    width = max(r.length for r in rows)
    ids, pos, labels = [], [], []
    for row in rows:
        r_ids: list[int] = []
        r_pos: list[int] = []
        r_lab: list[int] = []
        for s in row.samples:
            r_ids += s.input_ids
            r_pos += range(len(s.input_ids))
            r_lab += [IGNORE] + s.labels[1:]
        pad = width - len(r_ids)
        ids.append(r_ids + [pad_id] * pad)
        pos.append(r_pos + list(range(pad)))
        labels.append(r_lab + [IGNORE] * pad)
    # A sample's first token would be predicted across a sample boundary: it never carries loss.
    t = lambda x: torch.tensor(x, dtype=torch.long, device=device)  # noqa: E731
    batch = {"input_ids": t(ids), "position_ids": t(pos), "labels": t(labels)}
    shown = [s.vision for row in rows for s in row.samples if s.vision is not None]
    if shown:  # a vision-language model's images, in the order of their image tokens
        from orchard_cli.training.vision import merge_inputs

        batch.update(merge_inputs([v.tensors() for v in shown], device))
    return batch


def _causal_lm(model: Any) -> Any:
    """The transformers CausalLM inside a PEFT wrapper (or the model itself)."""
    inner = model
    for attr in ("base_model", "model"):
        candidate = getattr(inner, attr, None)
        if inner.__class__.__name__.startswith(("Peft", "Lora")) and candidate is not None:
            inner = candidate
    return inner


def fast_head(model: Any) -> bool:
    lm = _causal_lm(model)
    return getattr(lm.config, "model_type", "") in FAST_HEADS and hasattr(lm, "get_decoder") \
        and lm.get_output_embeddings() is not None


def answer_logits(model: Any, batch: dict[str, Any], fast: bool) -> tuple[Any, Any]:
    """(logits, targets) of the labelled tokens of one micro-batch, flat, in row-major order: with
    `fast`, only those positions go through the LM head. The SFT loss and the RL learner read it."""
    labels = batch["labels"][:, 1:]
    keep = labels != IGNORE
    targets = labels[keep]
    images = {k: v for k, v in batch.items() if k not in ("input_ids", "position_ids", "labels")}
    if fast and not images:
        lm = _causal_lm(model)
        hidden = lm.get_decoder()(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                                  use_cache=False).last_hidden_state
        return lm.get_output_embeddings()(hidden[:, :-1][keep]), targets
    out = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False, **images)
    return out.logits[:, :-1][keep], targets


def loss_sum(model: Any, batch: dict[str, Any], fast: bool) -> Any:
    """Sum of the cross-entropies of the answer tokens of one micro-batch (a 0-d tensor)."""
    import torch.nn.functional as F

    logits, targets = answer_logits(model, batch, fast)
    return F.cross_entropy(logits.float(), targets, reduction="sum")
