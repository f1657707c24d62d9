"""How the value model's base LM reads episodes: where (device, workers, threads), what is kept
(features on disk, by content), and what a person sees meanwhile (a progress bar).

One `Reading` travels in `rerank train`'s and `rerank apply`'s configs (and `eval --rerank`'s).
The feature store keys a row by everything that makes it (feature version, the base's weights
fingerprint, precision, token budget, the episode's digest: `Featurizer.key`), so a second run over
the same episodes reads nothing again, whichever command or process made the rows.

Nothing here imports the rest of the value package (features.py imports this module).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.errors import UsageError

class Reading(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str = "auto"
    """cpu, cuda, cuda:N, or auto (the first GPU when torch sees one, else the CPU)."""
    workers: int = Field(1, ge=1)
    """Processes that read episodes, each with its own copy of the base LM."""
    threads: int | None = Field(None, ge=1)
    """torch threads per worker; None: this machine's cores shared among the workers."""
    cache: bool = True
    """Keep feature rows on disk (ORCHARD_HOME/cache/value-features) and read them back."""

    def torch_threads(self) -> int:
        if self.threads:
            return self.threads
        return max(1, len(os.sched_getaffinity(0)) // self.workers)


def resolve_device(name: str) -> Any:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name!r} is not cpu, cuda, cuda:N or auto") from None
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {name!r} is not cpu, cuda, cuda:N or auto")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: torch sees no CUDA device here", hint="pass --device cpu (or auto)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return device


class FeatureStore:
    """Feature rows on disk, one .npy file per key, written atomically (a torn write is never read)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def default(cls) -> "FeatureStore":
        from orchard_cli.home import state_dir

        return cls(state_dir("cache", "value-features"))

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.npy"

    def get(self, key: str, dim: int) -> np.ndarray | None:
        try:
            row = np.load(self._path(key), allow_pickle=False)
        except Exception:  # missing, empty, torn or not an array: read the episode again
            return None
        return row if row.shape == (dim,) and row.dtype == np.float32 else None

    def put(self, key: str, row: np.ndarray) -> None:
        path = self._path(key)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(partial, "wb") as handle:
                np.save(handle, np.asarray(row, dtype=np.float32), allow_pickle=False)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, path)
        except OSError:  # a full or read-only disk costs the cache, never the run
            partial.unlink(missing_ok=True)


class ReadProgress:
    """Episodes read so far on stderr: a bar with episodes per second and the time left on a
    terminal, else a line every 10 seconds (and at the end)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = time.monotonic()
        self.last = 0.0
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if total <= 0:
            return
        elapsed = time.monotonic() - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        if sys.stderr.isatty():
            if self._bar is None:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

                self._bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                                     console=Console(stderr=True), transient=False)
                self._task = self._bar.add_task(self.label, total=total, rate="")
                self._bar.start()
            self._bar.update(self._task, completed=done, total=total, rate=f"{rate:.2f} episodes/s")
            if done >= total:
                self.close()
            return
        if time.monotonic() - self.last >= 10 or done >= total:
            self.last = time.monotonic()
            eta = (total - done) / rate if rate > 0 else 0.0
            print(f"{self.label}: {done}/{total} episodes, {rate:.2f}/s, {int(eta) // 60}:{int(eta) % 60:02d} left",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


__all__ = ["FeatureStore", "ReadProgress", "Reading", "resolve_device"]
