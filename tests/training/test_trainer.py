"""The training loop on SmolLM2 (CPU, fp32, short sequences, few steps)."""

from __future__ import annotations

import pytest

from orchard_cli.training.batches import Row, collate, fast_head, loss_sum, plan
from orchard_cli.training.config import TrainConfig
from orchard_cli.training.turns import episode_of
from orchard_cli.training.samples import build_samples
from orchard_cli.training.synthetic import synthetic_trajectory

pytestmark = pytest.mark.model


def _loss(model, rows, fast=True):
    import torch

    with torch.no_grad():
        return float(loss_sum(model, collate(rows, 0, "cpu"), fast))


def test_merged_builder_gives_the_per_call_loss_on_fewer_tokens(fresh_model):
    episodes = [episode_of(synthetic_trajectory(21, calls=3))]
    per_call, a = build_samples(episodes, fresh_model.tokenizer, builder="per-call")
    merged, b = build_samples(episodes, fresh_model.tokenizer, builder="merged")
    assert (a.samples, b.samples) == (3, 1)
    assert a.trainable_tokens == b.trainable_tokens > 0
    assert b.tokens < a.tokens  # the shared prefixes are processed once
    model = fresh_model.model.eval()
    per_call_loss = sum(_loss(model, [Row([s])]) for s in per_call)
    merged_loss = _loss(model, [Row(merged)])
    assert merged_loss == pytest.approx(per_call_loss, rel=1e-4)
    # the fast head (answer positions only) and the model's own logits agree
    assert _loss(model, [Row(merged)], fast=False) == pytest.approx(merged_loss, rel=1e-4)
    assert fast_head(model)


def test_packed_rows_keep_samples_apart(fresh_model):
    episodes = [episode_of(synthetic_trajectory(22, calls=2))]
    samples, _ = build_samples(episodes, fresh_model.tokenizer, builder="per-call")
    model = fresh_model.model.eval()
    apart = _loss(model, [Row([samples[0]])]) + _loss(model, [Row([samples[1]])])
    assert _loss(model, [Row(samples)]) == pytest.approx(apart, rel=1e-4)  # one row, two sequences
    assert _loss(model, [Row([samples[0]]), Row([samples[1]])]) == pytest.approx(apart, rel=1e-4)  # padded batch


def test_loss_falls_on_the_same_batch(fresh_model, tmp_path):
    from orchard_cli.training.trainer import Trainer

    episodes = [episode_of(synthetic_trajectory(23, calls=2))]
    samples, _ = build_samples(episodes, fresh_model.tokenizer, builder="merged")
    config = TrainConfig(trajectories=[], base_model="x", out=str(tmp_path), lr=1e-4, warmup_ratio=0.0,
                         max_steps=4, precision="fp32", threads=1)
    steps = plan(samples, epochs=1, max_steps=4, seed=0, max_len=2048, packing=True, batch_size=1, grad_accum=1)
    assert len(steps) == 4 and all(s.trainable == samples[0].trainable for s in steps)
    trainer = Trainer(fresh_model.model, config, steps, tmp_path, pad_id=0)
    before = trainer.evaluate(samples)
    logs = trainer.train()
    after = trainer.evaluate(samples)
    assert [log.step for log in logs] == [1, 2, 3, 4]
    assert logs[0].loss == pytest.approx(before, rel=1e-3)  # step 1 reports the loss before its update
    assert after < before and logs[-1].loss < logs[0].loss
