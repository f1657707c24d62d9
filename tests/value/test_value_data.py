"""Episodes, text budgets, labels, balance, splits and the best-of-N metrics: no model needed."""

from __future__ import annotations

import json

import pytest

from orchard_cli.errors import UsageError
from orchard_cli.value import data, metrics
from orchard_cli.value.features import hunks
from orchard_cli.value.variants import changed_lines, split_hunks


def unified(path: str, old: str, new: str) -> str:
    import difflib

    body = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"a/{path}", f"b/{path}", n=3))
    return f"diff --git a/{path} b/{path}\n" + body if body else ""


def _ep(task: str, category: str, patch: str = "diff", resolved: bool = False, suite: str = "s") -> data.Episode:
    return data.Episode(suite=suite, task_id=task, category=category, resolved=resolved, patch=patch)


def test_labels_come_from_the_grader_and_errors_are_not_negatives() -> None:
    eps = [_ep("a", "resolved", resolved=True), _ep("a", "unresolved"), _ep("b", "empty_patch", ""),
           _ep("b", "patch_apply_failed"), _ep("c", "timeout"), _ep("c", "env_error"), _ep("d", "infra_error")]
    kept, dropped = data.labelled(eps)
    assert dropped == 2
    assert [e.label for e in kept] == [1, 0, 0, 0, 0]
    assert [e.applies for e in eps[:4]] == [True, True, False, False]


def test_balance_gives_the_classes_equal_weight_or_the_asked_ratio() -> None:
    labels = [1, 0, 0, 0, 0, 0]
    w = data.balance_weights(labels)
    pos = sum(x for x, y in zip(w, labels) if y)
    neg = sum(x for x, y in zip(w, labels) if not y)
    assert pos == pytest.approx(neg) and sum(w) == pytest.approx(len(labels))
    w2 = data.balance_weights(labels, neg_ratio=2.0)
    assert sum(x for x, y in zip(w2, labels) if not y) == pytest.approx(2 * sum(x for x, y in zip(w2, labels) if y))


def test_split_is_by_task_seeded_and_folds_cover_every_task_once() -> None:
    keys = {f"s::t{i}" for i in range(20)}
    train, held = data.split_by_task(keys, 0.3, seed=1)
    assert not train & held and train | held == keys and len(held) == 6
    assert data.split_by_task(keys, 0.3, seed=1) == (train, held)
    assert data.split_by_task(keys, 0.3, seed=2)[1] != held
    folds = [data.split_by_task(keys, 0.0, seed=3, fold=(k, 3))[1] for k in (1, 2, 3)]
    assert set().union(*folds) == keys and sum(map(len, folds)) == 20
    fixed = {"s::t0", "s::t1"}
    for k in (1, 2):
        tr, he = data.split_by_task(keys, 0.0, seed=3, fixed_train=fixed, fold=(k, 2))
        assert not he & fixed and fixed <= tr


def test_compose_keeps_the_patch_and_the_end_of_the_trajectory() -> None:
    ids = {"header": [0], "problem": list(range(100, 400)), "trajectory": list(range(1000, 1500)),
           "patch": list(range(5000, 5060))}
    seq, (a, b) = data.compose(ids, 200)
    assert len(seq) == 200
    assert seq[a:b] == ids["patch"]  # the whole patch fits its share
    traj = [t for t in seq if 1000 <= t < 1500]
    assert traj and traj[-1] == 1499 and traj == list(range(1500 - len(traj), 1500))  # the end
    prob = [t for t in seq if 100 <= t < 400]
    assert prob and prob[0] == 100  # the head of the statement
    # A short problem and no trajectory: their share goes to a long patch.
    seq, (a, b) = data.compose({"header": [0], "problem": [1, 2], "trajectory": [], "patch": list(range(9, 999))}, 100)
    assert b - a == 97 and seq[1:3] == [1, 2]


def test_render_messages_drops_the_system_prompt_and_keeps_tool_calls() -> None:
    messages = [{"role": "system", "content": "You are an agent " * 50},
                {"role": "user", "content": "Fix: mean() divides by zero\n\nrepo at /testbed"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat m.py"}'}}]},
                {"role": "tool", "tool_call_id": "1", "content": "x" * 5000 + "END"}]
    text = data.render_messages(messages, "Fix: mean() divides by zero")
    assert "You are an agent" not in text and "Fix: mean()" not in text
    assert '[call] bash({"command": "cat m.py"})' in text and text.endswith("END")
    assert len(text) < 2200


def test_a_run_folder_without_results_is_a_one_line_usage_error(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"schema_version": 1, "suite": "swe-lite"}))
    with pytest.raises(UsageError, match="no results.jsonl"):
        data.episodes_from_run(tmp_path)


def test_diff_helpers_read_hunks_and_lines() -> None:
    old = "def f(x):\n    return x - 1\n\n\ndef g():\n    return 2\n"
    new = "def f(x):\n    return x + 1\n\n\ndef g():\n    return 2\n"
    patch = unified("m.py", old, new)
    assert patch.startswith("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ ")
    assert changed_lines(patch) == {"m.py": {2}}
    (hunk,) = hunks(patch)
    assert [t for t, c in hunk.before if c] == ["    return x - 1"]
    assert [t for t, c in hunk.after if c] == ["    return x + 1"]
    assert unified("m.py", old, old) == ""
    two = unified("m.py", "a\n" * 3 + "b\n" * 20 + "c\n", "A\n" + "a\n" * 2 + "b\n" * 20 + "C\n")
    assert [len(h) for _, h in split_hunks(two)] == [2]
    # a removed line that starts with '--' is not a file header
    tricky = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n--- not a header\n+++ neither\n ok\n"
    (h,) = hunks(tricky)
    assert h.before[0] == ("-- not a header", True) and h.after[0] == ("++ neither", True)


def test_relevance_reads_what_the_problem_names() -> None:
    from orchard_cli.value.relevance import relevance

    problem = "camelize gives wrong results: `test_inflection.py::test_camelize_lower` fails (string index)"
    old = "import re\n\n\ndef camelize(string):\n    return string[1].lower()\n\n\ndef dasherize(word):\n    return word\n"
    fix = unified("m.py", old, old.replace("string[1]", "string[0]"))
    elsewhere = unified("m.py", old, old.replace("return word", "return word[::-1]"))
    scope_fix, ident_fix = relevance(problem, fix)
    scope_other, ident_other = relevance(problem, elsewhere)
    assert scope_fix == 1.0 and scope_other == 0.0  # the hunk defines / sits in camelize, not dasherize
    assert ident_fix == 1.0 and ident_other == 0.0  # 'string', 'lower' are named; 'word' is not
    assert relevance(problem, "") == [0.0, 0.0]
    header = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -10,3 +10,3 @@ def camelize(s):\n-    x = 1\n+    x = 2\n"
    assert relevance(problem, header)[0] == 1.0  # the enclosing function from git's hunk header
    assert relevance("", header) == [0.0, 0.0]


def test_best_of_n_strategies() -> None:
    groups = [
        (["p1", "p2", "p2"], [0, 1, 1], [0.1, 0.2, 0.9]),  # majority and value right, first wrong
        (["aaaa\n+x", "b"], [1, 0], [0.3, 0.7]),  # value wrong; shortest picks "b"
    ]
    rates = metrics.best_of_n(groups)
    assert rates["first"] == 0.5 and rates["majority"] == 1.0 and rates["value"] == 0.5
    assert rates["random"] == pytest.approx((2 / 3 + 1 / 2) / 2) and rates["oracle"] == 1.0
    assert metrics.auc([0.9, 0.8, 0.1], [1, 0, 0]) == 1.0 and metrics.auc([0.1], [1]) is None
    assert metrics.ece([0.0, 1.0], [0, 1]) == 0.0
    assert metrics.ece([0.9, 0.9], [0, 0]) == pytest.approx(0.9)


def test_trajectories_files_become_episodes(tmp_path) -> None:
    from orchard_cli.trajectory import Trajectory, TrajectoryOutcome, episode_key

    rows = []
    for attempt, (category, resolved) in enumerate([("resolved", True), ("infra_error", False)], start=1):
        rows.append(Trajectory(
            episode_id=episode_key("s", "t1", "bash", "m", attempt), task_id="t1", suite="s", harness="bash",
            model="m", attempt=attempt, problem_statement="mean() is wrong",
            messages=[{"role": "user", "content": "mean() is wrong"},
                      {"role": "assistant", "content": "fixed it"}],
            outcome=TrajectoryOutcome(resolved=resolved, category=category), patch="diff --git a/x b/x\n"))
    path = tmp_path / "traj.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in rows))
    eps = data.episodes_from_trajectories([path])
    assert [(e.task_key, e.harness, e.label) for e in eps] == [("s::t1", "bash", 1), ("s::t1", "bash", None)]
    assert eps[0].trajectory == "[assistant] fixed it"
    with pytest.raises(UsageError, match="does not exist"):
        data.episodes_from_trajectories([tmp_path / "nope.jsonl"])


def test_an_episode_run_again_by_resume_counts_once(tmp_path) -> None:
    """`distill --resume` appends a new line for an episode that ended in an error; the value
    model reads the latest line of each episode, as every other reader does."""
    from orchard_cli.trajectory import Trajectory, TrajectoryOutcome, episode_key

    def line(category: str, resolved: bool) -> str:
        return Trajectory(episode_id=episode_key("s", "t1", "bash", "m", 1), task_id="t1", suite="s",
                          harness="bash", model="m", attempt=1, problem_statement="p",
                          outcome=TrajectoryOutcome(resolved=resolved, category=category)).model_dump_json() + "\n"

    path = tmp_path / "traj.jsonl"
    path.write_text(line("infra_error", False) + line("resolved", True))
    eps = data.episodes_from_trajectories([path])
    assert [(e.category, e.label) for e in eps] == [("resolved", 1)]


def test_candidates_cli_writes_shuffled_predictions_files(tmp_path, monkeypatch, capsys) -> None:
    """`orchard rerank candidates` on a real git task (tests/tasks/swe_repo.py): every file is a
    predictions file, each task's gold patch sits in exactly one, near misses apply at the base."""
    import subprocess
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "tasks"))
    import swe_repo

    from orchard_cli.main import main
    from orchard_cli.runs.predictions import load_predictions

    inst = swe_repo.make_instances(tmp_path / "mirror")
    suite = tmp_path / "calc.jsonl"
    suite.write_text(json.dumps(inst["own"]) + "\n")
    monkeypatch.setenv("ORCHARD_SWE_REPOS", str(tmp_path / "mirror"))
    assert main(["rerank", "candidates", str(suite), "--out", str(tmp_path / "c"), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    kinds = json.loads((tmp_path / "c" / "kinds.json").read_text())["slots"]["acme__calc-2"]
    assert summary["files"] == len(kinds) and kinds.count("gold") == 1 and "near_miss" in kinds and "empty" in kinds
    repo = tmp_path / "mirror" / "acme" / "calc"
    for slot, kind in enumerate(kinds, start=1):
        patch = load_predictions(tmp_path / "c" / f"candidates-{slot}.jsonl")["acme__calc-2"].model_patch
        if kind == "gold":  # the same change, written by the same git diff as the others
            assert changed_lines(patch) == changed_lines(inst["gold"]) and "\nindex " in patch
        elif kind == "empty":
            assert patch == ""
        else:
            assert patch and changed_lines(patch) and "\nindex " in patch
        if patch:
            subprocess.run(["git", "apply", "--check", "-"], cwd=repo, input=patch, text=True, check=True)
    assert main(["rerank", "candidates", str(suite), "--out", str(tmp_path / "c")]) == 2  # not empty


def test_pairwise_head_learns_the_order_within_a_task_and_calibrates() -> None:
    """Simpson's paradox on purpose: across tasks, feature `after_logprob` goes with resolving (easy
    tasks read as natural code), within a task the resolved episode has the lower value. Pointwise
    fitting follows the across-task trend; the pairwise head learns the within-task order, and its
    calibrated probabilities still rank resolved above unresolved on average."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")
    from orchard_cli.value.model import SCALARS, HeadConfig, fit_head

    rng = np.random.default_rng(0)
    hidden, col = 2, 2 + list(SCALARS).index("after_logprob")
    rows, labels, groups = [], [], []
    for task in range(30):
        easy = task % 2 == 0  # easy tasks: three of four episodes resolve; hard: one of four
        level = 3.0 if easy else -3.0
        outcome = [1, 1, 1, 0] if easy else [1, 0, 0, 0]
        for y in outcome:
            x = rng.normal(scale=0.1, size=hidden + len(SCALARS))
            x[col] = level + (-0.5 if y else 0.5) + rng.normal(scale=0.05)
            rows.append(x)
            labels.append(y)
            groups.append(f"t{task}")
    x = np.stack(rows)
    weights = [1.0] * len(labels)
    point = fit_head(x, labels, weights, HeadConfig(objective="pointwise", features="all"), hidden, 0, groups=groups)
    pair = fit_head(x, labels, weights, HeadConfig(objective="pairwise", features="all"), hidden, 0, groups=groups)
    at = list(SCALARS).index("after_logprob")
    assert point.weight[at] > 0 > pair.weight[at]
    # the compact feature set leaves the absolute log-probabilities out: their weights stay zero
    compact = fit_head(x, labels, weights, HeadConfig(), hidden, 0, groups=groups)
    assert compact.weight[at] == 0.0
    logits = pair.logits(x)
    wins = sum(logits[i] > logits[j] for i in range(len(labels)) for j in range(len(labels))
               if groups[i] == groups[j] and labels[i] == 1 and labels[j] == 0)
    pairs = sum(1 for i in range(len(labels)) for j in range(len(labels))
                if groups[i] == groups[j] and labels[i] == 1 and labels[j] == 0)
    assert wins == pairs  # every within-task pair in the right order
    # without any task holding both outcomes there is nothing to contrast: pointwise is used
    alone = fit_head(x, labels, weights, HeadConfig(features="all"), hidden, 0, groups=[str(i) for i in range(len(labels))])
    assert np.allclose(alone.weight, point.weight, atol=1e-3)
    assert (alone.objective, pair.objective) == ("pointwise", "pairwise")


def test_each_agent_attempt_of_a_run_reads_its_own_trajectory(tmp_path) -> None:
    """An eval run of an agent writes every episode to one trajectories.jsonl: each graded attempt
    gets its own conversation (not the file's last one), and the problem statements come from the
    run's tasks.jsonl, without loading the suite (an unknown suite name here)."""
    import json

    from orchard_cli.records import write_json
    from orchard_cli.tasks.base import Task
    from orchard_cli.trajectory import Trajectory, TrajectoryOutcome, episode_key

    write_json(tmp_path / "config.json", {"schema_version": 1, "suite": "not-a-registered-suite",
                                          "source": "model:m@bash", "harness": "bash"})
    tasks = [Task(task_id=t, suite="not-a-registered-suite", family="calc", problem_statement=f"fix {t}")
             for t in ("a", "b")]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps({"schema_version": 1, **t.model_dump()}) + "\n"
                                                  for t in tasks))
    results, trajectories = [], []
    for task_id, words in (("a", "first answer"), ("b", "second answer")):
        results.append({"schema_version": 1, "instance_id": task_id, "attempt": 1, "category": "unresolved",
                        "trajectory": "trajectories.jsonl"})
        trajectories.append(Trajectory(
            episode_id=episode_key("s", task_id, "bash", "m", 1), task_id=task_id, suite="s", harness="bash",
            model="m", attempt=1, messages=[{"role": "assistant", "content": words}],
            outcome=TrajectoryOutcome(resolved=False, category="unresolved")).model_dump_json())
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    (tmp_path / "trajectories.jsonl").write_text("".join(t + "\n" for t in trajectories))
    _, eps = data.episodes_from_run(tmp_path)
    assert {e.task_id: (e.problem, e.trajectory) for e in eps} == {
        "a": ("fix a", "[assistant] first answer"), "b": ("fix b", "[assistant] second answer")}
