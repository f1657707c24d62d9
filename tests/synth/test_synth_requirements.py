"""What a package needs to run its tests, from every place packages declare it (requirements.py).

Each case is a tree the way real packages lay theirs out; none of these requirements is in the
runtime metadata, so a package's tests fail to collect without them (issue 32: a package whose
tests need PyYAML from its `testing` extra was refused)."""

from __future__ import annotations

import textwrap

import pytest

from orchard_cli.tasks.synth import requirements


def _tree(root, files: dict[str, str]):
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
    return root


@pytest.mark.parametrize("files,expected", [
    ({"PKG-INFO": "Metadata-Version: 2.1\nName: p\nRequires-Dist: attrs\n"
                  "Requires-Dist: PyYAML; extra == 'testing'\nRequires-Dist: sphinx; extra == 'docs'\n"},
     ["attrs", "PyYAML", "pytest"]),
    # dev extras only when there is no test extra
    ({"PKG-INFO": "Metadata-Version: 2.1\nName: p\nRequires-Dist: freezegun; extra == 'dev'\n"},
     ["freezegun", "pytest"]),
    ({"PKG-INFO": "Metadata-Version: 2.1\nName: p\nRequires-Dist: a; extra == 'test-yaml'\n"
                  "Requires-Dist: b; extra == 'dev'\n"}, ["a", "pytest"]),
    # no Requires-Dist in PKG-INFO (a backend that writes none): pyproject.toml says it
    ({"PKG-INFO": "Metadata-Version: 2.1\nName: p\n", "pyproject.toml": """\
        [project]
        name = "p"
        dependencies = ["six>=1"]
        [project.optional-dependencies]
        tests = ["hypothesis", "p[yaml]"]
        [dependency-groups]
        test = ["pytest-mock", {include-group = "other"}]
        """}, ["six>=1", "hypothesis", "pytest-mock", "pytest"]),
    ({"setup.cfg": """\
        [options]
        install_requires =
            attrs
        [options.extras_require]
        testing =
            PyYAML>=5
        """}, ["attrs", "PyYAML>=5", "pytest"]),
    ({"setup.py": """\
        from setuptools import setup
        TESTS = ["freezegun"]
        setup(name="p", install_requires=["attrs"], tests_require=TESTS,
              extras_require={"docs": ["sphinx"]})
        """}, ["attrs", "freezegun", "pytest"]),
    ({"requirements-test.txt": "# tests\n-r requirements/base.txt\npretend==1.0.9  # pinned\n-e .\n",
      "requirements/base.txt": "simplejson\n", "requirements-dev.txt": "black\n"},
     ["simplejson", "pretend==1.0.9", "pytest"]),
    ({"tox.ini": """\
        [testenv]
        deps =
            pytest>=7
            py3{8,9}: mock
            -rrequirements/tests.txt
            {[base]deps}
        commands = pytest
        """, "requirements/tests.txt": "freezegun\n"}, ["freezegun", "pytest>=7", "mock"]),
    ({"noxfile.py": """\
        import nox
        @nox.session
        def tests(session):
            session.install(".", "pytest", "pytest-lazy-fixtures")
            session.install("-e", ".")
            session.run("pytest")
        """}, ["pytest", "pytest-lazy-fixtures"]),
    ({"pytest.ini": "[pytest]\naddopts = -n auto --timeout=30\nrequired_plugins = pytest-mock>=3\n"},
     ["pytest", "pytest-xdist", "pytest-timeout", "pytest-mock>=3"]),
    ({"pyproject.toml": "[tool.pytest.ini_options]\nasyncio_mode = \"auto\"\n"}, ["pytest", "pytest-asyncio"]),
])
def test_test_requirements_from_every_place_packages_declare_them(tmp_path, files, expected):
    assert requirements.test_requirements(_tree(tmp_path, files), "p") == expected


def test_a_package_whose_pytest_config_asks_for_coverage_gets_pytest_cov(tmp_path):
    """semver 3.0.2 and wcwidth 0.2.13 put `--cov` in their pytest addopts: without pytest-cov,
    pytest stops at its command line and synth finds one 'test' failing ('usage:')."""
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: p\nRequires-Dist: attrs\n")
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\naddopts =\n    --cov=p\n    --doctest-modules\n")
    assert requirements.test_requirements(tmp_path) == ["attrs", "pytest", "pytest-cov"]
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\n# addopts = --cov=p\naddopts = -ra\n")
    assert requirements.test_requirements(tmp_path) == ["attrs", "pytest"]
