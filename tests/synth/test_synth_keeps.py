"""Synthesis takes what a package gives (issue 32): one package that every old refusal rule
turned away, made into tasks.

widecalc's suite has what real packages have: most of its ids hold spaces the SWE-bench parser
cannot read back (parametrized on phrases), one test fails before any mutation (a platform it was
not written for), and some tests import a module only its `requirements-test.txt` names (PyYAML).
Its build backend asks for more through its hook than its [build-system] table says (as hatchling
asks for `editables`): the environment, built without isolation, installs it too.
SWE-bench's rule keeps what can be kept: unreadable and failing tests are left out of
PASS_TO_PASS and counted, the test requirements are installed, and the package gives tasks.
One synth run for the module; each test below fails without one of the three fixes.
"""

from __future__ import annotations

import json

import pytest
from synth_pkgindex import BACKEND, CALC, make_index, make_sdist

from orchard_cli.main import main

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

PHRASES = [f"phrase number {i}" for i in range(20)]
WIDE = {**CALC,
        "tests/test_phrases.py": f'''\
            import pytest

            from tinycalc import clamp


            @pytest.mark.parametrize("text", {PHRASES!r})
            def test_phrase(text):
                assert clamp(len(text), 0, 100) == len(text)
            ''',
        "tests/test_platform.py": '''\
            from tinycalc import mean


            def test_mean_on_a_platform_long_gone():
                assert mean([1, 3]) == 3
            ''',
        "tests/test_yaml.py": '''\
            import yaml

            from tinycalc import chunks, clamp


            def test_chunks_from_yaml():
                assert chunks(yaml.safe_load("[1, 2, 3]"), 2) == [[1, 2], [3]]


            def test_clamp_from_yaml():
                assert clamp(yaml.safe_load("12"), 0, 10) == 10
            ''',
        "requirements-test.txt": "PyYAML\n",
        # a backend that asks for more through its hook, as hatchling asks for `editables`
        "tiny_backend.py": BACKEND.format(name="widecalc", version="0.1").replace(
            "get_requires_for_build_wheel = get_requires_for_build_editable = get_requires_for_build_sdist = _none",
            "get_requires_for_build_wheel = get_requires_for_build_sdist = _none\n\n\n"
            "def get_requires_for_build_editable(config_settings=None):\n    return ['six']").replace(
            "def build_editable(directory, config_settings=None, metadata_directory=None):\n",
            "def build_editable(directory, config_settings=None, metadata_directory=None):\n    import six  # noqa: F401\n")}


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """(exit code, report, the suite's records) of one `orchard tasks synth` run."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("keeps")
    archives = [make_sdist(root / "dists", "widecalc", "0.1", WIDE)]
    patch = pytest.MonkeyPatch()
    patch.setenv("PIP_INDEX_URL", make_index(root, archives))
    patch.setenv("PIP_EXTRA_INDEX_URL", "")
    patch.setenv("PIP_FIND_LINKS", "")
    patch.setenv("ORCHARD_HOME", str(root / "home"))
    out, stdout, stderr = root / "suite.jsonl", io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(["tasks", "synth", "-p", "widecalc==0.1", "--n", "1", "--seed", "2", "--out", str(out),
                         "--format", "json", "--jobs", "1"])
    finally:
        patch.undo()
    assert code == 0, stderr.getvalue()[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records
    return json.loads(stdout.getvalue())["packages"][0], records


def _named(records) -> set[str]:
    return {t for r in records for t in r["FAIL_TO_PASS"] + r["PASS_TO_PASS"]}


def test_ids_the_parser_cannot_read_are_left_out_however_many(synth):
    package, records = synth
    assert package["unreadable"] == 20 and package["refused"] is None  # 20 of 35 ids
    assert not [t for t in _named(records) if "test_phrase" in t]


def test_a_test_failing_before_any_mutation_is_left_out(synth):
    package, records = synth
    assert package["failing"] == 1 and package["kept"] == 1
    assert not [t for t in _named(records) if "test_platform" in t]
    assert "tests/test_calc.py::test_mean" in _named(records)


def test_the_test_requirements_are_installed(synth):
    package, records = synth
    assert {"tests/test_yaml.py::test_chunks_from_yaml", "tests/test_yaml.py::test_clamp_from_yaml"} <= _named(records)
    assert "PyYAML" in records[0]["environment"]["packages"]
    assert package["tests"] == 14
