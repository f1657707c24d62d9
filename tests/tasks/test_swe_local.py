"""Grading a real SWE-bench-format instance on the real local backend (bubblewrap).

The instance is built by `swe_repo`: a git repository with a bug, the fix as gold patch, a test
patch adding the FAIL_TO_PASS test. Both an eval_script instance (written for /testbed and
`conda activate testbed` like the dataset's) and an own-recipe instance are graded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from orchard_cli.env import SandboxHandle, connect
from orchard_cli.evidence import Evidence
from orchard_cli.tasks.registry import load_suite
from orchard_cli.tasks.swe import EnvironmentUnavailable
from orchard_cli.tasks.swe import environment as envs

sys.path.insert(0, str(Path(__file__).parent))
import swe_repo  # noqa: E402

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("swe-local")
    instances, data = swe_repo.write_suite(root)
    env = connect("local")
    yield {"root": root, "home": root / "home", "instances": instances, "data": data, "env": env}
    env.close()


@pytest.fixture
def home(world, monkeypatch):
    """One ORCHARD_HOME for the module, so the environment is built once."""
    monkeypatch.setenv("ORCHARD_HOME", str(world["home"]))
    return world["home"]


def load(world, **options):
    family, tasks = load_suite(str(world["data"]), repo_mirror=str(world["root"] / "mirror"))
    for key, value in options.items():
        setattr(family, key, value)
    return family, {t.task_id: t for t in tasks}


def grade(world, family, task, patch):
    with SandboxHandle.create(world["env"], family.task_spec(task, "local")) as sandbox:
        family.prepare(task, sandbox)
        return family.run_tests(task, Evidence(patch=patch), sandbox)


def test_environment_is_built_once_and_reused(world, home):
    family, tasks = load(world)
    first, second = tasks["acme__calc-1"], tasks["acme__calc-2"]
    key = family.env_key(first)
    assert key == family.env_key(second)  # same repo/version/recipe
    started = time.monotonic()
    with SandboxHandle.create(world["env"], family.task_spec(first, "local")) as sandbox:
        family.prepare(first, sandbox)
        cold = time.monotonic() - started
        head = sandbox.exec("git log --format=%s -n 2 && git status --porcelain && "
                            "python -c 'import calc, calc_extras, sys; print(calc.__file__, sys.prefix)'")
        assert head.ok, head.stderr
        assert head.stdout.splitlines()[:2] == ["SWE-bench", "calc with a bug in add"]
        assert "/testbed/calc/__init__.py /opt/miniconda3/envs/testbed" in head.stdout
    marker = family.environment_info(first)
    assert marker["exclude_newer"] == swe_repo.COMMITTED_AT  # the setup commit's day, not created_at
    assert Path(marker["python"]).name.startswith("3.10.")
    log_mtime = (envs.envs_root() / key / "build.log").stat().st_mtime
    started = time.monotonic()
    with SandboxHandle.create(world["env"], family.task_spec(second, "local")) as sandbox:
        family.prepare(second, sandbox)
        warm = time.monotonic() - started
    assert family.environment_info(second)["built_at"] == marker["built_at"]
    assert (envs.envs_root() / key / "build.log").stat().st_mtime == log_mtime
    assert warm < cold
    print(f"env build cold {cold:.2f}s (build {marker['build_seconds']}s), warm setup {warm:.2f}s")


def test_the_era_is_the_setup_commits_day_never_before_the_python(world, home):
    """Instances of a version share one environment, so its era date is its setup commit's day,
    whatever each instance's created_at (sphinx-9281's base commit needs a package released after
    the first instance of its version); a Python newer than that day moves the era to its release
    (a 2019 importlib-metadata breaks on Python 3.9: pytest-5631, -5809)."""
    family, tasks = load(world)
    task = tasks["acme__calc-1"]
    recipe = family.recipe(task)
    repository = family.repository(task)
    later = {**task.record, "created_at": "2024-09-09T00:00:00Z"}
    assert envs.era_date(recipe, task.record, repository) == envs.era_date(recipe, later, repository) \
        == swe_repo.COMMITTED_AT
    old = recipe.model_copy(update={"python": "3.9"})
    assert envs.era_date(old, {**task.record, "environment_setup_commit": "f" * 40}, None) == "2024-05-01T12:00:00Z"
    assert envs.era_date(old, {"created_at": "2019-07-19T20:13:12Z"}, None) == "2020-10-05T00:00:00Z"
    assert envs.era_date(old, {"created_at": "2021-03-01"}, None) == "2021-03-01T23:59:59Z"
    assert envs.era_date(recipe, task.record, repository, built_at="0" * 40) == swe_repo.COMMITTED_AT  # unknown
    synthesized = {**task.record, "source": {"package": "calc"}}  # its commits carry a placeholder date
    assert envs.era_date(recipe, synthesized, repository) == swe_repo.CREATED_AT
    pinned = recipe.model_copy(update={"exclude_newer": "2019-01-02T03:04:05+02:00"})
    assert envs.era_date(pinned, task.record, repository) == "2019-01-02T01:04:05Z"  # as given, in UTC


@pytest.mark.parametrize("instance", ["acme__calc-1", "acme__calc-2"])
@pytest.mark.parametrize("patch,category", [
    ("gold", "resolved"), ("", "empty_patch"), ("wrong", "unresolved"),
    ("breaks_p2p", "unresolved"), ("not_applying", "patch_apply_failed")])
def test_grading_categories(world, home, instance, patch, category):
    family, tasks = load(world)
    task = tasks[instance]
    outcome = grade(world, family, task, world["instances"][patch] if patch else "")
    assert outcome.category == category, (outcome.category, outcome.error, outcome.log[-2000:])
    assert outcome.resolved is (category == "resolved")
    if category in ("resolved", "unresolved"):
        tests = outcome.tests
        assert tests["log_valid"] and ">>>>> Start Test Output" in outcome.log
        f2p_ok = patch in ("gold", "breaks_p2p")
        assert tests["FAIL_TO_PASS"]["success" if f2p_ok else "failure"] == task.record["FAIL_TO_PASS"]
        p2p_failed = tests["PASS_TO_PASS"]["failure"]
        assert p2p_failed == (["test_mul (tests.test_calc.CalcTests)"] if patch == "breaks_p2p" else [])
    if patch == "gold":
        assert family.gold_patch(task) == world["instances"]["gold"]
        assert outcome.reward == 1.0


def test_timeout(world, home):
    family, tasks = load(world, test_timeout=6)
    outcome = grade(world, family, tasks["acme__calc-2"], world["instances"]["hang"])
    assert outcome.category == "timeout" and not outcome.resolved
    assert "6 s" in outcome.error


def test_eval_script_install_line_is_moved_to_build_time(world, home):
    family, tasks = load(world)
    outcome = grade(world, family, tasks["acme__calc-1"], world["instances"]["gold"])
    assert outcome.category == "resolved"
    assert "pip install" not in outcome.log  # the dataset-style script's install line was removed
    assert "+ conda activate testbed" in outcome.log


def test_missing_repository_and_commit_are_environment_errors(world, home, tmp_path):
    family, tasks = load(world)
    family.repo_mirror = str(tmp_path)
    with pytest.raises(EnvironmentUnavailable, match="has no acme/calc"):
        family.task_spec(tasks["acme__calc-1"], "local")
    family, tasks = load(world)
    task = tasks["acme__calc-2"]
    task.record["base_commit"] = "1" * 40
    with SandboxHandle.create(world["env"], family.task_spec(task, "local")) as sandbox:
        with pytest.raises(EnvironmentUnavailable, match="could not check out 111111111111"):
            family.prepare(task, sandbox)


def test_kubernetes_without_the_image_is_an_environment_error(world, home):
    family, tasks = load(world)  # docker builds the image instead: tests/tasks/test_swe_docker.py
    task = tasks["acme__calc-1"]
    task.record["image"] = "swebench/sweb.eval.x86_64.acme_1776_calc-1:latest"
    with pytest.raises(EnvironmentUnavailable, match="orchard/base"):
        family.task_spec(task, "kubernetes")


def test_a_bare_mirror_without_a_refs_folder_is_usable(world, home, tmp_path):
    """A read-only bare mirror that lost its empty refs/ (an archive drops empty folders; git
    then calls it 'not a git repository') is used through a fixed copy, as --repo-mirror's
    pytest mirror here needs."""
    import shutil
    import subprocess

    bare = tmp_path / "mirrors" / "acme" / "calc"
    shutil.copytree(world["root"] / "mirror" / "acme" / "calc", bare, symlinks=True)
    subprocess.run(["git", "-C", str(bare), "pack-refs", "--all"], check=True)
    shutil.rmtree(bare / ".git" / "refs")
    subprocess.run(["chmod", "-R", "a-w", str(bare)], check=True)
    try:
        assert subprocess.run(["git", "-C", str(bare), "log", "-1"], capture_output=True).returncode != 0
        family, tasks = load(world)
        family.repo_mirror = str(tmp_path / "mirrors")
        task = tasks["acme__calc-1"]
        assert grade(world, family, task, task.record["patch"]).category == "resolved"
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(bare)], check=True)


NETWORK_TESTS = '''

class NetworkTests(unittest.TestCase):
    def test_connect_times_out(self):
        import socket
        with self.assertRaises(socket.timeout):
            socket.create_connection(("10.255.255.1", 80), 0.5)

    def test_lookup(self):
        import socket
        socket.getaddrinfo("pypi.org", 443)
'''


def _with_network_tests(world, task, p2p: list[str]):
    """The task with NetworkTests appended by its test patch and `p2p` added to PASS_TO_PASS."""
    import json

    work = world["root"] / "mirror" / "acme" / "calc"
    text = swe_repo.TESTS.replace("from calc import mul, sub", "from calc import add, mul, sub").replace(
        "    def test_sub(self):", "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
                               "    def test_sub(self):") + NETWORK_TESTS
    before = task.record["PASS_TO_PASS"]
    before = before if isinstance(before, list) else json.loads(before)
    record = {**task.record, "test_patch": swe_repo.diff_of(work, "tests/test_calc.py", text),
              "PASS_TO_PASS": [*before, *p2p]}
    return task.model_copy(update={"record": record})


def test_grading_network_waits_like_a_networked_machine(world, home):
    """requests' connect-timeout tests expect a connect to an unroutable address to time out; in a
    sandbox with no route it fails at once. The grading sandbox drops such traffic instead: gold
    resolves, and a test that needs the internet is reported as needs_network with its id."""
    family, tasks = load(world)
    task = _with_network_tests(world, tasks["acme__calc-2"],
                               ["test_connect_times_out (tests.test_calc.NetworkTests)"])
    assert family.task_spec(task, "local").network == "drop"
    outcome = grade(world, family, task, world["instances"]["gold"])
    assert outcome.category == "resolved", outcome.log[-3000:]
    lookup = "test_lookup (tests.test_calc.NetworkTests)"
    task = _with_network_tests(world, tasks["acme__calc-2"], [lookup])
    outcome = grade(world, family, task, world["instances"]["gold"])
    assert outcome.category == "needs_network" and not outcome.resolved, outcome.log[-3000:]
    assert lookup in outcome.error


INTERNET_TESTS = '''

class InternetTests(unittest.TestCase):
    def fetch(self):
        import urllib.request
        with urllib.request.urlopen("http://{name}:{port}/", timeout=20) as reply:
            self.assertEqual(reply.read(), b"hello")

    def test_fetch_1(self):
        self.fetch()

    def test_fetch_2(self):
        self.fetch()

    def test_fetch_3(self):
        self.fetch()
'''
GRADE_IN_NAMESPACE = '''
import json, sys
from orchard_cli.env import SandboxHandle, connect
from orchard_cli.evidence import Evidence
from orchard_cli.tasks.registry import load_family
args = json.load(open(sys.argv[1]))
family = load_family("swe")
family.repo_mirror, family.network = args["mirror"], args["network"]
task = family.task(args["record"], "t")
env = connect("local")
try:
    with SandboxHandle.create(env, family.task_spec(task, "local")) as sandbox:
        family.prepare(task, sandbox)
        out = family.run_tests(task, Evidence(patch=args["patch"]), sandbox)
finally:
    env.close()
print(json.dumps({"category": out.category, "seconds": out.tests.get("seconds"), "error": out.error,
                  "log": (out.log or "")[-3000:]}))
'''


def test_grading_reaches_the_internet_only_under_network_full(world, home, tmp_path):
    """`--network full` grades with the network, as the official harness does: tests that fetch
    from an internet host (a DNS server and a web server on this host's loopback, standing in)
    pass. Without it the same tests are needs_network, in seconds: each lookup fails at once
    (no resolver waits), though the sandbox's resolv.conf names an unroutable nameserver.
    The grading runs in a mount namespace of its own whose /etc/resolv.conf names the stand-in."""
    import json
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.fail("this test needs root and unshare (util-linux): it binds its own resolv.conf")
    internet = swe_repo.LoopbackInternet()
    try:
        family, tasks = load(world)
        task = tasks["acme__calc-2"]
        work = world["root"] / "mirror" / "acme" / "calc"
        text = swe_repo.TESTS.replace("from calc import mul, sub", "from calc import add, mul, sub").replace(
            "    def test_sub(self):", "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
                                   "    def test_sub(self):") + INTERNET_TESTS.format(name=internet.name, port=internet.port)
        fetches = [f"test_fetch_{i} (tests.test_calc.InternetTests)" for i in (1, 2, 3)]
        record = {**task.record, "test_patch": swe_repo.diff_of(work, "tests/test_calc.py", text),
                  "PASS_TO_PASS": [*task.record["PASS_TO_PASS"], *fetches]}
        resolv = tmp_path / "resolv.conf"
        resolv.write_text(internet.resolv_conf)
        verdicts = {}
        for network in ("full", "none"):
            args = tmp_path / f"{network}.json"
            args.write_text(json.dumps({"mirror": str(world["root"] / "mirror"), "network": network,
                                        "record": record, "patch": world["instances"]["gold"]}))
            script = tmp_path / "grade.py"
            script.write_text(GRADE_IN_NAMESPACE)
            done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                   'mount --bind "$1" /etc/resolv.conf && exec "$2" "$3" "$4"', "sh",
                                   str(resolv), sys.executable, str(script), str(args)],
                                  capture_output=True, text=True, timeout=900,
                                  env={**os.environ, "ORCHARD_HOME": str(home)})
            assert done.returncode == 0, done.stderr[-3000:]
            verdicts[network] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        internet.close()
    full, offline = verdicts["full"], verdicts["none"]
    assert full["category"] == "resolved", full["log"]
    assert offline["category"] == "needs_network", offline["log"]
    assert all(f in offline["error"] for f in fetches)
    assert offline["seconds"] < 15, offline  # three lookups: 30 s and more if each waited


def test_an_environment_that_cannot_run_the_tests_is_env_error_never_unresolved(world, home):
    """A test run that gives no results is decided from the environment, not from its log: an
    environment without its test runner fails when it is built (env_error, naming the check);
    one without a module the tests import (not the repository's own) fails the instance's
    collection check, so gold there is env_error with the cause, not `unresolved`."""
    family, tasks = load(world)
    task = tasks["acme__calc-2"]
    record = task.record
    no_runner = {**record, "instance_id": "acme__calc-nopytest",
                 "environment": {**record["environment"], "test_cmd": "python -m pytest -rA tests/test_calc.py",
                                 "log_parser": "pytest"}}
    task = family.task(no_runner, "t")
    with pytest.raises(EnvironmentUnavailable, match="cannot run its tests: `python -c 'import pytest'` failed"):
        grade(world, family, task, world["instances"]["gold"])
    assert family.environment_info(task)["key"] == family.env_key(tasks["acme__calc-2"])  # built, shared

    work = world["root"] / "mirror" / "acme" / "calc"
    text = swe_repo.TESTS.replace("import calc_extras\n", "import calc_extras\nimport orchard_not_installed\n")
    lacking = {**record, "instance_id": "acme__calc-lacking",
               "test_patch": swe_repo.diff_of(work, "tests/test_calc.py", text)}
    outcome = grade(world, family, family.task(lacking, "t"), world["instances"]["gold"])
    assert outcome.category == "env_error", (outcome.category, outcome.error, outcome.log[-2000:])
    assert "No module named 'orchard_not_installed'" in outcome.error


def test_the_environment_check_leaves_the_tree_as_it_found_it(world, home):
    """The check collects the tests at the base commit, before the patch: it leaves no bytecode
    (a module edited by the patch to the same size within the same second would run from its
    stale .pyc: gold `a - b` -> `a + b`) and no file of the test patch behind."""
    from orchard_cli.tasks.swe import envcheck
    from orchard_cli.tasks.swe.instance import eval_script

    family, tasks = load(world)
    for task in tasks.values():
        with SandboxHandle.create(world["env"], family.task_spec(task, "local")) as sandbox:
            family.prepare(task, sandbox)
            check = envcheck.check_instance(sandbox, task.record, eval_script(task.record, family.recipe(task)),
                                            family.checks_dir(task))
            assert check["ok"] and check["checked"], check
            left = sandbox.exec("git status --porcelain --untracked-files=all; find . -name '*.pyc' | head -3")
            assert left.stdout.strip() == "", left.stdout


def test_the_check_resets_what_a_dataset_reset_line_does_not(world, home):
    """A dataset's eval script resets the test files with one `git checkout BASE files...` that
    names the files the test patch creates too; git then resets none of them (pylint-6528,
    sphinx-10614). The check still leaves the tree as setup left it, so the graded run applies
    the test patch cleanly and gold resolves."""
    family, tasks = load(world)
    task = tasks["acme__calc-1"]
    extra = "diff --git a/tests/test_extra.py b/tests/test_extra.py\nnew file mode 100644\n--- /dev/null\n" \
            "+++ b/tests/test_extra.py\n@@ -0,0 +1,6 @@\n+import unittest\n+\n+\n+class ExtraTests(unittest.TestCase):\n" \
            "+    def test_extra(self):\n+        self.assertTrue(True)\n"
    test_patch = task.record["test_patch"].rstrip("\n") + "\n" + extra
    script = "\n".join(line + " tests/test_extra.py" if line.startswith("git checkout") else
                       line + " tests.test_extra" if line == swe_repo.TEST_CMD else line
                       for line in swe_repo.dataset_style_script(task.record["base_commit"], test_patch).split("\n"))
    record = {**task.record, "instance_id": "acme__calc-newfile", "test_patch": test_patch, "eval_script": script,
              "PASS_TO_PASS": [*task.record["PASS_TO_PASS"], "test_extra (tests.test_extra.ExtraTests)"]}
    outcome = grade(world, family, family.task(record, "t"), world["instances"]["gold"])
    assert outcome.category == "resolved", (outcome.category, outcome.error, outcome.log[-3000:])


def test_a_patch_that_breaks_the_import_stays_unresolved(world, home):
    """A gold-like patch with a syntax error gives no test results either, but the environment
    passes its check: the patch is at fault (`unresolved`), as SWE-bench counts it."""
    family, tasks = load(world)
    broken = world["instances"]["gold"].replace("+    return a + b", "+    return a + b)")
    for task_id in ("acme__calc-1", "acme__calc-2"):
        outcome = grade(world, family, tasks[task_id], broken)
        assert outcome.category == "unresolved", (task_id, outcome.error, outcome.log[-2000:])
        assert outcome.tests["counts"]["FAIL_TO_PASS_success"] == 0


def test_a_patch_declaring_a_new_dependency_is_graded_with_it(world, home, monkeypatch, tmp_path):
    """SWE-bench installs the project again after the patch (pylint-4661's fix adds appdirs to
    setup.cfg and imports it). The grading sandbox stays offline; what the patched project
    declares is installed through a helper sandbox into a user site, so the fix resolves."""
    index = swe_repo.JsonIndex(tmp_path / "index")
    try:
        index.add("orchard-newdep", "1.0", "2024-01-01T00:00:00Z")
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        family, tasks = load(world)
        task = tasks["acme__calc-2"]
        work = world["root"] / "mirror" / "acme" / "calc"
        fix = swe_repo.diff_of(work, "calc/__init__.py", "import orchard_newdep\n\n\n" + swe_repo.BUGGY.replace(
            "return a - b", "return a + b if orchard_newdep.VERSION else None", 1))
        declare = swe_repo.diff_of(work, "setup.py", 'from setuptools import setup\n\n'
                                   'setup(name="calc", version="0.1", packages=["calc"], install_requires=["orchard-newdep"])\n')
        outcome = grade(world, family, task, fix + declare)
        assert outcome.category == "resolved", (outcome.category, outcome.error, outcome.log[-3000:])
        assert grade(world, family, task, fix).category == "unresolved"  # not declared: not installed
    finally:
        index.close()


def test_a_missing_system_package_is_the_environments_fault_only_with_evidence(world, home, monkeypatch):
    """sphinx 7.x's spec runs `apt-get install -y graphviz`, which no environment build runs: a
    local sandbox sees the host's packages. Without them a test that needs `dot` skips and gold
    fails (sphinx-10614): env_error, naming the package. A failure that ran (a wrong patch) stays
    unresolved, with a note; a host that has the package changes nothing."""
    from orchard_cli.outcome import Outcome
    from orchard_cli.tasks.swe.family import without_system_packages

    family, tasks = load(world)
    task = tasks["acme__calc-2"]
    recipe = family.recipe(task)

    def needing(*packages):
        line = (f"apt-get update && DEBIAN_FRONTEND=noninteractive apt-get -y install -o Dpkg::Options::=--force-confnew "
                f"{' '.join(packages)} >/dev/null 2>&1")
        return recipe.model_copy(update={"pre_install": [*recipe.pre_install, line]})

    assert envs.system_packages(needing("graphviz", "orchard-no-such-package")) == \
        ["graphviz", "orchard-no-such-package"]
    assert envs.missing_on_host(["bash", "orchard-no-such-package"]) == ["orchard-no-such-package"]
    skipped = Outcome(resolved=False, category="unresolved", log="SKIPPED [1] t.py:18: orchard-no-such-package is not available",
                      tests={"FAIL_TO_PASS": {"success": [], "failure": ["t.py::a"]},
                             "PASS_TO_PASS": {"success": [], "failure": ["t.py::b"]}, "unrun": ["t.py::a", "t.py::b"]})
    judged = without_system_packages(skipped, needing("orchard-no-such-package"))
    assert judged.category == "env_error" and "apt-get install orchard-no-such-package" in judged.error
    ran = skipped.model_copy(update={"tests": {**skipped.tests, "unrun": ["t.py::a"]}})  # b failed by running
    assert without_system_packages(ran, needing("orchard-no-such-package")).category == "unresolved"
    assert without_system_packages(skipped, needing("bash")) == skipped  # installed here

    monkeypatch.setattr(family, "recipe", lambda _task: needing("orchard-no-such-package"))
    outcome = grade(world, family, task, world["instances"]["wrong"])  # its test fails by running
    assert outcome.category == "unresolved" and "orchard-no-such-package" in outcome.error
    assert grade(world, family, task, world["instances"]["gold"]).category == "resolved"


def test_an_exact_pin_brings_its_dependencies_as_of_the_build(world, home, monkeypatch, tmp_path):
    """SWE-bench's specs pin some packages to releases newer than the instance (sphinx 3.5 pins
    tox==4.16.0, which needs cachetools>=5.3.3, three years newer). The pin's own dependencies
    must resolve as of the build, as the official images resolved them, not as of the instance's
    day: here the pin needs dep>=2, and dep 2 was published after the instance."""
    index = swe_repo.JsonIndex(tmp_path / "index")
    try:
        index.add("orchard-dep", "1.0", "2020-01-01T00:00:00Z")
        index.add("orchard-dep", "2.0", "2025-06-01T00:00:00Z")
        index.add("orchard-pin", "1.0", "2025-06-01T00:00:00Z", requires=("orchard-dep>=2",))
        monkeypatch.setenv("UV_DEFAULT_INDEX", index.url)
        family, tasks = load(world)
        task = tasks["acme__calc-2"]
        recipe = {**task.record["environment"], "packages": [*task.record["environment"]["packages"],
                                                             "orchard-pin==1.0"]}
        task = task.model_copy(update={"task_id": "acme__calc-pinned", "record": {**task.record, "environment": recipe,
                                                  "instance_id": "acme__calc-pinned"}})
        with SandboxHandle.create(world["env"], family.task_spec(task, "local")) as sandbox:
            family.prepare(task, sandbox)
            out = sandbox.exec("python -c 'import orchard_pin, orchard_dep; print(orchard_dep.VERSION)'")
        assert out.stdout.strip() == "2.0", out.stderr
    finally:
        index.close()
