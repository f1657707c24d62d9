"""Environments built as of their era (issue 32), with repositories and packages these tests make.

* an exact pin whose sdist does `from setuptools import Feature` (gone since setuptools 46): its
  build tools are held to the era, as the official conda environments of the day had them; the
  project's version comes from setuptools-scm, in a checkout without tags (the depth-1 mirrors):
  it gets the dataset's version, said in the build log;
* a repository that compiles a C extension against numpy's headers, at the numpy of 2019: built
  without isolation against the environment's numpy (an isolated build takes today's, and the
  extension does not import at the era's);
* an environment file naming a package the index does not have (a conda one) and a pin of the era
  with no wheel for the interpreter: left out and moved, both named in env.json; a test that then
  fails for want of the left-out package is `missing_dependency`, not `unresolved`.

The sdists and wheels come from a package index on loopback (upload times included, as PyPI's);
setuptools, wheel and numpy come from PyPI, as for any environment.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from orchard_cli.env import SandboxHandle, connect
from orchard_cli.evidence import Evidence
from orchard_cli.tasks.registry import load_family

sys.path.insert(0, str(Path(__file__).parent))
import swe_repo  # noqa: E402

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

UNITTEST = "python -m unittest -v tests.test_it"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("swe-era")
    index = swe_repo.JsonIndex(root / "index")
    env = connect("local")
    patch = pytest.MonkeyPatch()
    patch.setenv("ORCHARD_HOME", str(root / "home"))
    patch.setenv("UV_INDEX", index.url)  # asked first; PyPI stays the default index
    yield {"root": root, "index": index, "env": env, "mirror": root / "mirror"}
    patch.undo()
    env.close()
    index.close()


def _family(world):
    family = load_family("swe")
    family.repo_mirror = str(world["mirror"])
    return family


def _record(repo: str, base: str, environment: dict, test_patch: str = "", f2p=(), p2p=()) -> dict:
    return {"instance_id": f"{repo.replace('/', '__')}-1", "repo": repo, "base_commit": base,
            "environment_setup_commit": base, "patch": "", "test_patch": test_patch, "version": "1.0",
            "created_at": "2019-06-01T00:00:00Z", "problem_statement": "", "hints_text": "",
            "FAIL_TO_PASS": list(f2p), "PASS_TO_PASS": list(p2p), "environment": environment}


def _setup(world, family, record, command: str):
    task = family.task(record, "era")
    with SandboxHandle.create(world["env"], family.task_spec(task, "local")) as sandbox:
        family.prepare(task, sandbox)
        return sandbox.exec(command, timeout=300), family.environment_info(task)


def test_an_exact_pins_sdist_builds_with_the_setuptools_of_its_era(world):
    world["index"].add_sdist("orchard-feature-pkg", "1.0", "2018-05-01T00:00:00Z", {
        "setup.py": "from setuptools import Feature, setup\n\n"
                    "setup(name='orchard-feature-pkg', version='1.0', py_modules=['orchard_feature_pkg'])\n",
        "orchard_feature_pkg.py": "FEATURE = 'built'\n"})
    # the project takes its version from git tags (setuptools-scm), and the checkout has none (as
    # the depth-1 mirrors): it gets the dataset's version, said in the build log, never a guess
    _, base = swe_repo.make_project(world["mirror"], "acme/feature", {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools", "wheel", "setuptools_scm"]\n',
        "setup.py": "from setuptools import setup\nsetup(name='feature-user', use_scm_version=True, py_modules=['user'])\n",
        "user.py": "import orchard_feature_pkg\n", "tests/__init__.py": "", "tests/test_it.py": ""})
    environment = {"python": "3.6", "packages": ["orchard-feature-pkg==1.0"], "exclude_newer": "2019-06-01",
                   "install": ["python -m pip install -e ."], "test_cmd": UNITTEST, "log_parser": "django"}
    job, marker = _setup(world, _family(world), {**_record("acme/feature", base, environment), "version": "1.0"},
                         "python -c 'import user, orchard_feature_pkg, pkg_resources; print(orchard_feature_pkg.FEATURE, "
                         "pkg_resources.get_distribution(\"feature-user\").version)'")
    assert job.stdout.split() == ["built", "1.0"], job.stdout + job.stderr
    assert marker["exclude_newer"] == "2019-06-01T23:59:59Z"
    from orchard_cli.tasks.swe import environment as envs

    assert "setuptools-scm gets the dataset version 1.0" in (envs.envs_root() / marker["key"] / "build.log").read_text()


C_SOURCE = textwrap.dedent('''\
    #define PY_SSIZE_T_CLEAN
    #include <Python.h>
    #include <numpy/arrayobject.h>

    static PyObject *size(PyObject *self, PyObject *args) {
        PyObject *array;
        if (!PyArg_ParseTuple(args, "O!", &PyArray_Type, &array)) return NULL;
        return PyLong_FromSsize_t(PyArray_SIZE((PyArrayObject *)array));
    }

    static PyMethodDef methods[] = {{"size", size, METH_VARARGS, "elements"}, {NULL, NULL, 0, NULL}};
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_core", NULL, -1, methods};

    PyMODINIT_FUNC PyInit__core(void) {
        import_array();
        return PyModule_Create(&module);
    }
    ''')


def test_a_c_extension_compiles_against_the_numpy_of_its_era(world):
    _, base = swe_repo.make_project(world["mirror"], "acme/vec", {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools", "wheel", "numpy"]\n'
                          'build-backend = "setuptools.build_meta"\n',
        "setup.py": "import numpy\nfrom setuptools import Extension, setup\n\n"
                    "setup(name='vec', version='1.0', packages=['vec'], ext_modules=[Extension(\n"
                    "    'vec._core', ['vec/_core.c'], include_dirs=[numpy.get_include()])])\n",
        "vec/__init__.py": "from vec._core import size\n", "vec/_core.c": C_SOURCE,
        ".gitignore": "build/\n*.so\n*.egg-info/\n", "tests/__init__.py": "", "tests/test_it.py": ""})
    environment = {"python": "3.7", "packages": ["numpy"], "exclude_newer": "2019-03-01",
                   "install": ["python -m pip install -e ."], "test_cmd": UNITTEST, "log_parser": "django"}
    job, _ = _setup(world, _family(world), _record("acme/vec", base, environment),
                    "python -c 'import numpy, vec; print(numpy.__version__, vec.size(numpy.zeros((3, 4))))'")
    assert job.ok, job.stdout + job.stderr
    version, size = job.stdout.split()
    assert version.startswith("1.16.") and size == "12"


def test_what_the_index_lacks_is_left_out_and_named_and_a_pin_without_a_wheel_moves(world):
    index = world["index"]
    index.add("orchard-binary", "1.0", "2019-01-01T00:00:00Z", tag="cp27-cp27mu-manylinux1_x86_64")
    index.add("orchard-binary", "1.1", "2019-02-01T00:00:00Z")
    tests = textwrap.dedent('''\
        import unittest


        class ItTests(unittest.TestCase):
            def test_binary(self):
                import orchard_binary
                self.assertEqual(orchard_binary.VERSION, "1.1")
        ''')
    work, base = swe_repo.make_project(world["mirror"], "acme/conda", {
        "setup.py": "from setuptools import setup\nsetup(name='conda-user', version='1.0', py_modules=[])\n",
        "environment.yml": "name: testbed\ndependencies:\n  - python=3.10\n  - orchard-conda-only=2.0\n"
                           "  - pip:\n    - orchard-binary==1.0\n",
        "tests/__init__.py": "", "tests/test_it.py": tests})
    needing = tests + "\n    def test_conda_only(self):\n        import orchard_conda_only  # noqa: F401\n"
    test_patch = swe_repo.diff_of(work, "tests/test_it.py", needing)
    environment = {"python": "3.10", "conda_files": ["environment.yml"], "exclude_newer": "2019-06-01",
                   "install": ["python -m pip install -e ."], "test_cmd": UNITTEST, "log_parser": "django"}
    record = _record("acme/conda", base, environment, test_patch,
                     f2p=["test_conda_only (tests.test_it.ItTests)"], p2p=["test_binary (tests.test_it.ItTests)"])
    family = _family(world)
    job, marker = _setup(world, family, record, "python -c 'import orchard_binary; print(orchard_binary.VERSION)'")
    assert job.stdout.strip() == "1.1", job.stderr
    assert marker["era"]["left_out"] == ["orchard-conda-only==2.0.*"]
    assert marker["era"]["moved"] == {"orchard-binary==1.0": "orchard-binary==1.1"}
    task = family.task(record, "era")
    noop = swe_repo.diff_of(work, "setup.py", "from setuptools import setup\nsetup(name='conda-user', version='1.0')\n")
    with SandboxHandle.create(world["env"], family.task_spec(task, "local")) as sandbox:
        family.prepare(task, sandbox)
        outcome = family.run_tests(task, Evidence(patch=noop), sandbox)
    assert outcome.category == "missing_dependency", (outcome.category, outcome.error, outcome.log[-2000:])
    assert "orchard-conda-only" in outcome.error
