"""Shared by the training tests: trajectory files and an independent reading of ChatML tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchard_cli.records import JsonlWriter
from orchard_cli.trajectory import Trajectory


def write_trajectories(path: Path, trajectories: list[Trajectory]) -> Path:
    with JsonlWriter(path) as writer:
        for trajectory in trajectories:
            writer.write(trajectory)
    return path


def chatml_roles(ids: list[int], tokenizer: Any) -> list[str]:
    """For each token: the role of the message whose body (or closing <|im_end|>) it is in, or
    'header' (<|im_start|>ROLE\\n) or 'between' (after <|im_end|>). Reads the tokens, not the
    builder's spans."""
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    out, state, role, buffer = [], "between", "", ""
    for token in ids:
        if token == start:
            state, buffer = "role", ""
            out.append("header")
        elif state == "role":
            buffer += tokenizer.decode([token])
            out.append("header")
            if buffer.endswith("\n"):
                state, role = "body", buffer.strip()
        elif state == "body":
            out.append(role)
            if token == end:
                state = "between"
        else:
            out.append("between")
    return out
