"""Reinforcement learning on orchard's environments: rollouts a GPU trainer reads, and a GRPO loop.

    records.py      a rollout: the exact token ids a policy saw and produced, its log-probabilities,
                    the loss mask, the reward and the group-normalized advantage
    rollouts.py     `orchard rollout`: G attempts per task through the rollout core (pool, solver,
                    evidence, grader) against policy endpoints; JSONL as groups finish
    columns.py      the Parquet layout, named as verl's batch fields
    loss.py         the clipped policy-gradient loss (GRPO, as TRL computes it) and token log-probs
    learner.py      the optimizer side: batches from rollouts, updates (FSDP2 under torchrun)
    learning.py     every process's part of a run: learner, checkpoints, weight sync, final model
    weights.py      the weight sync: in place, or pushed to servers (LoRA adapters, checkpoints)
    loop.py         `orchard rl`: sample tasks, roll out, update, sync the served weights, repeat
    report.py       the reward curve and summary.json
"""
