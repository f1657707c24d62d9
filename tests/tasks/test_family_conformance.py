"""The family conformance suite (orchard_cli.tasks.conformance) for every family orchard ships:
the reference family, SWE (on swe-mini, in the session's shared swe-mini home), quiz, claw, web,
MiniWoB++ (a task with reference steps), Harbor (two tasks the local backend runs) and the live-web
suites (offline: no reference, each episode `needs_network`; gold refused in one line). Claw-Eval's
(no reference either) is in tests/tasks/claw_eval/, beside the checkout it needs."""

from __future__ import annotations

import json

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
    "claw": TaskSelection(suite="claw-mini", sample=3),  # spread over its groupings
    "web": TaskSelection(suite="web-mini", sample=2),
    "miniwob": TaskSelection(suite="miniwob", instances=["click-button"]),
    "harbor": TaskSelection(suite="harbor-mini", instances=["count-lines", "csv-sum"]),
    "live-web": TaskSelection(suite="webvoyager", dataset="WebVoyager_data.jsonl"),
}
WITHOUT_REFERENCES = {"live-web"}


@pytest.fixture(scope="module")
def rigs(tmp_path_factory, swe_mini_home):
    """One rig per family for the module: its gold and null runs are made once."""
    made: dict[str, FamilyRig] = {}

    def get(name: str) -> FamilyRig:
        if name not in made:
            folder = tmp_path_factory.mktemp(f"family-{name}")
            selection = FAMILIES[name]
            if selection.dataset:  # a data file of two tasks, written where the rig runs
                data = folder / selection.dataset
                data.write_text("".join(json.dumps({"id": f"Site--{i}", "ques": f"question {i}",
                                                    "web": "https://a.example/"}) + "\n" for i in range(2)))
                selection = selection.model_copy(update={"dataset": str(data)})
            made[name] = FamilyRig(selection=selection, folder=folder, reference=name not in WITHOUT_REFERENCES)
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
