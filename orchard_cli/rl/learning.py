"""Every process's part of an `orchard rl` run: the policy's learner, its checkpoints, the weight
sync and the final model. Rank 0 also rolls out, evaluates and logs (`rl.loop`); under torchrun the
other processes run `follow()`, which does exactly what rank 0 does around each step, so every
collective (FSDP's gathers, DCP's checkpoints, the weight sync's gathering) has every process in it.

Rank 0 sends each step's rollouts to the others (`share`); `{"finish": true}` ends the run (every
process takes part in gathering the final model), None aborts it (rank 0 failed between updates).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchard_cli.rl.samples import Rollout

if TYPE_CHECKING:
    from orchard_cli.rl.learner import UpdateStats
    from orchard_cli.rl.config import RLConfig


def share(dist: Any, message: dict[str, Any] | None) -> dict[str, Any] | None:
    """Rank 0 sends `message` to the other processes; they receive it (one process: as is)."""
    if dist.world <= 1:
        return message
    import torch

    box: list[Any] = [message]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def step_message(step: int, rollouts: list[Rollout]) -> dict[str, Any]:
    return {"step": step, "rollouts": [r.model_dump(mode="json") for r in rollouts]}


class Learning:
    """The learner side of a run, built the same way on every process."""

    def __init__(self, cfg: RLConfig, out: Path, dist: Any) -> None:
        import torch

        from orchard_cli.models.local_model import load_weights
        from orchard_cli.rl.learner import Learner

        self.cfg, self.out, self.dist = cfg, out, dist
        model, self.tokenizer, self.source = load_weights(cfg.model)
        if cfg.learner.lora:
            from orchard_cli.training.trainer import apply_lora

            torch.manual_seed(cfg.seed)  # the adapter's initialisation is part of the run
            model = apply_lora(model, cfg.learner)
        reference = load_weights(cfg.model)[0] if cfg.learner.beta > 0 else None
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.learner = Learner(model, cfg.learner, pad_id=self.tokenizer.pad_token_id, reference=reference,
                               dist=dist)
        self.sync: Any = None

    @property
    def model(self) -> Any:
        return self.learner.model

    def resume(self, found: Path | None) -> int:
        """Load rank 0's choice of checkpoint on every process (any number of processes wrote it);
        returns its step (0: none)."""
        from orchard_cli.training.checkpoints import load_checkpoint

        told = share(self.dist, {"checkpoint": str(found) if found else None})
        path = (told or {}).get("checkpoint")
        if not path:
            return 0
        return load_checkpoint(self.learner.root, self.learner.optimizer, Path(path), self.dist)

    def push(self, version: int) -> float:
        return self.sync.push(version) if self.sync is not None else 0.0

    def step(self, step: int, rollouts: list[Rollout]) -> tuple[UpdateStats, float]:
        """Update on the step's rollouts, push the new weights, checkpoint when due."""
        from orchard_cli.training.checkpoints import save_checkpoint

        cfg = self.cfg
        stats = self.learner.update(rollouts, temperature=cfg.sampling.temperature,
                                    max_completion_length=cfg.sampling.max_new_tokens or cfg.learner.max_seq_len)
        sync_s = self.push(step)
        if step % cfg.save_every == 0 or step == cfg.steps:
            save_checkpoint(self.learner.root, self.learner.optimizer, self.out / "checkpoints", step, self.dist,
                            extra={"step": step})
        return stats, sync_s

    def follow(self) -> None:
        """A process other than rank 0: each step's share of the work, until rank 0 ends the run."""
        while True:
            message = share(self.dist, None)
            if message is None:
                return
            if message.get("finish"):
                self.finish(None)
                return
            self.step(message["step"], [Rollout.model_validate(r) for r in message["rollouts"]])

    def finish(self, final: Path | None) -> None:
        """The final policy, gathered whole, as a checkpoint folder (rank 0 writes it to `final`);
        a LoRA policy is saved merged (what `orchard serve --model` takes) and as DIR/adapter."""
        state = self.learner.full_state()
        if final is None or state is None:
            return
        model = self.model
        if self.cfg.learner.lora:
            from orchard_cli.models.local_model import load_weights
            from orchard_cli.training.trainer import apply_lora

            model.save_pretrained(self.out / "adapter", state_dict=state)
            fresh = apply_lora(load_weights(self.cfg.model)[0], self.cfg.learner)
            unexpected = fresh.load_state_dict(state, strict=False).unexpected_keys
            if unexpected:
                raise RuntimeError(f"the gathered policy does not fit its model ({unexpected[:3]})")
            fresh.merge_and_unload().save_pretrained(final)
        else:
            model.save_pretrained(final, state_dict=state)
        self.tokenizer.save_pretrained(final)
