"""Running a package's tests the way the SWE family grades them, to find mutants worth keeping.

The environment is the SWE family's own: a synthesized instance carries an `environment` recipe
(the package installed editable, its test extras and pytest, `pytest -rA`, the official pytest
log parser), so the family builds it, sets a sandbox up from it and grades in it. `Workbench`
holds one such sandbox at the clean commit and runs the eval script there, the whole suite or
some test files, after writing a mutated module; results are read by the family's own grader
functions (`grading.parse_log` / `verdict`), so the test ids we record are the ids it grades;
before the baseline it collects the suite in several fresh processes, and only ids that are read
back whole and stay put from process to process are FAIL_TO_PASS / PASS_TO_PASS (ids.py).
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchard_cli.env import Env, SandboxHandle
from orchard_cli.errors import OrchardError
from orchard_cli.tasks.base import Task
from orchard_cli.tasks.synth.ids import IdCheck, collect_command, test_file

# A fixed hash seed: parameter ids built from sets or dicts (isodate's, for one) are otherwise
# numbered differently on every run, and a test id that moves cannot be graded. A test module
# that cannot be imported (an optional dependency) is one failing test, not the end of the run.
TEST_CMD = "PYTHONHASHSEED=0 python -m pytest -rA -p no:cacheprovider --color=no --continue-on-collection-errors"
INSTALL = "python -m pip install -e ."
EVAL_SCRIPT = "/tmp/orchard-synth-eval.sh"
EVAL_LOG = "/tmp/orchard-synth-eval.log"
PASSING = ("PASSED",)
# Bytecode goes to a prefix in the sandbox's /tmp (the environment is mounted read-only); the
# repository's part of it is dropped before every run, so a mutated module is never read from a
# stale .pyc (same size, same second), while the environment's stays warm.
PYC_PREFIX = "/tmp/orchard-pyc"
PYC_HEADER = f"#!/bin/bash\nexport PYTHONPYCACHEPREFIX={PYC_PREFIX}\nrm -rf {PYC_PREFIX}/testbed\n"


def recipe(repo: Path, python: str, project: str | None = None) -> dict[str, Any]:
    """The `environment` field of the package's tasks (requirements.py: what its tests need)."""
    from orchard_cli.tasks.synth.requirements import test_requirements

    return {"python": python, "packages": test_requirements(repo, project), "install": [INSTALL],
            "test_cmd": TEST_CMD, "log_parser": "pytest"}


def ships_tests(repo: Path) -> bool:
    for path in repo.rglob("*.py"):
        name = path.name
        if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
            return True
    return False


@dataclass
class Run:
    """One run of the eval script: test ids and their status, as the family's grader reads them."""

    statuses: dict[str, str]
    seconds: float
    timed_out: bool = False
    valid: bool = True
    log: str = ""

    def failing(self, among: set[str]) -> set[str]:
        """Tests of `among` that did not pass (failed, errored, or vanished)."""
        return {t for t in among if self.statuses.get(t) not in PASSING}


@dataclass
class Baseline:
    reliable: set[str]
    """Passed in both runs on the clean tree, with an id that is read back whole and does not
    move (see ids.py): the only tests FAIL_TO_PASS / PASS_TO_PASS use."""
    flaky: set[str]
    """Passed in one run only."""
    broken: set[str]
    """Did not pass in either run."""
    seconds: float
    files: dict[str, set[str]] = field(default_factory=dict)
    """Test file -> its reliable tests."""
    unstable: set[str] = field(default_factory=set)
    """Passed on the first run, in a file whose ids move from one process to the next."""
    unreadable: set[str] = field(default_factory=set)
    """Passed, as the parser reads the log, under an id that is not one collected test's."""
    tests: int = 0
    """Distinct ids the runs' logs gave."""


class Workbench:
    """One sandbox set up by the SWE family for the clean tree of a package."""

    def __init__(self, family: Any, task: Task, env: Env, backend: str = "local") -> None:
        self.family = family
        self.task = task
        self.env = env
        self.backend = backend
        self.sandbox: SandboxHandle | None = None
        self.workdir = "/testbed"

    def __enter__(self) -> "Workbench":
        spec = self.family.task_spec(self.task, self.backend)
        self.sandbox = SandboxHandle.create(self.env, spec)
        try:
            self.family.prepare(self.task, self.sandbox)
        except BaseException:
            self.sandbox.destroy()
            raise
        self.workdir = self.sandbox.workdir
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.sandbox is not None:
            try:
                self.sandbox.destroy()
            except OrchardError:
                pass

    def write(self, path: str, text: str) -> None:
        assert self.sandbox is not None
        self.sandbox.write_file(f"{self.workdir}/{path}", text)

    def _exec(self, test_cmd: str, timeout: float) -> tuple[Any, str, float]:
        """The eval script with `test_cmd` as its test command: (job, log, seconds)."""
        from orchard_cli.tasks.swe.instance import eval_script

        assert self.sandbox is not None
        recipe = self.family.recipe(self.task).model_copy(update={"test_cmd": test_cmd})
        script = eval_script(self.task.record, recipe).replace("#!/bin/bash\n", PYC_HEADER, 1)
        self.sandbox.write_file(EVAL_SCRIPT, script, 0o755)
        started = time.monotonic()
        job = self.sandbox.exec(f"bash {EVAL_SCRIPT} > {EVAL_LOG} 2>&1", timeout=timeout)
        seconds = time.monotonic() - started
        log = self.sandbox.read_file(EVAL_LOG).decode(errors="replace")
        if job.did_not_run:
            raise OrchardError(f"the sandbox could not run the tests: {job.error}")
        return job, log, seconds

    def run(self, files: list[str] | None = None, timeout: float = 600.0) -> Run:
        """The eval script with the test command limited to `files` (all tests when None)."""
        from orchard_cli.tasks.swe.grading import parse_log

        test_cmd = self.family.recipe(self.task).test_cmd
        if files:
            test_cmd = f"{test_cmd} {' '.join(shlex.quote(f) for f in files)}"
        job, log, seconds = self._exec(test_cmd, timeout)
        statuses, valid = parse_log(self.task.record, log, "pytest")
        return Run(statuses, seconds, timed_out=job.timed_out, valid=valid, log=log)

    def check_ids(self, times: int, timeout: float) -> IdCheck:
        """The suite collected in `times` fresh processes, its ids judged (ids.py)."""
        from orchard_cli.tasks.swe import official
        from orchard_cli.tasks.synth import ids

        assert self.sandbox is not None
        recipe = self.family.recipe(self.task)
        self.sandbox.write_file(f"{ids.PLUGIN_DIR}/{ids.PLUGIN_NAME}.py", ids.PLUGIN)
        self._exec(collect_command(recipe.test_cmd, times), timeout)
        lists = []
        for i in range(times):
            try:
                lists.append(ids.read_ids(self.sandbox.read_file(ids.ids_file(i))))
            except OrchardError:
                lists.append(None)
        return IdCheck.of(lists, official.log_parser(recipe.log_parser, self.task.record["repo"]))

    def baseline(self, timeout: float, ids: IdCheck | None = None) -> tuple[Baseline, list[Run]]:
        ids = ids or IdCheck(None)
        runs = [self.run(timeout=timeout) for _ in range(2)]
        passed = [{t for t, s in r.statuses.items() if s in PASSING} for r in runs]
        seen = set(runs[0].statuses) | set(runs[1].statuses)
        both = passed[0] & passed[1]
        # a file whose test ids differ between two looks numbers them unstably (parameters from
        # a set, say): none of its ids can be trusted to mean the same test at grading time
        moving = ids.moving | {test_file(t) for t in set(runs[0].statuses) ^ set(runs[1].statuses)}
        unreadable = {t for t in passed[0] | passed[1] if not ids.readable(t)}
        shifted = {t for t in passed[0] | passed[1] if test_file(t) in moving}
        unstable = {t for t in passed[0] if test_file(t) in moving} - unreadable  # as run 1 numbered them
        reliable = both - unreadable - shifted
        flaky = (passed[0] | passed[1]) - both - unreadable - shifted
        broken = {t for t in seen - passed[0] - passed[1]
                  if runs[0].statuses.get(t) not in ("SKIPPED", "XFAIL")
                  and runs[1].statuses.get(t) not in ("SKIPPED", "XFAIL")}
        files: dict[str, set[str]] = {}
        for test in sorted(reliable):
            files.setdefault(test_file(test), set()).add(test)
        return Baseline(reliable, flaky, broken, max(r.seconds for r in runs), files,
                        unstable=unstable, unreadable=unreadable, tests=len(seen)), runs


def relevant_files(files: dict[str, set[str]], texts: dict[str, str], names: list[str]) -> list[str]:
    """Test files whose text mentions one of `names` as a word (the mutated function, its class,
    its module), most specific name first."""
    for name in names:
        if not name or name.startswith("<"):
            continue
        pattern = re.compile(rf"\b{re.escape(name)}\b")
        hits = sorted(f for f in files if pattern.search(texts.get(f, "")))
        if hits:
            return hits
    return []
