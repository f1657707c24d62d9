"""Shared by the distill, episode, view and export tests: a real SWE-bench-format task (built by
`tasks/swe_repo.py`), one ORCHARD_HOME per test session so its environment is built once, the
scripted model's replies, and one real distill run whose trajectories the view/export tests read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent / "tasks"))
import swe_repo  # noqa: E402

# The scripted teacher: one bash tool call that fixes add(), then a final answer.
FIX_COMMAND = "sed -i '0,/return a - b/s//return a + b/' calc/__init__.py && git diff --stat"
FIX = {"tool_calls": [{"name": "bash", "arguments": {"command": FIX_COMMAND}}]}
DONE = {"content": "add() now adds."}
NOTHING = {"content": "I will not change anything."}
FAIL = {"status": 500}
SLOW_FIX = {**FIX, "delay_s": 1.5}

_CACHE: dict[str, Any] = {}


def world(tmp_path_factory: Any) -> dict[str, Any]:
    """The task data (two instances of acme/calc) and the session's shared ORCHARD_HOME."""
    if "world" not in _CACHE:
        root = tmp_path_factory.mktemp("distill-world")
        instances = swe_repo.make_instances(root / "mirror")
        one = root / "calc-one.jsonl"
        one.write_text(json.dumps(instances["own"]) + "\n")
        two = root / "calc-two.jsonl"
        two.write_text("\n".join(json.dumps(instances[k]) for k in ("own", "scripted")) + "\n")
        _CACHE["world"] = {"root": root, "mirror": root / "mirror", "one": one, "two": two,
                           "home": root / "home", "instances": instances}
    return _CACHE["world"]


def distill_args(w: dict[str, Any], data: str, out: Path, base_url: str, *extra: str) -> list[str]:
    return ["distill", str(w[data]), "--repo-mirror", str(w["mirror"]), "--base-url", base_url,
            "--harness", "bash", "--out", str(out), "--timeout", "120", *extra]


def lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file, each parsed (a torn line would fail here)."""
    raw = path.read_bytes()
    assert not raw or raw.endswith(b"\n"), "a torn final line"
    return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


def distilled(tmp_path_factory: Any, monkeypatch: Any) -> Path:
    """One real distill run (two tasks, one teacher that fixes, one that does nothing)."""
    if "distilled" not in _CACHE:
        from orchard_cli.rollout.distill_run import DistillConfig, plan_distill
        from orchard_cli.models.scripted import ScriptedEndpoint

        w = world(tmp_path_factory)
        monkeypatch.setenv("ORCHARD_HOME", str(w["home"]))
        out = tmp_path_factory.mktemp("distilled") / "trajectories.jsonl"
        with ScriptedEndpoint([FIX, DONE, FIX, DONE, NOTHING, NOTHING]) as info:
            config = DistillConfig(suite=str(w["two"]), repo_mirror=str(w["mirror"]),
                                   teachers=["fixer", "idler"], base_url=info.base_url, out=str(out))
            plan_distill(config).execute()
        _CACHE["distilled"] = out
    return _CACHE["distilled"]
