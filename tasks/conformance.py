"""One conformance suite that every task family runs (SWE, the reference family, and any new one),
as `orchard_cli.env.conformance` is for sandbox backends.

Each check is a plain function `check(rig)` over a `FamilyRig` (a family, a small selection of its
tasks, a backend and a scratch folder); it raises AssertionError on failure. The rig runs the gold
and the null solver once each, through the real rollout core (pool, sinks, run folders), and the
checks read those runs:

    seam_complete        the family implements the whole seam; its categories are lower_snake_case
                         names beside the core ones, and every verdict it gave is one of them
    gold_resolves        every selected task's gold solution resolves (a family without references,
                         `FamilyRig(reference=False)`: Claw-Eval, the live-web suites, asking for
                         gold is refused in one line before anything runs, and the checks below
                         read the null run instead of the gold one)
    null_fails           the null attempt (no answer at all) resolves none, without an error
    evidence_round_trips the evidence stored with each episode reads back as what was graded
    regrade_equals_grade grading the stored evidence again gives every episode the same verdict
    resume_runs_once     a run stopped after its first episode, resumed, runs each episode once
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchard_cli.evidence import EVIDENCE_FILE, Evidence
from orchard_cli.records import read_json, read_jsonl
from orchard_cli.family import check_family, family_categories
from orchard_cli.runs import RunFolder
from orchard_cli.outcome import REQUIREMENT_CATEGORIES
from orchard_cli.selection import TaskSelection

Check = Callable[["FamilyRig"], None]
CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


@dataclass
class FamilyRig:
    """A family under test: its selection, where runs go, and the runs made so far."""

    selection: TaskSelection
    folder: Path
    backend: str = "local"
    reference: bool = True
    """False for a family whose tasks have no reference solution (gold is refused)."""
    runs: dict[str, Path] = field(default_factory=dict)

    @property
    def played(self) -> tuple[str, ...]:
        """The runs the checks read: gold and null, or null alone without references."""
        return ("gold", "empty") if self.reference else ("empty",)

    @property
    def main(self) -> str:
        return self.played[0]

    def config(self, out: Path, **fields: Any) -> Any:
        from orchard_cli.rollout.eval_run import EvalConfig

        flat = {k: v for k, v in self.selection.model_dump().items() if k in EvalConfig.model_fields}
        return EvalConfig(**flat, backend=self.backend, out=str(out), **fields)

    def run(self, predictions: str) -> Path:
        """The run of `--predictions gold|empty` over the selection (made once)."""
        if predictions not in self.runs:
            from orchard_cli.rollout.eval_run import plan_eval

            out = self.folder / predictions
            card = plan_eval(self.config(out, predictions=predictions, max_errors=0)).execute()
            assert card.complete and card.errors == 0, (
                f"{predictions}: {card.errors} error(s): {_errors(out)}")
            self.runs[predictions] = out
        return self.runs[predictions]

    def results(self, predictions: str) -> list[Any]:
        return RunFolder(self.run(predictions)).latest_results()


def _errors(run: Path) -> str:
    rows, _ = read_jsonl(RunFolder(run).results)
    return "; ".join(f"{r['instance_id']}: {r['category']} {r.get('error') or ''}" for r in rows
                     if r["category"] != "resolved")[:2000]


@check
def check_seam_complete(rig: FamilyRig) -> None:
    from orchard_cli.families import load_suite

    family, tasks = load_suite(rig.selection)
    check_family(family)
    assert tasks, "the selection holds no task"
    declared = {**family_categories(family), **REQUIREMENT_CATEGORIES}
    for predictions in rig.played:
        for row in rig.results(predictions):
            assert row.category in declared, f"{row.instance_id}: category {row.category!r} is not declared"


@check
def check_gold_resolves(rig: FamilyRig) -> None:
    if not rig.reference:
        from orchard_cli.errors import UsageError
        from orchard_cli.rollout.eval_run import plan_eval

        out = rig.folder / "gold-refused"
        try:
            plan_eval(rig.config(out, predictions="gold"))
        except UsageError as exc:
            assert "gold" in str(exc) and "\n" not in str(exc), f"refusal not one line naming gold: {exc}"
        else:
            raise AssertionError("gold was not refused for a family without references")
        assert not out.exists(), "the refused run wrote its folder"
        return
    rows = rig.results("gold")
    assert rows and all(r.resolved for r in rows), f"gold did not resolve: {_errors(rig.run('gold'))}"


@check
def check_null_fails(rig: FamilyRig) -> None:
    rows = rig.results("empty")
    assert rows and not any(r.resolved for r in rows), "a null attempt resolved a task"
    assert not any(r.is_error for r in rows), f"a null attempt errored: {_errors(rig.run('empty'))}"


@check
def check_evidence_round_trips(rig: FamilyRig) -> None:
    run = rig.run(rig.main)
    assert {t.task_id for t in RunFolder(run).read_tasks()} >= {r.instance_id for r in rig.results(rig.main)}
    for row in rig.results(rig.main):
        path = run / row.log_dir / EVIDENCE_FILE
        if row.category in REQUIREMENT_CATEGORIES:  # refused before any sandbox: nothing ran, nothing stored
            assert not path.exists(), f"{row.instance_id}: refused ({row.category}) yet evidence was stored"
            continue
        stored = read_json(path)
        evidence = Evidence.model_validate(stored)
        assert evidence.model_dump(mode="json") == stored, f"{path} does not read back as written"
        assert not rig.reference or not evidence.is_empty(), f"{row.instance_id}: the gold episode stored no evidence"


@check
def check_regrade_equals_grade(rig: FamilyRig) -> None:
    from orchard_cli.rollout.eval_run import plan_regrade

    for predictions in rig.played:
        before = {(r.instance_id, r.attempt): (r.category, r.resolved) for r in rig.results(predictions)}
        plan = plan_regrade(rig.run(predictions), out=rig.folder / f"{predictions}-regrade")
        plan.execute()
        rows, _ = read_jsonl(plan.folder.results)
        after = {(r["instance_id"], r["attempt"]): (r["category"], r["resolved"]) for r in rows}
        assert after == before, f"{predictions}: regrade changed verdicts: {before} -> {after}"


@check
def check_resume_runs_once(rig: FamilyRig) -> None:
    from orchard_cli.rollout.eval_run import EvalConfig, plan_eval

    out = rig.folder / "resume"
    one = rig.selection.model_copy(update={"limit": 1, "slice": None})  # the first selected task
    config = rig.config(out, predictions=rig.main, attempts=2).model_copy(
        update={k: v for k, v in one.model_dump().items() if k in EvalConfig.model_fields})

    def stop(_: Any) -> None:
        raise KeyboardInterrupt

    try:
        plan_eval(config).execute(stop)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the run did not stop")
    first, _ = read_jsonl(RunFolder(out).results)
    assert len(first) == 1, f"the stopped run recorded {len(first)} episodes, not 1"
    resumed = plan_eval(config, resume=True)
    assert len(resumed.pending) == 1, f"resume plans {len(resumed.pending)} episodes, not the 1 left"
    card = resumed.execute()
    rows, _ = read_jsonl(RunFolder(out).results)
    keys = [(r["instance_id"], r["attempt"]) for r in rows]
    assert len(keys) == len(set(keys)) == 2 and card.complete, f"episodes recorded: {keys}"
