"""Helpers shared by the batching tests (imported as `batch_helpers`)."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def unbatched(model: Any) -> Iterator[None]:
    """The model's one-at-a-time path (`LocalModel.steps`), its batch set aside meanwhile."""
    engine, model.engine = model.engine, None
    try:
        yield
    finally:
        model.engine = engine


def jobs_together(model: Any, bodies: list[dict[str, Any]]) -> list[Any]:
    """ChatJobs admitted at one token boundary, run to the end concurrently (as a server runs them)."""
    from orchard_cli.models.local_chat import ChatJob

    jobs = [ChatJob(model, body) for body in bodies]
    with model.engine.together():
        for job in jobs:
            job.admit()
    threads = [threading.Thread(target=job.run) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return jobs


def first_divergence_gap(model: Any, prompt: list[int], ours: list[int], theirs: list[int]) -> tuple[int, float]:
    """(position, logit gap there) of the first token two greedy runs disagree on: how far the
    reference's pick is above ours in the reference's own forward pass. (-1, 0) when they agree."""
    import torch

    n = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), -1)
    if n < 0:
        return -1, 0.0
    with torch.inference_mode():
        logits = model.model(input_ids=torch.tensor([prompt + theirs[:n]])).logits[0, -1].float()
    return n, float(logits[theirs[n]] - logits[ours[n]])
