"""Derive the GRPO loss values `tests/rl/test_loss.py` pins, with TRL's own code.

TRL is not a dependency of orchard: install it beside the project, never into it, and run this
with it on the path (it imports accelerate, datasets and transformers from orchard's venv):

    .venv/bin/pip download --no-deps trl==1.16.0 -d /tmp/trl && unzip -q -o /tmp/trl/trl-1.16.0-*.whl -d /tmp/trl/pkg
    PYTHONPATH=/tmp/trl/pkg .venv/bin/python bench/trl_grpo_reference.py

It builds a fixed batch (4 completions of up to 6 tokens, a padding mask, current / old / reference
log-probabilities, group advantages from 4 rewards with TRL's `nanstd`), calls
`GRPOTrainer._compute_loss` on it (the model's forward replaced by the fixed log-probabilities:
the loss arithmetic is TRL's) for each loss type with and without a KL term, and writes the batch,
TRL's advantages, losses and gradients to tests/rl/data/grpo_reference.json.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

OUT = Path(__file__).resolve().parents[1] / "tests" / "rl" / "data" / "grpo_reference.json"
LOSS_TYPES = ("dapo", "bnpo", "grpo", "dr_grpo")
BETAS = (0.0, 0.04)
MAX_COMPLETION = 6


def main() -> int:
    import torch
    import trl
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import nanstd

    gen = torch.Generator().manual_seed(1234)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]],
                        dtype=torch.float32)
    logps = -torch.rand(4, 6, generator=gen) * 3 - 0.05
    old = logps + (torch.rand(4, 6, generator=gen) - 0.5) * 0.6   # ratios well inside and outside the clip range
    ref = logps + (torch.rand(4, 6, generator=gen) - 0.5) * 0.4
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    mean = rewards.view(-1, 4).mean(dim=1).repeat_interleave(4)
    std = nanstd(rewards.view(-1, 4), dim=1).repeat_interleave(4)
    advantages = (rewards - mean) / (std + 1e-4)
    results = []
    for loss_type in LOSS_TYPES:
        for beta in BETAS:
            current = logps.clone().requires_grad_(True)
            fake = SimpleNamespace(
                _get_per_token_logps_and_entropies=lambda *a, _c=current, **k: (_c, torch.zeros_like(_c), None),
                aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
                importance_sampling_level="token", beta=beta, loss_type=loss_type, epsilon_low=0.2,
                epsilon_high=0.2, use_vllm=False, vllm_importance_sampling_correction=False,
                args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
                model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1,
                max_completion_length=MAX_COMPLETION, _entropy_bonus_enabled=False,
                accelerator=SimpleNamespace(num_processes=1, gather=lambda x: x, gather_for_metrics=lambda x: x,
                                            reduce=lambda x, reduction="sum": x),
                _metrics=defaultdict(lambda: defaultdict(list)))
            inputs = {"prompt_ids": torch.zeros(4, 2, dtype=torch.long), "prompt_mask": torch.ones(4, 2),
                      "completion_ids": torch.zeros(4, 6, dtype=torch.long), "completion_mask": mask,
                      "advantages": advantages, "old_per_token_logps": old, "ref_per_token_logps": ref,
                      "num_items_in_batch": mask.sum()}
            loss = GRPOTrainer._compute_loss(fake, None, inputs)
            loss.backward()
            results.append({"loss_type": loss_type, "beta": beta, "loss": float(loss.detach()),
                            "grad": (current.grad * mask).tolist()})
            print(f"{loss_type:8s} beta={beta:<5} loss={float(loss.detach()):+.6f}")
    doc = {"trl_version": trl.__version__, "torch_version": torch.__version__, "epsilon": 0.2,
           "max_completion_length": MAX_COMPLETION, "mask": mask.tolist(), "logps": logps.tolist(),
           "old_logps": old.tolist(), "ref_logps": ref.tolist(), "rewards": rewards.tolist(),
           "advantages": advantages.tolist(), "results": results}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT} (TRL {trl.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
