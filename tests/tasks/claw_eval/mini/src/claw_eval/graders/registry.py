"""tasks/<folder>/grader.py -> an instance of the grader class it defines."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

from .base import AbstractGrader


def get_grader(task_id: str, tasks_dir="tasks", task_dir=None) -> AbstractGrader:
    path = Path(task_dir or Path(tasks_dir) / task_id) / "grader.py"
    spec = importlib.util.spec_from_file_location(f"grader_{task_id}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for _, kind in inspect.getmembers(module, inspect.isclass):
        if issubclass(kind, AbstractGrader) and kind is not AbstractGrader and kind.__module__ == module.__name__:
            return kind()
    raise ValueError(f"no grader class in {path}")
