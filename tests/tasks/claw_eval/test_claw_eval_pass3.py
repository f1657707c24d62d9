"""Claw-Eval's leaderboard metric first: with three attempts, Pass^3 (every attempt passes), then
pass@3 and its mean score, orchard's strict verdict beside it; an attempt lost to an infrastructure
failure runs again, as Claw-Eval's runner does, so each task has three graded attempts (or, with
--retry-errors 0, it counts as not passed)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from orchard_cli.rollout.eval_run import EvalConfig, EvalRun
from orchard_cli.rollout.failures import EpisodeFailure
from orchard_cli.rollout.solvers import GoldSolver
from orchard_cli.tasks.base import Gold, GoldCall
from orchard_cli.tasks.registry import load_suite

RIGHT = Gold(tool_calls=[GoldCall(tool="notes_list"), GoldCall(tool="notes_get", arguments={"note_id": "n2"})],
             answer="Your gym locker code is 4417.")


class Flaky(GoldSolver):
    """The right calls, but the first try of each attempt is lost to the infrastructure."""

    name = harness = model = "flaky"

    def __init__(self, family) -> None:
        super().__init__(family)
        self.tries: dict[int, int] = {}

    def replayed(self, context):
        return RIGHT

    def solve(self, context):
        self.tries[context.attempt] = self.tries.get(context.attempt, 0) + 1
        if self.tries[context.attempt] == 1:
            raise EpisodeFailure("infra_error", "the model endpoint went away")
        return super().solve(context)


def _run(mini, tmp_path, retry_errors):
    family, tasks = load_suite("claw-eval", dataset=str(mini), instances=["T01_find_code"])
    out = tmp_path / f"run-{retry_errors}"
    config = EvalConfig(suite="claw-eval", dataset=str(mini), instances=["T01_find_code"], attempts=3,
                        source="flaky", retry_errors=retry_errors, out=str(out))
    run = EvalRun(config, family, tasks, Flaky(family), out, resume=False)
    return run, run.execute(), [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_lost_attempts_run_again_and_pass3_leads(mini, tmp_path, capsys):
    from rich.console import Console

    from orchard_cli.commands.eval import OutputFormat, _render

    run, card, rows = _run(mini, tmp_path, None)  # the family's rule: the runner's
    assert [(r["attempt"], r["category"]) for r in rows] == [(1, "infra_error"), (2, "infra_error"), (3, "infra_error"),
                                                              (1, "resolved"), (2, "resolved"), (3, "resolved")]
    bench = card.benchmark
    assert (bench.name, bench.lead_k, bench.lead, bench.pass_at_k[3], bench.mean_score) == ("Claw-Eval", 3, 1.0, 1.0, 1.0)
    assert card.errors == 0 and card.resolved == 3
    markdown = (run.out / "scorecard.md").read_text()
    assert markdown.index("Claw-Eval Pass^3 100.0%") < markdown.index("Orchard strict, resolved: 3 / 3")
    html = (run.out / "scorecard.html").read_text()
    assert html.index('id="benchmark-lead"') < html.index('id="resolved-rate"')
    console = Console(file=io.StringIO(), width=200)  # the terminal: the leaderboard's metric first
    _render(card, run, console, OutputFormat.text)
    talk, summary = console.file.getvalue(), capsys.readouterr().out
    assert "Claw-Eval Pass^3 100.0% (tasks passing all 3 attempts) | pass@3 100.0% | mean score 1.000" in talk
    assert talk.index("Claw-Eval Pass^3") < talk.index("orchard's strict verdict: resolved 3/3") < talk.index("outcomes:")
    assert summary.startswith("claw-eval: Claw-Eval Pass^3 100.0%") and "orchard strict: resolved 3/3" in summary

    _, card, rows = _run(mini, tmp_path, 0)  # --retry-errors 0: a lost attempt is not passed
    assert [r["category"] for r in rows] == ["infra_error"] * 3
    assert (card.benchmark.lead, card.benchmark.mean_score, card.errors) == (0.0, 0.0, 3)


def test_retry_errors_is_an_eval_option():
    proc = subprocess.run([sys.executable, "-m", "orchard_cli.main", "eval", "run", "--help"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0 and "--retry-errors" in proc.stdout
