"""Long runs are never silent: piped, one line per finished episode and a heartbeat naming what
runs (task, phase, model calls, tokens, elapsed); on a terminal, the overall bar with a live line
per running episode under it; `--quiet` says nothing; `--format json` keeps stdout pure JSON.

Real runs: `orchard eval` / `orchard distill` of the calc suite, orchard's bash agent in
bubblewrap sandboxes, a scripted model on loopback that takes 1 s per answer (so episodes are
caught mid-call), heartbeats every 0.3 s (ORCHARD_PROGRESS_SECONDS).
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from orchard_cli.env import connect
from orchard_cli.family import RunOptions
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.rollout.live import LiveBoard
from orchard_cli.rollout.solvers import GoldSolver
from orchard_cli.tasks.registry import load_suite

pytestmark = pytest.mark.bwrap


@pytest.fixture(scope="module")
def slow_model():
    endpoint = ScriptedEndpoint([{"content": "I cannot fix this.", "delay_s": 1.0}], cycle=True)
    info = endpoint.start()
    yield info.base_url
    endpoint.stop()


def _env() -> dict[str, str]:
    return {**os.environ, "ORCHARD_PROGRESS_SECONDS": "0.3", "COLUMNS": "160", "TERM": "xterm-256color"}


def _argv(kind: str, url: str, tmp_path) -> list[str]:
    orchard = [sys.executable, "-m", "orchard_cli.main"]
    if kind == "eval":
        return [*orchard, "eval", "calc", "--limit", "2", "--harness", "bash", "--model", "scripted",
                "--base-url", url, "--max-turns", "1", "--out", str(tmp_path / "run")]
    return [*orchard, "distill", "calc", "--limit", "2", "--teacher", "scripted", "--base-url", url,
            "--max-turns", "1", "--out", str(tmp_path / "t.jsonl")]


def test_piped_one_line_per_episode_and_heartbeats(slow_model, tmp_path):
    kind = "eval"
    proc = subprocess.run(_argv(kind, slow_model, tmp_path), capture_output=True, text=True, timeout=600,
                          env=_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    beats = [line for line in lines if re.match(rf"{kind} \[\d/2\] \d+ resolved, \d+ errors?, \d+:\d\d elapsed", line)]
    assert beats, proc.stderr  # before: nothing at all until the end
    assert any(re.search(r"running: calc-\w+ #1 agent, call 1(, \d+ tok)?, \d+:\d\d", b) for b in beats), beats
    assert any("eta after the first finishes" in b for b in beats)
    assert any(re.search(r"eta \d+:\d\d", b) for b in beats if b.startswith(f"{kind} [1/2]")) or \
        not any(b.startswith(f"{kind} [1/2]") for b in beats)
    done = [line for line in lines if re.match(rf"{kind} \[[12]/2\] empty_patch calc-\w+ #1 \(\d+:\d\d", line)]
    assert len(done) == 2, proc.stderr
    assert all(len(line) < 400 for line in lines)  # whole lines, never wrapped at 80 columns
    assert not any(line.startswith(("  ", "\u2501")) and "calc" in line and "#1" in line and "\n" in line for line in lines)


def test_terminal_shows_the_bar_and_a_line_per_running_episode(slow_model, tmp_path):
    """distill, as the issue saw it: silent for minutes, now a bar and a line per worker."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(_argv("distill", slow_model, tmp_path) + ["--workers", "2"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env=_env())
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode("utf-8", "replace"))
    assert proc.returncode == 0, text[-3000:]
    assert re.search(r"distill .*0/2 0 resolved 0 errors \d+:\d\d eta -:--", text), text[-3000:]
    running = set(re.findall(r"  (calc-\w+) #1 agent, call 1(?:, \d+ tok)?, \d+:\d\d", text))
    assert len(running) == 2, text[-3000:]  # both workers' lines, live, mid-call
    assert re.search(r"2/2 0 resolved 0 errors \d+:\d\d eta 0:00", text)


def test_quiet_and_json(tmp_path):
    argv = [sys.executable, "-m", "orchard_cli.main", "eval", "calc", "--limit", "1", "--predictions", "gold",
            "--out", str(tmp_path / "run"), "--quiet", "--format", "json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["resolved"] == 1
    assert proc.stderr.strip() == "", proc.stderr


def test_a_timeout_is_said_but_counted_as_the_scorecard_counts_it():
    """The bar's error count is the scorecard's (env and infra errors); a timeout is an outcome,
    said as it happens, not an error (the README's main job showed '2 errors' beside 'errors 0')."""
    import io

    from rich.console import Console

    from orchard_cli.commands._progress import RunProgress

    out = io.StringIO()
    progress = RunProgress("eval", 3, console=Console(file=out, force_terminal=False, width=200))
    progress.done("t1", 1, "timeout", error="killed at its time limit (120 s)")
    progress.done("t2", 1, "infra_error", error="the proxy went away")
    progress.done("t3", 1, "empty_patch")
    assert (progress.finished, progress.errors) == (3, 1)
    text = out.getvalue()
    assert "timeout t1 #1" in text and "killed at its time limit" in text and "the proxy went away" in text


class _SlowToStart(GoldSolver):
    """The gold solution, played by a solver that starts a model first, as an agent's first
    adapt starts its proxy (and an embedded model loads there, ~40 s): what a person sees then."""

    model_ran = True

    def __init__(self, family, activity) -> None:
        super().__init__(family)
        self.activity, self.seen = activity, []

    def needs_sandbox(self, family) -> bool:
        return True  # as an agent does

    def adapt(self, task, spec):
        self.seen.append(self.activity.phase)
        return spec


def test_a_model_starting_is_not_shown_as_the_sandbox(tmp_path):
    family, tasks = load_suite("calc", limit=1)
    activity = LiveBoard().start("k", tasks[0].task_id)
    solver = _SlowToStart(family, activity)
    env = connect("local")
    try:
        result = run_episode(Episode(task=tasks[0], attempt=1, solver=solver, episode_id="slow"),
                             family=family, env=env, options=RunOptions(backend="local"), activity=activity)
    finally:
        env.close()
    assert result.outcome.category == "resolved", result.outcome
    assert solver.seen == ["starting the model"]  # was "sandbox" for the whole of a model's load
