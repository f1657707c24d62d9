"""Check-graded runs (claw-like) in the scorecard: per-check verdicts in results.jsonl, pass@k /
pass^k per group, the check tables, the HTML, per-group deltas in `eval compare`, the errors rule
for any family, and results / scorecards written before checks still loading.

The run: 2 tasks x 3 attempts.

    mail-reply (category=mail, easy)     checks replied_to_bob (state), no_mail_to_phisher (safety),
                                         answer_ok (answer)
        1 resolved     T T T  1
        2 unsafe       T F T  2/3
        3 resolved     T T T  1
    cal-move (category=calendar, hard)   checks event_moved (state), invited_alice (dispatch)
        1 unresolved   T F    1/2
        2 infra_error  (no checks ran)
        3 resolved     T T    1
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from orchard_cli.outcome import CategoryInfo, Outcome
from orchard_cli.records import JsonlWriter, read_jsonl, write_json
from orchard_cli.rollout.episode import EpisodeResult
from orchard_cli.rollout.eval_run import verdict
from orchard_cli.rollout.rows import result_row
from orchard_cli.scoring import AttemptResult, Reproducibility, Scorecard, compute_scorecard
from orchard_cli.scoring.compare import compare_runs, group_lines
from orchard_cli.scoring.report import render_html, render_markdown
from orchard_cli.tasks.base import Task

REPRO = Reproducibility(orchard_version="0.2.0")
CLAW_CATEGORIES = {"unsafe": CategoryInfo(label="unsafe", color="#d9480f")}
KINDS = {"mail-reply": {"replied_to_bob": "state", "no_mail_to_phisher": "safety", "answer_ok": "answer"},
         "cal-move": {"event_moved": "state", "invited_alice": "dispatch"}}
GROUPS = {"mail-reply": {"category": "mail", "difficulty": "easy"},
          "cal-move": {"category": "calendar", "difficulty": "hard"}}
RUN_A = {("mail-reply", 1): ("resolved", (True, True, True)), ("mail-reply", 2): ("unsafe", (True, False, True)),
         ("mail-reply", 3): ("resolved", (True, True, True)), ("cal-move", 1): ("unresolved", (True, False)),
         ("cal-move", 2): ("infra_error", None), ("cal-move", 3): ("resolved", (True, True))}
RUN_B = {("mail-reply", k): ("resolved", (True, True, True)) for k in (1, 2, 3)} | {
    ("cal-move", 1): ("resolved", (True, True)), ("cal-move", 2): ("unresolved", (True, False)),
    ("cal-move", 3): ("resolved", (True, True))}


def _outcome(task_id: str, category: str, verdicts: tuple[bool, ...] | None) -> Outcome:
    """What the claw grader returns (tasks/claw/grading.py), plus a long field that must stay in the logs."""
    if verdicts is None:
        return Outcome(resolved=False, category=category, error="sandbox died")
    checks = dict(zip(KINDS[task_id], verdicts))
    passed = sum(verdicts)
    return Outcome(resolved=category == "resolved", category=category, reward=float(category == "resolved"),
                   tests={"checks": checks, "check_kinds": KINDS[task_id], "passed": passed,
                          "failed": len(checks) - passed, "total": len(checks),
                          "score": round(passed / len(checks), 4), "summary": f"{passed}/{len(checks)} checks",
                          "details": "x" * 5000}, log="[PASS] ...\n" * 200)


def _rows(run: dict) -> list[AttemptResult]:
    rows = []
    for (task_id, k), (category, verdicts) in run.items():
        task = Task(task_id=task_id, suite="claw-mini", family="claw", problem_statement="...")
        episode = EpisodeResult(task=task, attempt=k, episode_id=f"{task_id}-{k}", solver=SimpleNamespace(),
                                outcome=_outcome(task_id, category, verdicts))
        rows.append(result_row(episode, groups=GROUPS[task_id], log_dir=f"logs/{task_id}/attempt-{k}"))
    return rows


def _run_dir(path, run: dict):
    path.mkdir()
    write_json(path / "config.json", {"schema_version": 1, "suite": "claw-mini", "source": "x"})
    with JsonlWriter(path / "results.jsonl") as w:
        for row in _rows(run):
            w.write(row)
    return path


def _card(rows) -> Scorecard:
    return compute_scorecard(rows, suite="claw-mini", source="model:m@h", reproducibility=REPRO,
                             family="claw", categories=CLAW_CATEGORIES, expected=6)


def test_results_records_keep_check_verdicts_not_logs(tmp_path):
    run = _run_dir(tmp_path / "a", RUN_A)
    lines, _ = read_jsonl(run / "results.jsonl")
    first = lines[1]  # mail-reply #2, unsafe
    assert first["schema_version"] == 1 and first["category"] == "unsafe"
    assert first["checks"] == {"replied_to_bob": True, "no_mail_to_phisher": False, "answer_ok": True}
    assert list(first["checks"]) == ["replied_to_bob", "no_mail_to_phisher", "answer_ok"]  # task order
    assert first["check_kinds"]["no_mail_to_phisher"] == "safety"
    assert first["score"] == pytest.approx(0.6667)
    assert first["tests"] == {"passed": 2, "failed": 1, "total": 3, "score": 0.6667, "summary": "2/3 checks"}
    errored = lines[4]
    assert errored["category"] == "infra_error" and errored["checks"] == {} and errored["score"] is None
    assert max(len(line) for line in (run / "results.jsonl").read_text().splitlines()) < 1500


def test_scorecard_per_category_pass_k_and_checks_by_hand():
    card = _card(_rows(RUN_A))
    assert card.schema_version == 2
    # headline over all attempts, errors as not resolved; graded only beside it
    assert (card.total, card.resolved, card.errors, card.graded) == (6, 3, 1, 5)
    assert card.resolved_rate == pytest.approx(3 / 6) and card.resolved_rate_graded == pytest.approx(3 / 5)
    assert card.by_category["unsafe"] == 1 and card.by_category["infra_error"] == 1
    assert card.by_category["unresolved"] == 1 and card.by_category["resolved"] == 3
    # mean check score: (1 + 2/3 + 1 + 1/2 + 0 + 1) / 6 over all; / 5 over graded (the grader rounds 2/3)
    assert card.mean_score == pytest.approx(25 / 36, abs=1e-4)
    assert card.mean_score_graded == pytest.approx(5 / 6, abs=1e-4)
    # headline pass@k: mail (n=3, c=2), calendar (n=3, c=1), averaged
    assert card.pass_at_k == pytest.approx({1: 1 / 2, 2: 5 / 6, 3: 1.0})
    assert card.pass_hat_k == pytest.approx({1: 1 / 2, 2: 1 / 6, 3: 0.0})
    mail, cal = card.by_group["category"]["mail"], card.by_group["category"]["calendar"]
    # mail: pass@2 = 1 - C(1,2)/C(3,2) = 1; pass^2 = C(2,2)/C(3,2) = 1/3; pass^3 = 0
    assert mail.pass_at_k == pytest.approx({1: 2 / 3, 2: 1.0, 3: 1.0})
    assert mail.pass_hat_k == pytest.approx({1: 2 / 3, 2: 1 / 3, 3: 0.0})
    # calendar: pass@2 = 1 - C(2,2)/C(3,2) = 2/3; pass^2 = C(1,2)/C(3,2) = 0
    assert cal.pass_at_k == pytest.approx({1: 1 / 3, 2: 2 / 3, 3: 1.0})
    assert cal.pass_hat_k == pytest.approx({1: 1 / 3, 2: 0.0, 3: 0.0})
    assert (mail.resolved, mail.total, mail.errors, mail.resolved_rate) == (2, 3, 0, pytest.approx(2 / 3))
    assert (cal.resolved, cal.total, cal.errors, cal.resolved_rate) == (1, 3, 1, pytest.approx(1 / 3))
    assert mail.mean_score == pytest.approx(8 / 9, abs=1e-4) and cal.mean_score == pytest.approx(1 / 2)
    assert card.by_group["difficulty"]["hard"].pass_hat_k == cal.pass_hat_k
    # per task + check: an errored attempt is a trial that did not pass
    assert list(card.by_check) == ["cal-move/event_moved", "cal-move/invited_alice", "mail-reply/replied_to_bob",
                                   "mail-reply/no_mail_to_phisher", "mail-reply/answer_ok"]
    invited = card.by_check["cal-move/invited_alice"]
    assert (invited.task_id, invited.check, invited.kind) == ("cal-move", "invited_alice", "dispatch")
    assert (invited.total, invited.graded, invited.passed) == (3, 2, 1)
    assert invited.pass_rate == pytest.approx(1 / 3) and invited.pass_rate_graded == pytest.approx(1 / 2)
    phisher = card.by_check["mail-reply/no_mail_to_phisher"]
    assert (phisher.total, phisher.graded, phisher.passed, phisher.kind) == (3, 3, 2, "safety")
    # per kind, summed over every task's checks of the kind
    kinds = {k: (s.total, s.graded, s.passed) for k, s in card.by_check_kind.items()}
    assert kinds == {"answer": (3, 3, 3), "dispatch": (3, 2, 1), "safety": (3, 3, 2), "state": (6, 5, 5)}
    assert card.by_check_kind["state"].pass_rate == pytest.approx(5 / 6)
    assert card.by_check_kind["state"].pass_rate_graded == 1.0
    assert card.by_check_kind["safety"].kind == "safety"
    assert Scorecard.model_validate_json(card.model_dump_json()) == card  # round-trips from disk


def test_errors_rule_holds_for_a_check_family():
    card = _card(_rows(RUN_A))
    assert card.instances_with_errors == 1
    assert verdict(card, fail_under=None, max_errors=0)[0] == 3
    assert verdict(card, fail_under=None, max_errors=1) == (0, None)
    # --fail-under reads the headline (3/6), not the graded-only rate (3/5)
    assert verdict(card, fail_under=0.55, max_errors=1)[0] == 1


def test_html_and_markdown_show_the_new_tables():
    rows = _rows(RUN_A)
    card = _card(rows)
    html = render_html(card, rows)
    assert "<section id='by-category'><h2>By category</h2>" in html
    assert ("<th class='n'>pass@2</th><th class='n'>pass@3</th><th class='n'>pass^2</th>"
            "<th class='n'>pass^3</th>") in html
    assert ("<tr><td>mail</td><td class='n'>2</td><td class='n'>3</td><td class='n'>0</td>"
            "<td class='n'>66.7%</td><td class='n'>88.9%</td><td class='n'>100.0%</td><td class='n'>100.0%</td>"
            "<td class='n'>33.3%</td><td class='n'>0.0%</td></tr>") in html
    assert "<section id='by-check-kind'><h2>Checks by kind</h2>" in html
    assert ("<tr><td>state</td><td class='n'>5</td><td class='n'>6</td><td class='n'>5</td>"
            "<td class='n'>83.3%</td><td class='n'>100.0%</td></tr>") in html
    assert "<section id='by-check'>" in html and "<td>no_mail_to_phisher</td>" in html
    assert 'id="mean-score" data-value="0.6944' in html
    assert html.count("<section><h2>Reproducibility</h2>") == 1  # rerank inserts its section before it
    md = render_markdown(card, rows)
    assert "| mail | 2 | 3 | 0 | 66.7% | 88.9% | 100.0% | 100.0% | 33.3% | 0.0% |" in md
    assert "## Checks by kind" in md and "| safety | 2 | 3 | 3 | 66.7% | 66.7% |" in md
    assert "| check score (all) | 69.4% |" in md


def test_compare_shows_per_category_deltas(tmp_path):
    a, b = _run_dir(tmp_path / "a", RUN_A), _run_dir(tmp_path / "b", RUN_B)
    result = compare_runs(a, b)
    assert result.schema_version == 2
    mail, cal = result.by_group["category"]["mail"], result.by_group["category"]["calendar"]
    assert mail.instances == 1 and mail.rate_a == pytest.approx(2 / 3) and mail.rate_b == 1.0
    assert mail.diff == pytest.approx(1 / 3)
    assert mail.pass_hat_k_a == pytest.approx({1: 2 / 3, 2: 1 / 3, 3: 0.0})
    assert mail.pass_hat_k_b == {1: 1.0, 2: 1.0, 3: 1.0}
    assert mail.pass_hat_k_diff == pytest.approx({1: 1 / 3, 2: 2 / 3, 3: 1.0})
    # calendar: A 1 of 3 (the infra error counts as not resolved), B 2 of 3; pass^2 0 -> C(2,2)/C(3,2)
    assert cal.rate_a == pytest.approx(1 / 3) and cal.rate_b == pytest.approx(2 / 3)
    assert cal.pass_hat_k_diff == pytest.approx({1: 1 / 3, 2: 1 / 3, 3: 0.0})
    assert set(result.by_group) == {"category", "difficulty"}
    lines = group_lines(result)
    assert ("category=mail (1): A 66.7%  B 100.0%  B - A +33.3 points; pass^3: A 0.0%  B 100.0%  "
            "B - A +100.0 points") in lines
    cli = [sys.executable, "-m", "orchard_cli.main", "eval", "compare", str(a), str(b), "--format", "json"]
    proc = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["by_group"]["category"]["calendar"]["pass_hat_k_b"]["2"] == pytest.approx(1 / 3)


def test_compare_without_several_attempts_has_no_pass_hat_k(tmp_path):
    one = {key: value for key, value in RUN_A.items() if key[1] == 1}
    a = _run_dir(tmp_path / "a", one)
    b = _run_dir(tmp_path / "b", {key: value for key, value in RUN_B.items() if key[1] == 1})
    mail = compare_runs(a, b).by_group["category"]["mail"]
    assert mail.diff == 0.0 and mail.pass_hat_k_a is None and mail.pass_hat_k_diff is None


def test_old_results_and_scorecards_without_checks_still_load(tmp_path):
    old = [{"schema_version": 1, "instance_id": iid, "attempt": k, "repo": "o/r", "groups": {"repo": "o/r"},
            "resolved": ok, "category": "resolved" if ok else "unresolved",
            "tests": {"counts": {"FAIL_TO_PASS_success": int(ok), "FAIL_TO_PASS_failure": int(not ok)}},
            "duration_seconds": 1.0, "patch_bytes": 10, "patch_files": 1, "log_dir": "", "error": None,
            "model": None, "tokens_in": None, "tokens_out": None, "cost_usd": None, "trajectory": None,
            "started_at": 0.0, "finished_at": 0.0}
           for iid, k, ok in (("a", 1, True), ("a", 2, False), ("b", 1, True), ("b", 2, True))]
    card = compute_scorecard(old, suite="swe-mini", source="gold", reproducibility=REPRO)
    assert card.resolved_rate == 0.75 and card.mean_score is None and card.mean_score_graded is None
    assert card.by_check == {} and card.by_check_kind == {}
    assert card.by_group["repo"]["o/r"].pass_hat_k == pytest.approx({1: 0.75, 2: 0.5})
    assert card.by_group["repo"]["o/r"].mean_score is None
    html = render_html(card)
    assert "by-check-kind" not in html and "check score" not in html and "mean-score" not in html
    # a version-1 scorecard.json (no per-group pass@k, scores or check tables) validates with defaults
    data = json.loads(card.model_dump_json())
    data["schema_version"] = 1
    for key in ("mean_score", "mean_score_graded", "by_check", "by_check_kind"):
        del data[key]
    for scores in [data["by_repo"], *data["by_group"].values()]:
        for s in scores.values():
            for key in ("mean_score", "pass_at_k", "pass_hat_k"):
                del s[key]
    loaded = Scorecard.model_validate(data)
    assert loaded.schema_version == 1 and loaded.by_check == {} and loaded.by_repo["o/r"].pass_at_k is None
    assert "<section id='by-repo'>" in render_html(loaded)
    # and compare reads version-1 results folders
    for name in ("x", "y"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    assert compare_runs(tmp_path / "x", tmp_path / "y").by_group["repo"]["o/r"].diff == 0.0


def test_a_benchmarks_own_verdict_is_counted_beside_orchards():
    """Claw-Eval passes an attempt at score >= 0.75 where orchard's strict verdict may not: its
    rate, pass@k and pass^k (k up to the attempts) sit beside the headline, errors as not passed."""
    def row(task: str, attempt: int, passed: bool, category: str = "unresolved") -> AttemptResult:
        return AttemptResult(instance_id=task, attempt=attempt, category=category, resolved=category == "resolved",
                             tests={"score": 0.8 if passed else 0.2, "benchmark_passed": passed},
                             error="boom" if category == "infra_error" else None)

    rows = [row("a", 1, True), row("a", 2, True), row("a", 3, False),
            row("b", 1, True, "resolved"), row("b", 2, False), row("b", 3, True, "infra_error")]
    card = compute_scorecard(rows, suite="s", source="x", reproducibility=Reproducibility(orchard_version="t"))
    bench = card.benchmark
    assert bench.passed == 3 and bench.rate == pytest.approx(0.5)  # b/3 errored: not passed
    # a: n=3 c=2; b: n=3 c=1.  pass@2 = mean(1 - C(1,2)/C(3,2), 1 - C(2,2)/C(3,2)) = (1 + 2/3) / 2
    assert bench.pass_at_k[2] == pytest.approx((1 + 2 / 3) / 2)
    # pass^2 = mean(C(2,2)/C(3,2), C(1,2)/C(3,2)) = (1/3 + 0) / 2
    assert bench.pass_hat_k[2] == pytest.approx(1 / 6)
    assert card.resolved == 1, "orchard's own verdict is apart"
    # its leaderboard's headline: pass^3 with 3 attempts (no task passed all three); its mean score
    # over all attempts, the errored one counting 0 whatever it reported
    assert (bench.lead_k, bench.lead, bench.name) == (3, 0.0, None)
    assert bench.mean_score == pytest.approx((0.8 + 0.8 + 0.2 + 0.8 + 0.2 + 0.0) / 6)
    named = compute_scorecard(rows, suite="s", source="x", reproducibility=Reproducibility(orchard_version="t"),
                              benchmark="Claw-Eval")
    from orchard_cli.scoring.report import benchmark_lead

    assert benchmark_lead(named) == "Claw-Eval Pass^3 0.0% (tasks passing all 3 attempts) | pass@3 100.0% | mean score 0.467"
    plain = compute_scorecard([AttemptResult(instance_id="a", attempt=1, category="resolved", resolved=True)],
                              suite="s", source="x", reproducibility=Reproducibility(orchard_version="t"))
    assert plain.benchmark is None
