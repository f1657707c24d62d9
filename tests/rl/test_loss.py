"""The clipped policy-gradient loss equals TRL's GRPO loss on the same tensors.

The expected values were computed by TRL 1.16.0's `GRPOTrainer._compute_loss` (bench/trl_grpo_reference.py
derives them again); the tensors are stored beside them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchard_cli.rl.loss import Normalizer, policy_loss
from orchard_cli.rl.samples import group_advantages

torch = pytest.importorskip("torch")
REFERENCE = json.loads((Path(__file__).parent / "data" / "grpo_reference.json").read_text())


def flat(name: str) -> "torch.Tensor":
    mask = torch.tensor(REFERENCE["mask"]).bool()
    return torch.tensor(REFERENCE[name])[mask]


def test_group_advantages_match_trl() -> None:
    assert group_advantages(REFERENCE["rewards"]) == pytest.approx(REFERENCE["advantages"], abs=1e-6)
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert group_advantages([0.5]) == [0.0]


@pytest.mark.parametrize("case", REFERENCE["results"], ids=lambda c: f"{c['loss_type']}-beta{c['beta']}")
def test_loss_and_gradient_equal_trl(case: dict) -> None:
    mask = torch.tensor(REFERENCE["mask"]).bool()
    seq = torch.arange(mask.shape[0]).unsqueeze(1).expand_as(mask)[mask]
    adv = torch.tensor(REFERENCE["advantages"]).unsqueeze(1).expand_as(mask)[mask]
    logps = flat("logps").clone().requires_grad_(True)
    norm = Normalizer(case["loss_type"], tokens=int(mask.sum()), sequences=mask.shape[0],
                      max_completion_length=REFERENCE["max_completion_length"], seq_tokens=mask.sum(-1))
    loss, stats = policy_loss(logps, flat("old_logps"), adv, seq, norm, epsilon_low=REFERENCE["epsilon"],
                              epsilon_high=REFERENCE["epsilon"], beta=case["beta"], ref_logps=flat("ref_logps"))
    assert float(loss.detach()) == pytest.approx(case["loss"], abs=1e-6)
    loss.backward()
    expected = torch.tensor(case["grad"])[mask]
    assert torch.allclose(logps.grad, expected, atol=1e-6)
    assert stats["tokens"] == int(mask.sum()) and stats["clipped"] > 0  # the batch exercises the clip


def test_micro_batches_add_up_to_the_whole_step() -> None:
    mask = torch.tensor(REFERENCE["mask"]).bool()
    seq = torch.arange(mask.shape[0]).unsqueeze(1).expand_as(mask)[mask]
    adv = torch.tensor(REFERENCE["advantages"]).unsqueeze(1).expand_as(mask)[mask]
    for loss_type in ("dapo", "grpo", "dr_grpo"):
        norm = Normalizer(loss_type, tokens=int(mask.sum()), sequences=4, max_completion_length=6,
                          seq_tokens=mask.sum(-1))
        whole, _ = policy_loss(flat("logps"), flat("old_logps"), adv, seq, norm)
        half = int((seq < 2).sum())
        parts = [policy_loss(flat("logps")[s], flat("old_logps")[s], adv[s], seq[s], norm)[0]
                 for s in (slice(0, half), slice(half, None))]
        assert float(sum(parts)) == pytest.approx(float(whole), abs=1e-7)
