"""The family conformance suite (orchard_cli.tasks.conformance) for every family orchard ships:
the reference family and SWE (on swe-mini, in the session's shared swe-mini home)."""

from __future__ import annotations

import pytest

from orchard_cli.tasks.base import TaskSelection
from orchard_cli.tasks.conformance import CHECKS, FamilyRig

pytestmark = [pytest.mark.bwrap]

FAMILIES = {
    "calc": TaskSelection(suite="calc"),
    "swe": TaskSelection(suite="swe-mini", limit=2),
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
