"""Resumable checkpoints of `orchard train` and `orchard rl`'s learner, through
`torch.distributed.checkpoint` (DCP).

root/step-N/ holds `state/` (DCP: the trainable weights and the optimizer state, keyed by parameter
name; each process writes its own shards), `rng.pt` (rank 0's RNG state) and, for the RL loop,
`state.json`. DCP reshards on load, so a checkpoint written by N processes (sharded or not)
resumes in M, one included. A checkpoint is written under a temporary name and renamed when every
process has written its part; older checkpoints in root are then removed. Saving and loading are
collectives: every process calls them. With several machines, root must be on a filesystem every
machine sees.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from orchard_cli.errors import UsageError
from orchard_cli.training.parallel import Dist, barrier, trainable_names

STATE = "state"


def _states(root: Any, optimizer: Any) -> dict[str, Any]:
    """{"model": trainable weights, "optim": optimizer state}, as DCP reads and writes them."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(root, optimizer)
    keep = trainable_names(root)
    return {"model": {k: v for k, v in model_sd.items() if k in keep}, "optim": optim_sd}


def save_checkpoint(root: Any, optimizer: Any, folder: Path, step: int, dist: Dist | None = None,
                    extra: dict[str, Any] | None = None) -> Path:
    """folder/step-N (see the module's docstring); returns its path on every process."""
    import torch
    import torch.distributed.checkpoint as dcp

    dist = dist or Dist()
    target = folder / f"step-{step:06d}"
    partial = folder / f".step-{step:06d}.partial"
    if dist.main:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    barrier(dist)
    dcp.save(_states(root, optimizer), checkpoint_id=str(partial / STATE), no_dist=_alone())
    if dist.main:
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(rng, partial / "rng.pt")
        if extra is not None:
            (partial / "state.json").write_text(json.dumps(extra) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
        for old in folder.glob("step-*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)
    barrier(dist)
    return target


def load_checkpoint(root: Any, optimizer: Any, folder: Path, dist: Dist | None = None) -> int:
    """Restore trainable weights, optimizer state and RNG from folder (written by any number of
    processes); returns its step. Every process calls it."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    if not (folder / STATE / ".metadata").is_file():
        old = " (written by an older orchard: resume it with that version, or start anew)" \
            if (folder / "trainable.safetensors").is_file() else ""
        raise UsageError(f"{folder} is not a checkpoint{old}", hint="start the run in a new folder")
    states = _states(root, optimizer)
    try:
        dcp.load(states, checkpoint_id=str(folder / STATE), no_dist=_alone())
    except Exception as exc:  # noqa: BLE001 - DCP raises several kinds for a mismatch
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"checkpoint {folder} does not match the model ({first})") from None
    set_state_dict(root, optimizer, model_state_dict=states["model"], optim_state_dict=states["optim"],
                   options=StateDictOptions(strict=False))
    rng = torch.load(folder / "rng.pt", weights_only=True)
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return int(folder.name.split("-")[1])


def _alone() -> bool:
    import torch

    return not (torch.distributed.is_available() and torch.distributed.is_initialized())


def latest_checkpoint(folder: Path) -> Path | None:
    found = sorted(folder.glob("step-*")) if folder.is_dir() else []
    return found[-1] if found else None
