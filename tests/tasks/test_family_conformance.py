"""The family conformance suite (orchard_cli.tasks.conformance) for every family orchard ships:
the reference family, SWE (on swe-mini, in the session's shared swe-mini home), quiz, and the
leased families on the version-2 seam, graded in place: claw (services leased per episode) and web
(the local apps and a browser). MiniWoB is not here yet: most of its tasks have no reference steps,
and the resume check runs the selection's first task without --instances. Live-web has no gold
and, offline, ends every episode needs_network: tests/tasks/web/test_live_web.py."""

from __future__ import annotations

import pytest

from orchard_cli.tasks import calc
from orchard_cli.family import SuiteInfo
from orchard_cli.selection import TaskSelection
from orchard_cli.tasks.conformance import CHECKS, FamilyRig

pytestmark = [pytest.mark.bwrap]

FAMILIES = {
    "calc": TaskSelection(suite="calc"),
    "swe": TaskSelection(suite="swe-mini", limit=2),
    "quiz": TaskSelection(suite="capitals", limit=3),
    "claw": TaskSelection(suite="claw-mini", sample=4),
    "web": TaskSelection(suite="web-mini", sample=2),
}


@pytest.fixture(scope="module")
def rigs(tmp_path_factory, swe_mini_home):
    """One rig per family for the module: its gold and null runs are made once."""
    made: dict[str, FamilyRig] = {}

    def get(name: str) -> FamilyRig:
        if name not in made:
            made[name] = FamilyRig(selection=FAMILIES[name], folder=tmp_path_factory.mktemp(f"family-{name}"))
        return made[name]

    return get


@pytest.mark.parametrize("check", sorted(CHECKS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family(family, check, rigs, swe_mini_home, monkeypatch):
    if family == "swe":  # environments and rebuilt repositories shared with the other swe-mini tests
        monkeypatch.setenv("ORCHARD_HOME", str(swe_mini_home))
    CHECKS[check](rigs(family))


class WrongGoldEpisode(calc.CalcEpisode):
    """Its gold patch fixes nothing (a comment), and its grader changes its mind between runs."""

    graded = 0

    def gold_patch(self):
        module = next(iter(self.task.record["fixed"]))
        files = self.task.record["files"]
        return calc.unified_diff(files, {module: files[module] + "# fixed?\n"})

    def run_tests(self, evidence, sandbox):
        type(self).graded += 1
        outcome = super().run_tests(evidence, sandbox)
        return outcome if type(self).graded <= 4 else outcome.model_copy(update={"category": "patch_apply_failed"})


class WrongGold(calc.CalcFamily):
    name = "calc-broken"
    suites = (SuiteInfo("calc-broken", "calc-broken", "builtin", "a family the conformance suite must reject"),)

    def episode(self, task, options):
        return WrongGoldEpisode(task, options)


def test_the_suite_rejects_a_broken_family(tmp_path, monkeypatch):
    from orchard_cli.families import families

    monkeypatch.setitem(families._targets, "calc-broken", WrongGold)
    rig = FamilyRig(selection=TaskSelection(suite="calc-broken"), folder=tmp_path)
    CHECKS["seam_complete"](rig)
    with pytest.raises(AssertionError, match="gold did not resolve"):
        CHECKS["gold_resolves"](rig)
    with pytest.raises(AssertionError, match="regrade changed verdicts"):
        CHECKS["regrade_equals_grade"](rig)
