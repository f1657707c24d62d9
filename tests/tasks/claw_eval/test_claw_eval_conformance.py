"""The family conformance suite on Claw-Eval's mini checkout (beside the environment it needs): no
task has a reference solution, so gold is refused in one line and the checks read the null run,
whose episodes end unresolved or refused for what the run lacks (a user, a judge, the network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchard_cli.selection import TaskSelection
from orchard_cli.tasks.conformance import CHECKS, FamilyRig

MINI = Path(__file__).resolve().parent / "mini"


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    return FamilyRig(selection=TaskSelection(suite="claw-eval", dataset=str(MINI)),
                     folder=tmp_path_factory.mktemp("family-claw-eval"), reference=False)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_claw_eval(check, rig, mini):
    CHECKS[check](rig)


def test_the_null_run_reaches_every_ending(rig, mini):
    categories = {row.category for row in rig.results("empty")}
    assert {"unresolved", "needs_user", "needs_judge", "needs_network"} <= categories, categories
