"""The family seam's core half (orchard_cli.family, outcome, prereqs, seam_v1): requirements are
checked by the core before any sandbox exists, categories the core owns cannot be declared again,
host prerequisites come from one table, and a version-1 family runs through the adapter with one
deprecation line."""

from __future__ import annotations

import pytest

from orchard_cli.env import connect
from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import MissingDependencyError, UsageError
from orchard_cli.family import (BaseEpisode, BaseFamily, Requirements, RunOptions, Suite, SuiteInfo, Task,
                                check_family)
from orchard_cli.scoring.rubric_judge import JudgeConfig
from orchard_cli.outcome import Outcome
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.rollout.solvers import EmptySolver
from orchard_cli.tasks.base import FamilyBase

pytestmark = pytest.mark.bwrap


class NetEpisode(BaseEpisode):
    """Needs what its task record says; its sandbox is a plain one."""

    specs = 0

    @property
    def requires(self) -> Requirements:  # type: ignore[override]
        return Requirements(**self.task.record)

    def spec(self, backend):
        type(self).specs += 1
        return SandboxSpec(memory="256Mi")

    def setup(self, sandbox, *, for_grading=False):
        return None

    def grade(self, evidence, sandbox):
        return Outcome(resolved=False, category="unresolved")


class NetFamily(BaseFamily):
    name = "net"
    grading = "in_place"
    suites = (SuiteInfo("net", "net", "builtin", "tasks with requirements"),)

    def load(self, info, source):
        return Suite(info=info, tasks=[])

    def episode(self, task, options):
        return NetEpisode(task, options)


def _run(needs: dict, options: RunOptions) -> Outcome:
    task = Task(task_id="t", suite="net", family="net", problem_statement="", record=needs)
    env = connect("local")
    try:
        before = NetEpisode.specs
        result = run_episode(Episode(task=task, attempt=1, solver=EmptySolver(), episode_id="e"),
                             family=NetFamily(), env=env, options=options)
        if result.outcome.category.startswith("needs_"):
            assert NetEpisode.specs == before, "a refused episode reserved a sandbox"
        return result.outcome
    finally:
        env.close()


def test_requirements_are_refused_before_any_sandbox_with_the_core_categories():
    judge = JudgeConfig(model="j", base_url="http://127.0.0.1:9/v1")
    assert _run({"network": True}, RunOptions()).category == "needs_network"
    assert _run({"judge": True}, RunOptions(network="full")).category == "needs_judge"
    assert _run({"user": True}, RunOptions(user=True)).category == "needs_user"  # the empty solver talks to no one
    assert _run({"missing_data": ["fixtures/a.csv"]}, RunOptions()).error == "missing: fixtures/a.csv"
    assert _run({"network": True, "judge": True}, RunOptions(network="full", judge=judge)).category == "unresolved"


def test_a_family_words_the_reason_and_the_user_is_checked_first():
    """The core decides; the family may say why in its own words (Claw-Eval names the service that
    searches the web). A multi-turn task without a user is needs_user whatever else it lacks, as
    the version-1 core checked the user before the family's own requirements."""
    worded = _run({"network": True, "reasons": {"needs_network": "service web_real searches the live web"}}, RunOptions())
    assert (worded.category, worded.error) == ("needs_network", "service web_real searches the live web")
    assert _run({"network": True, "reasons": {"needs_judge": "unused"}}, RunOptions()).error.startswith("it reaches")
    assert _run({"user": True, "network": True, "judge": True}, RunOptions()).category == "needs_user"


def test_check_family_refuses_missing_members_and_categories_the_core_owns():
    check_family(NetFamily())

    class NoEpisode(BaseFamily):
        name = "bare"

    with pytest.raises(UsageError, match="lacks load, episode"):
        check_family(NoEpisode())
    for category in ("resolved", "needs_network", "Bad-Name"):
        kind = type("Clash", (NetFamily,), {"categories": {category: None}})
        with pytest.raises(UsageError, match=f"declares category '{category}'"):
            check_family(kind())


def test_host_prerequisites_an_episode_names_come_from_one_table_with_their_install_line(monkeypatch):
    from orchard_cli.families import check_host

    task = Task(task_id="t", suite="net", family="net", problem_statement="", record={"host": ["git"]})
    check_host(NetFamily(), [task], RunOptions())  # git is here
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MissingDependencyError) as info:
        check_host(NetFamily(), [task], RunOptions(), what="net on the local backend")
    assert info.value.message.startswith("net on the local backend cannot run: git is not ready here")
    assert info.value.hint.startswith("apt-get install -y git")
    unknown = task.model_copy(update={"record": {"host": ["nope"]}})
    with pytest.raises(UsageError, match="needs the host prerequisite 'nope', which orchard_cli.prereqs does not know"):
        check_host(NetFamily(), [unknown], RunOptions())


class OldFamily(FamilyBase):
    """A version-1 family (the FamilyBase hooks), as third-party packages wrote them."""

    name = "old"
    grading = "in_place"
    suites = (SuiteInfo("old", "old", "builtin", "a family on the version-1 seam"),)
    released: list[str] = []

    def load(self, selection, suite):
        return [Task(task_id=f"o{i}", suite=suite.name, family=self.name, problem_statement="say hi")
                for i in range(3) if not selection.instances or f"o{i}" in selection.instances]

    def sandbox_spec(self, task, backend):
        return SandboxSpec(memory="256Mi", labels={"lease": task.task_id})

    def setup(self, task, sandbox):
        sandbox.write_file("hello.txt", "hi\n")

    def release(self, task, spec):
        type(self).released.append(spec.labels["lease"])

    def gold_solution(self, task):
        from orchard_cli.family import Gold

        return Gold(answer="hi")

    def grade(self, task, evidence, sandbox):
        ok = (evidence.answer or "") == "hi" and sandbox.read_file("hello.txt") == b"hi\n"
        return Outcome(resolved=ok, category="resolved" if ok else "unresolved")


def test_a_version_one_family_runs_through_the_adapter_and_says_so_once(monkeypatch, capsys):
    from orchard_cli import seam_v1
    from orchard_cli.families import families, load_family, load_suite
    from orchard_cli.rollout.solvers import GoldSolver

    monkeypatch.setitem(families._targets, "old", OldFamily)
    monkeypatch.setattr(seam_v1, "_warned", set())
    family, tasks = load_suite("old", slice="1:")
    load_family("old")
    err = capsys.readouterr().err
    assert err.count("uses the version-1 seam") == 1 and "What changed in version 2" in err
    assert isinstance(family, seam_v1.V1Family) and [t.task_id for t in tasks] == ["o1", "o2"]
    env = connect("local")
    try:
        result = run_episode(Episode(task=tasks[0], attempt=1, solver=GoldSolver(), episode_id="e"),
                             family=family, env=env, options=RunOptions())
    finally:
        env.close()
    assert result.outcome.category == "resolved" and OldFamily.released == ["o1"]
    load_family("calc")
    assert "version-1" not in capsys.readouterr().err  # orchard's own families never warn


class FreshOld(OldFamily):
    """A version-1 family graded in a fresh sandbox, noting when it reserves and gives back."""

    name = "fresh-old"
    grading = "fresh"
    events: list[str] = []

    def sandbox_spec(self, task, backend):
        type(self).events.append("spec")
        return super().sandbox_spec(task, backend)

    def release(self, task, spec):
        type(self).events.append("release")

    def grade(self, task, evidence, sandbox):
        ok = (evidence.answer or "") == "hi" and sandbox.read_file("hello.txt") == b"hi\n"
        return Outcome(resolved=ok, category="resolved" if ok else "unresolved")


def test_a_version_one_family_gives_back_the_attempts_lease_before_the_grading_sandbox_takes_one(monkeypatch):
    """As the version-1 core did: spec, release, spec (grading), release; never two leases at once
    (a family leasing from a pool sized to --workers would wait on itself)."""
    from orchard_cli import seam_v1
    from orchard_cli.rollout.solvers import GoldSolver

    class InSandbox(GoldSolver):  # an attempt made in a sandbox of its own, as an agent's is
        def needs_sandbox(self, family):
            return True

    monkeypatch.setattr(seam_v1, "_warned", set())
    family = seam_v1.adapt(FreshOld())
    task = Task(task_id="o0", suite="old", family="fresh-old", problem_statement="say hi")
    env = connect("local")
    try:
        result = run_episode(Episode(task=task, attempt=1, solver=InSandbox(), episode_id="e"),
                             family=family, env=env, options=RunOptions())
    finally:
        env.close()
    assert result.outcome.category == "resolved", result.outcome
    assert FreshOld.events == ["spec", "release", "spec", "release"]


def test_version_one_families_keep_their_patch_base_and_their_category_labels(monkeypatch):
    """A third-party family written as the version-1 docs taught (`class F(PatchFamily)` with load,
    sandbox_spec, setup, grade) still loads; and a family's own labels for requirement
    categories (SWE's needs_network, `requirement_labels`) stay on its scorecards."""
    from orchard_cli import seam_v1
    from orchard_cli.families import load_family
    from orchard_cli.tasks.patch import PatchFamily

    class Mine(PatchFamily):
        name = "mine"
        suites = (SuiteInfo("mine", "mine", "builtin", "a patch family on the version-1 seam"),)

        def load(self, selection, suite):
            return []

        def sandbox_spec(self, task, backend):
            return SandboxSpec()

        def setup(self, task, sandbox):
            return None

        def grade(self, task, evidence, sandbox):
            return Outcome(resolved=False, category="unresolved")

    monkeypatch.setattr(seam_v1, "_warned", set())
    adapted = seam_v1.adapt(Mine())
    assert isinstance(adapted, seam_v1.V1Family) and adapted.grading == "fresh"
    from orchard_cli.family import family_categories

    shown = family_categories(load_family("swe"))
    assert "needs_network" in shown and "internet" in shown["needs_network"].label


def test_a_setting_put_on_an_adapted_family_reaches_its_hooks():
    """Code written against a version-1 family sets its settings on the object `load_suite` returns
    (`family.repo_mirror = ...`, `family.test_timeout = 6`): the hooks must see them."""
    from orchard_cli import seam_v1
    from orchard_cli.tasks.patch import PatchFamily

    class Old(PatchFamily):
        name = "old"
        suites = (SuiteInfo("old", "old", "builtin", "a version-1 family with settings"),)
        test_timeout, repo_mirror = 30.0, None

        def load(self, selection, suite):
            return []

        def sandbox_spec(self, task, backend):
            return SandboxSpec()

        def setup(self, task, sandbox):
            return None

        def grade(self, task, evidence, sandbox):
            return Outcome(resolved=False, category="unresolved")

    old = seam_v1.adapt(Old())
    old.test_timeout = 6
    old.repo_mirror = "/nowhere"
    assert old.legacy.test_timeout == 6 and old.legacy.repo_mirror == "/nowhere"
    old.categories = dict(old.categories)  # the adapter's own members stay its own
    assert "categories" in vars(old)
