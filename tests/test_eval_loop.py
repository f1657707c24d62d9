"""The eval loop with a tiny task family (defined here) on real local sandboxes and a real git repo:
categories, cleanup, records on disk, parallel workers, resume, and a crash mid-run."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from orchard_cli.env import connect
from orchard_cli.env.models import SandboxSpec
from orchard_cli.env.owner import current_owner
from orchard_cli.errors import OrchardError, UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.runs import RunFolder
from orchard_cli.runs.predictions import Prediction, PredictionsLog
from orchard_cli.records import read_jsonl
from orchard_cli.rollout.eval_run import EvalConfig, EvalRun, verdict
from orchard_cli.rollout.pool import spread_environments
from orchard_cli.rollout.choose import agent_solver as harness_source
from orchard_cli.rollout.choose import solvers
from orchard_cli.rollout.solvers import EmptySolver, GoldSolver, PredictionsSolver, Solution
from orchard_cli.tasks import calc
from orchard_cli.family import Task
from orchard_cli.outcome import Outcome

GoldSource, EmptySource, PredictionsSource = GoldSolver, EmptySolver, PredictionsSolver

pytestmark = pytest.mark.bwrap


def git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def calc_repo(tmp_path_factory):
    """A repository with a bug (add subtracts), its test, and the fix as a git diff."""
    repo = tmp_path_factory.mktemp("calc")
    git(repo, "init", "-q")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text("from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    gold = git(repo, "diff")
    git(repo, "checkout", "-q", "calc.py")
    return repo, base, gold


class EnvMissing(OrchardError):
    """What a family raises when an environment cannot be had."""


class LoopEpisode(calc.CalcEpisode):
    """The reference family's episode on a repository made here: copy the repo at its commit into
    the sandbox, apply the patch, run the test; ids starting with envfail/infra fail on purpose."""

    def __init__(self, task: Task, options, family: "CalcFamily") -> None:
        super().__init__(task, options)
        self.family = family

    def spec(self, backend: str) -> SandboxSpec:
        if self.task.task_id.startswith("infra"):
            return SandboxSpec(image="/nonexistent/rootfs")  # the backend cannot create this
        return SandboxSpec(memory="512Mi")

    def prepare(self, sandbox) -> None:
        self.family.before_setup(self.task)
        if self.task.task_id.startswith("envfail"):
            raise EnvMissing("python 2.1 is not available on this machine")
        for name in ("calc.py", "test_calc.py"):
            blob = git(self.family.repo, "show", f"{self.family.base}:{name}")
            sandbox.write_file(name, blob)
        job = sandbox.exec("git init -q && git add . && git -c user.name=t -c user.email=t@t commit -qm base")
        assert job.ok, job.stderr

    def run_tests(self, evidence: Evidence, sandbox) -> Outcome:
        assert "AGENT_WAS_HERE" not in sandbox.info.spec.env  # graded in a fresh, plain sandbox
        return super().run_tests(evidence, sandbox)

    def gold_patch(self) -> str:
        return self.family.gold


class CalcFamily(calc.CalcFamily):
    """The reference family over LoopEpisode."""

    def __init__(self, repo: Path, base: str, gold: str) -> None:
        self.repo, self.base, self.gold = repo, base, gold

    def tasks(self, *names: str) -> list[Task]:
        return [Task(task_id=n, suite="calc", family="calc", problem_statement="add subtracts",
                     repo="t/calc" if "other" not in n else "t/other",
                     record={"test_cmd": "python3 test_calc.py"}) for n in names]

    def episode(self, task: Task, options) -> LoopEpisode:
        return LoopEpisode(task, options, self)

    def before_setup(self, task: Task) -> None:
        return None


def _config(out, **kw):
    return EvalConfig(suite="calc", backend="local", out=str(out), **kw)


def test_outcomes_are_categorised_and_recorded(tmp_path, calc_repo):
    family = CalcFamily(*calc_repo)
    tasks = family.tasks("good-1", "good-other-2", "envfail-3", "infra-4")
    out = tmp_path / "run"
    run = EvalRun(_config(out, workers=2, source="gold"), family, tasks, GoldSource(), out, False,
                  provenance={"dataset_sha256": "0" * 64})
    seen = []
    card = run.execute(seen.append)
    rows, report = read_jsonl(out / "results.jsonl")
    by_id = {r["instance_id"]: r for r in rows}
    assert len(seen) == 4 and report.bad_lines == [] and not report.torn_tail
    assert by_id["good-1"]["category"] == "resolved" and by_id["good-1"]["resolved"]
    assert by_id["good-1"]["tests"] == {"passed": 1, "failed": 0, "summary": "1/1 passed"}
    assert by_id["envfail-3"]["category"] == "env_error"
    assert "python 2.1 is not available" in by_id["envfail-3"]["error"]
    assert by_id["infra-4"]["category"] == "infra_error" and by_id["infra-4"]["error"]
    assert all(r["schema_version"] == 1 for r in rows)
    # Logs: the patch, the test output and the eval script of each graded attempt.
    logs = out / "logs" / "good-1" / "attempt-1"
    assert (logs / "patch.diff").read_text() == family.gold
    assert "ok" in (logs / "test_output.txt").read_text()
    assert (logs / "eval.sh").exists() and (out / "logs/envfail-3/attempt-1/error.txt").exists()
    # The scorecard: errors apart, headline over all, both repos.
    assert (card.total, card.resolved, card.errors) == (4, 2, 2)
    assert card.resolved_rate == 0.5 and card.resolved_rate_graded == 1.0
    assert set(card.by_repo) == {"t/calc", "t/other"}
    saved = json.loads((out / "scorecard.json").read_text())
    assert saved["resolved"] == 2 and saved["reproducibility"]["dataset_sha256"] == "0" * 64
    assert (out / "scorecard.md").exists() and (out / "scorecard.html").exists()
    assert verdict(card, fail_under=None, max_errors=0)[0] == 3
    assert verdict(card, fail_under=None, max_errors=2)[0] == 0
    assert verdict(card, fail_under=0.6, max_errors=2)[0] == 1
    # predictions.jsonl in SWE-bench's format, one line per instance that got a patch.
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert {p["instance_id"] for p in preds} == {"good-1", "good-other-2", "envfail-3", "infra-4"}
    assert {"instance_id", "model_name_or_path", "model_patch"} <= set(preds[0])
    # The run folder's owner names every file the run wrote and reads each back.
    folder = RunFolder(out)
    named = {folder.config, folder.tasks, folder.results, folder.scorecard, folder.scorecard_md,
             folder.scorecard_html, out / PredictionsLog.file_name(1), out / "logs"}
    assert set(out.iterdir()) == named
    assert [t.task_id for t in folder.read_tasks()] == [t.task_id for t in tasks]
    assert [(r.instance_id, r.category) for r in folder.latest_results()] == \
        sorted((r["instance_id"], r["category"]) for r in rows)
    assert folder.read_scorecard()["resolved"] == 2 and folder.read_config()["source"] == "gold"
    assert folder.log_dir("good-1", 1) == logs and folder.require(config=True) is folder
    # Every sandbox was destroyed, including after failures.
    env = connect("local")
    try:
        assert [r for r in env.backend.resources() if r.owner == current_owner()] == []
    finally:
        env.close()


def test_a_folder_that_is_not_a_run_is_one_line(tmp_path):
    with pytest.raises(UsageError, match=r"is not an orchard eval run \(no results.jsonl\)"):
        RunFolder(tmp_path).require()
    (tmp_path / "results.jsonl").write_text("")
    assert RunFolder(tmp_path).require().latest_results() == [] and RunFolder(tmp_path).read_scorecard() == {}
    with pytest.raises(UsageError, match="has results but no config.json"):
        RunFolder(tmp_path).require(config=True)


def test_empty_bad_and_missing_patches(tmp_path, calc_repo):
    family = CalcFamily(*calc_repo)
    tasks = family.tasks("a", "b", "c")
    bad = family.gold.replace("return a - b", "return a * b")  # context that does not match
    source = PredictionsSource("p.jsonl", {
        "a": Prediction(instance_id="a", model_name_or_path="m", model_patch=bad),
        "b": Prediction(instance_id="b", model_name_or_path="m", model_patch=""),
    })
    out = tmp_path / "run"
    card = EvalRun(_config(out, source=source.name), family, tasks, source, out, False).execute()
    assert card.by_category["patch_apply_failed"] == 1
    assert card.by_category["empty_patch"] == 2  # an empty patch and a task with no prediction
    assert card.resolved == 0 and card.errors == 0


def test_resume_skips_finished_retries_errors_and_refuses_other_configs(tmp_path, calc_repo):
    family = CalcFamily(*calc_repo)
    tasks = family.tasks("good-1", "envfail-2")
    out = tmp_path / "run"
    first = EvalRun(_config(out, attempts=2), family, tasks, GoldSource(), out, False).execute()
    rows, _ = read_jsonl(out / "results.jsonl")
    assert len(rows) == 4 and first.wall_seconds > 0

    with pytest.raises(UsageError, match="not empty"):
        EvalRun(_config(out, attempts=2), family, tasks, GoldSource(), out, False)
    with pytest.raises(UsageError, match=r"different configuration \(attempts: 2 -> 3\)"):
        EvalRun(_config(out, attempts=3), family, tasks, GoldSource(), out, True)

    # Resumed: the finished attempts stay; the env errors are tried again (here they fail again).
    run = EvalRun(_config(out, attempts=2, workers=3), family, tasks, GoldSource(), out, True)
    assert [(t.task_id, k) for t, k in run.pending] == [("envfail-2", 1), ("envfail-2", 2)]
    card = run.execute()
    rows, _ = read_jsonl(out / "results.jsonl")
    assert len(rows) == 6 and card.total == 4 and card.pass_at_k == {1: 0.5, 2: 0.5}
    assert card.wall_seconds > first.wall_seconds  # summed over both sessions
    preds = (out / "predictions.jsonl").read_text().splitlines()
    assert len(preds) == 2  # rewritten: one line per instance, the latest


def test_a_crashed_run_keeps_what_finished(tmp_path, calc_repo):
    """A run killed after two of three instances resumes with only the third."""
    repo, base, gold = calc_repo
    out = tmp_path / "run"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_eval_loop import CalcFamily, _config
        from orchard_cli.rollout.solvers import GoldSolver as GoldSource
        from orchard_cli.rollout.eval_run import EvalRun
        from pathlib import Path
        family = CalcFamily(Path({str(repo)!r}), {base!r}, {gold!r})
        done = []
        def on_result(r):
            done.append(r)
            if len(done) == 2:
                os._exit(7)
        tasks = family.tasks("t1", "t2", "t3")
        EvalRun(_config(Path({str(out)!r})), family, tasks, GoldSource(), Path({str(out)!r}), False).execute(on_result)
    """)
    proc = subprocess.run([sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 7, proc.stderr
    rows, report = read_jsonl(out / "results.jsonl")
    assert len(rows) == 2 and not report.torn_tail
    family = CalcFamily(repo, base, gold)
    run = EvalRun(_config(out), family, family.tasks("t1", "t2", "t3"), GoldSource(), out, True)
    assert len(run.pending) == 1
    card = run.execute()
    assert card.resolved == 3 and card.complete


def test_empty_source_needs_no_sandbox(tmp_path, calc_repo):
    family = CalcFamily(*calc_repo)
    out = tmp_path / "run"
    card = EvalRun(_config(out), family, family.tasks("infra-1"), EmptySource(), out, False).execute()
    assert card.by_category["empty_patch"] == 1 and card.errors == 0


def test_interrupt_writes_a_partial_scorecard_and_cleans_up(tmp_path, calc_repo):
    family = CalcFamily(*calc_repo)
    tasks = family.tasks("t1", "t2", "t3")
    out = tmp_path / "run"

    def interrupt(result):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        EvalRun(_config(out), family, tasks, GoldSource(), out, False).execute(interrupt)
    card = json.loads((out / "scorecard.json").read_text())
    assert card["complete"] is False and card["total"] == 1 and card["missing"] == 2
    env = connect("local")
    try:
        assert [r for r in env.backend.resources() if r.owner == current_owner()] == []
    finally:
        env.close()
    card = EvalRun(_config(out), family, tasks, GoldSource(), out, True).execute()
    assert card.complete and card.resolved == 3


class FixingAgent:
    """A scripted 'agent' that edits the checkout in its sandbox; registered like a real harness."""

    name, version, model_ran, harness = "model:scripted@fixer", "1.0", True, "fixer"

    def __init__(self, model, base_url, seed):
        self.model = model

    def needs_sandbox(self, family):
        return True

    def adapt(self, task, spec):
        return spec.model_copy(update={"env": {**spec.env, "AGENT_WAS_HERE": "1"}})

    def solve(self, context):
        sandbox = context.sandbox
        assert sandbox.info.spec.env.get("AGENT_WAS_HERE") == "1"  # only the agent's sandbox
        job = sandbox.exec("sed -i 's/a - b/a + b/' calc.py && git diff")
        assert job.ok, job.stderr
        return Solution(evidence=Evidence(patch=job.stdout), model=self.model, tokens_in=120, tokens_out=30,
                        cost_usd=None)

    def close(self):
        pass


def test_agent_source_solves_in_one_sandbox_and_is_graded_in_a_fresh_one(tmp_path, calc_repo, monkeypatch):
    monkeypatch.setitem(solvers._targets, "fixer", FixingAgent)
    source = harness_source("fixer", "scripted-model", "http://127.0.0.1:9/v1", 0)
    family = CalcFamily(*calc_repo)
    out = tmp_path / "run"
    card = EvalRun(_config(out, harness="fixer", model="scripted-model", source=source.name), family,
                   family.tasks("t1"), source, out, False).execute()
    assert card.resolved == 1
    assert card.tokens.input == 120 and card.tokens.output == 30
    assert card.cost_usd is None and not card.cost_known  # unknown price: null, never 0
    assert card.reproducibility.harness == "fixer" and card.reproducibility.harness_version == "1.0"
    row = read_jsonl(out / "results.jsonl")[0][0]
    assert row["model"] == "scripted-model" and row["episode_id"].startswith("ep-")
    stored = json.loads((out / row["log_dir"] / "evidence.json").read_text())  # what was graded, kept
    assert "+    return a + b" in stored["patch"]


def test_an_unknown_harness_is_a_one_line_usage_error(monkeypatch):
    with pytest.raises(UsageError, match="harness 'nosuch'") as err:
        harness_source("nosuch", "m", None, None)
    assert "\n" not in err.value.message
    monkeypatch.setitem(solvers._targets, "fixer", FixingAgent)
    with pytest.raises(UsageError, match="unknown harness 'nosuch'"):
        harness_source("nosuch", "m", None, None)
    with pytest.raises(UsageError, match="needs both --model"):
        harness_source("fixer", None, None, None)


def test_resume_of_an_unreadable_config_is_a_usage_error(tmp_path, calc_repo):
    family = CalcFamily(*calc_repo)
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"schema_version": 1, "suite": "calc", "colour": "red"}))
    with pytest.raises(UsageError, match="not an eval configuration"):
        EvalRun(_config(out), family, family.tasks("t1"), GoldSource(), out, True)
    (out / "config.json").unlink()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not an orchard eval run"):
        EvalRun(_config(out), family, family.tasks("t1"), GoldSource(), out, True)


class KeyedCalcFamily(CalcFamily):
    """CalcFamily whose tasks share environments by id prefix ('a-1', 'a-2' -> 'a'); it records
    the order in which setups start, and the first two wait for each other (both workers busy)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.started: list[str] = []
        self._both = threading.Barrier(2, timeout=60)
        self._mutex = threading.Lock()

    def env_key(self, task: Task) -> str:
        if task.task_id.startswith("nokey"):
            raise EnvMissing("no recipe")
        return task.task_id.split("-")[0]

    def before_setup(self, task: Task) -> None:
        with self._mutex:
            if task.task_id in self.started:
                return  # its grading sandbox
            self.started.append(task.task_id)
            first_two = len(self.started) <= 2
        if first_two:
            self._both.wait()


def test_two_workers_start_on_different_environments(tmp_path, calc_repo):
    """Tasks in file order a, a, a, b, b: with 2 workers the first two setups are of a and b
    (file order started both on a, the second waiting on the first's environment build)."""
    family = KeyedCalcFamily(*calc_repo)
    tasks = family.tasks("a-1", "a-2", "a-3", "b-1", "b-2")
    out = tmp_path / "run"
    run = EvalRun(_config(out, workers=2, source="gold"), family, tasks, GoldSource(), out, False)
    assert [t.task_id for t, _ in run.pending] == ["a-1", "b-1", "a-2", "b-2", "a-3"]
    card = run.execute()
    assert {family.env_key(t) for t in tasks if t.task_id in family.started[:2]} == {"a", "b"}
    assert sorted(family.started) == sorted(t.task_id for t in tasks)
    assert card.resolved == 5 and card.complete
    # One worker: file order (no one to wait on); a family without env_key: file order.
    single = EvalRun(_config(tmp_path / "one"), family, tasks, GoldSource(), tmp_path / "one", False)
    assert [t.task_id for t, _ in single.pending] == ["a-1", "a-2", "a-3", "b-1", "b-2"]
    assert spread_environments([(t, 1) for t in tasks], CalcFamily(*calc_repo)) == [(t, 1) for t in tasks]


def test_spread_keeps_attempts_in_order_and_survives_a_failing_key(calc_repo):
    family = KeyedCalcFamily(*calc_repo)
    tasks = family.tasks("a-1", "a-2", "nokey-1", "b-1")
    pending = [(t, k) for t in tasks for k in (1, 2)]
    order = [(t.task_id, k) for t, k in spread_environments(pending, family)]
    assert order == [("a-1", 1), ("nokey-1", 1), ("b-1", 1), ("a-1", 2), ("nokey-1", 2), ("b-1", 2),
                     ("a-2", 1), ("a-2", 2)]
    assert sorted(order) == sorted((t.task_id, k) for t, k in pending)
