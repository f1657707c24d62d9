"""Whether an instance's environment can run its tests, decided from the environment itself.

A test run that gives no results is not a verdict on the patch by itself: a patch with a syntax
error or a broken import gives none either, and SWE-bench counts that as the patch's failure
(`unresolved`). So the environment is checked apart from any patch, twice:

* once per environment and test command, in the first sandbox set up from it (`check_runner`):
  the test command's runner is there (`pytest` imports, tox and the pytest it runs import, a
  repository script such as sympy's `bin/test` exists); when it is not, every instance of the
  environment is `env_error` at setup, before any agent runs;
* once per instance, in its grading sandbox before the patch is applied (`collect_script`): the
  instance's eval script with its test command made to *collect* the test files at the base
  commit with the test patch (pytest's `--collect-only`; for runners without one, importing the
  test modules). The check fails only for what the environment lacks: a runner that is not
  there, a pytest option no installed plugin knows, or a module that is neither installed nor
  part of the repository (`No module named 'pytest'`, `'hypothesis'`). A test module that
  cannot import a name of the repository itself fails at the base commit by design (the fix
  adds it) and passes the check.

`judge` applies the rule to a graded outcome: an unresolved verdict in an environment that
failed its check is `env_error` with the cause (`missing_dependency` when what is missing is a
package the build left out, era.py); a resolved one stands (the tests ran).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

from orchard_cli.outcome import Outcome

CHECK_SCRIPT = "/tmp/orchard-check.sh"
CHECK_LOG = "/tmp/orchard-check.log"
CHECK_TIMEOUT = 600.0
CHECK_FORMAT = 3  # 3: a console script whose entry point does not load is the environment's fault
MISSING_MODULE = re.compile(r"No module named '?([A-Za-z_][\w.]*)'?")
USAGE_ERROR = re.compile(r"(?m)^(?:ERROR: )?(?:usage: .*\n)?.*error: unrecognized arguments: (.+)$")
NOT_FOUND = re.compile(r"(?m)(?:^|: )(\S+): (?:command )?not found$")
# A console script of the environment (bin/pytest) that cannot load its entry point: written when
# the environment was built, at another commit than the instance's (pytest-7168: `pytest:console_main`
# is newer than its base commit's pytest), so the runner stops before any test is collected. Two
# shapes: setuptools' script (`load_entry_point(...)`, failing inside importlib.metadata or
# pkg_resources) and pip's (`from pytest import console_main`, failing in the script itself).
TRACEBACK = re.compile(r'(?m)^  File "(?P<script>/\S*/bin/[\w.-]+)", line \d+, in <module>\n'
                       r'(?P<frames>(?:^  .*\n)*?)^(?P<error>(?:AttributeError|ImportError): .+)$')
LOADER_FRAME = re.compile(r'(?m)^  File "[^"]*(?:importlib/metadata|importlib_metadata|pkg_resources)[^"]*"')
PIP_SCRIPT = re.compile(r"^    from [\w.]+ import \w+\n$")


def stale_script(log: str) -> tuple[str, str] | None:
    """(script, error) when a console script of the environment failed to load its entry point."""
    for match in TRACEBACK.finditer(log):
        frames, error = match.group("frames"), match.group("error")
        files = re.findall(r'(?m)^  File .*$', frames)
        loading = re.search(r"(?m), in \w*load_entry_point$", frames) and files and LOADER_FRAME.match(files[-1])
        pip = not files and PIP_SCRIPT.match(frames) and error.startswith("ImportError: cannot import name")
        if loading or pip:
            return match.group("script").rsplit("/", 1)[-1], error.strip()
    return None


IMPORT_MODULES = ("python -c 'import importlib, sys\nfor name in sys.argv[1:]:\n"
                  "    importlib.import_module(name)' ")


def _assignments(words: list[str]) -> tuple[list[str], list[str]]:
    """(leading VAR=value words, the rest) of a command."""
    i = 0
    while i < len(words) and re.match(r"^[A-Za-z_]\w*=", words[i]):
        i += 1
    return words[:i], words[i:]


def _module_of(path: str) -> str | None:
    if not path.endswith(".py"):
        return None
    return path[:-3].replace("/", ".").removesuffix(".__init__")


def collect_command(test_cmd: str) -> str | None:
    """The test command made to collect its tests without running them, or None when its runner
    has no way to (then only the runner is checked)."""
    try:
        env, words = _assignments(shlex.split(test_cmd))
    except ValueError:
        return None
    if not words:
        return None
    runner = words[0]
    if runner in ("pytest", "py.test", "tox") or words[:3] in (["python", "-m", "pytest"], ["python3", "-m", "pytest"]):
        return f"{test_cmd} --collect-only -q"
    if runner.endswith("bin/test"):  # sympy's runner: the test files as modules
        modules = [m for m in map(_module_of, words[1:]) if m]
        return " ".join([*map(shlex.quote, env), IMPORT_MODULES + " ".join(modules)]) if modules else None
    if words[:3] in (["python", "-m", "unittest"], ["python3", "-m", "unittest"]):
        modules = [w for w in words[3:] if not w.startswith("-")]
        modules = [_module_of(m) or m for m in modules]
        return " ".join([*map(shlex.quote, env), IMPORT_MODULES + " ".join(modules)]) if modules else None
    return None


def runner_check(test_cmd: str) -> str:
    """A shell line that fails when the test command's runner is not in the environment."""
    try:
        _, words = _assignments(shlex.split(test_cmd))
    except ValueError:
        words = test_cmd.split()
    if not words:
        return "true"
    runner = words[0]
    if runner in ("python", "python3") and len(words) > 2 and words[1] == "-m":
        return f"python -c {shlex.quote('import ' + words[2])}"
    if runner in ("pytest", "py.test"):
        return "python -c 'import pytest'"
    if runner == "tox":  # tox-current-env runs the tests with the environment's own pytest
        return "python -c 'import tox, pytest'"
    if "/" in runner:  # a script of the repository (sympy's bin/test, django's tests/runtests.py)
        return f"test -f {shlex.quote(runner)} && python -c 'import sys'"
    return f"command -v {shlex.quote(runner)} >/dev/null"


def test_command(script: str, start: str, end: str) -> tuple[int, int] | None:
    """The line span of the test command between the output markers of an eval script."""
    lines = script.splitlines()
    begin = next((i for i, line in enumerate(lines) if start in line), None)
    if begin is None:
        return None
    finish = next((i for i in range(begin + 1, len(lines)) if end in lines[i]), None)
    return (begin + 1, finish) if finish is not None and finish > begin + 1 else None


def script_test_command(script: str | None) -> str | None:
    """The test command of an eval script (its lines between the output markers), if any."""
    from orchard_cli.tasks.swe import official

    span = test_command(script or "", *official.markers())
    return " && ".join(l for l in (script or "").splitlines()[span[0]:span[1]] if l.strip()) if span else None


def added_files(patch: str) -> list[str]:
    """The files a patch creates."""
    return re.findall(r"^diff --git a/\S+ b/(\S+)\nnew file mode", patch, re.MULTILINE)


def collect_script(script: str, start: str, end: str, test_patch: str = "") -> str | None:
    """The eval script with its test command collecting instead of running (None: no way to),
    leaving the tree as setup left it (tracked files reset, the test patch's new files removed)."""
    span = test_command(script, start, end)
    if span is None:
        return None
    lines = script.splitlines()
    commands = [collect_command(line) for line in lines[span[0]:span[1]] if line.strip()]
    if not commands or any(c is None for c in commands):
        commands = [runner_check(line) for line in lines[span[0]:span[1]] if line.strip()]
    body = " && ".join(f"( {c} )" for c in commands)
    # The tree back as setup left it, whatever the script's own reset did (a dataset's reset
    # names the files the test patch creates, and `git checkout` then resets none of them): the
    # tracked files as of the setup commit, the test patch's new files removed.
    tidy = ["cd /testbed", "git diff --name-only -z HEAD | xargs -0 -r git checkout -q HEAD --"]
    if added_files(test_patch):
        tidy.append(f"rm -f -- {' '.join(shlex.quote(f) for f in added_files(test_patch))}")
    # No bytecode from the check: a module it compiled at the base commit, edited by the patch to
    # the same size within the same second, would be run from its stale .pyc.
    head = 1 if lines and lines[0].startswith("#!") else 0
    return "\n".join([*lines[:head], "export PYTHONDONTWRITEBYTECODE=1", *lines[head:span[0]], body,
                      'echo "orchard-check-exit=$?"', *lines[span[1]:], *tidy]) + "\n"


def cause(log: str, exit_code: int | None, repository_names: set[str]) -> str | None:
    """What the environment lacks, from a check's output; None when it lacks nothing."""
    for match in MISSING_MODULE.finditer(log):
        top = match.group(1).split(".")[0]
        if top not in repository_names:
            return f"the environment has no module {match.group(1)!r} (No module named {match.group(1)!r})"
    usage = USAGE_ERROR.search(log)
    if usage:
        return f"the test command's options need a plugin the environment lacks: unrecognized arguments: {usage.group(1).strip()[:200]}"
    missing = NOT_FOUND.search(log)
    if missing and exit_code == 127:
        return f"the environment has no {missing.group(1)!r} to run the tests with"
    if exit_code == 127:
        return "the environment has no program to run the tests with (exit 127)"
    stale = stale_script(log)
    if stale:
        return (f"the environment's {stale[0]} script (written when the environment was built) cannot load "
                f"its entry point at the base commit: {stale[1][:200]}")
    return None


def repository_names(listing: str) -> set[str]:
    """Top-level module names a repository provides (its root, src/ and lib/ listings)."""
    return {name.removesuffix(".py") for name in listing.split() if name and not name.startswith(".")}


def check_runner(sandbox: Any, command: str, root: Path) -> str | None:
    """Why the sandbox's environment cannot run `command` (its runner_check failed), or None;
    cached under `root` by command."""
    line = runner_check(command)
    path = cache_path(root, "runner", line)
    if path.is_file():
        result = json.loads(path.read_text())
    else:
        probe = sandbox.exec(f"cd /testbed && export PYTHONDONTWRITEBYTECODE=1 && {line}", timeout=300)
        if probe.did_not_run or probe.timed_out:
            return None
        said = " ".join((probe.stderr or probe.stdout or "").split())[-300:]
        result = {"command": command, "check": line, "ok": probe.ok, "output": said}
        _write(path, result)
    if result["ok"]:
        return None
    return f"the environment cannot run its tests: `{result['check']}` failed ({result['output'] or 'no output'})"


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{id(data)}.tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def cache_path(root: Path, instance_id: str, script: str) -> Path:
    digest = hashlib.sha256(f"{CHECK_FORMAT}\0{script}".encode()).hexdigest()[:12]
    return root / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', instance_id)}-{digest}.json"


def check_instance(sandbox: Any, record: dict[str, Any], script: str, root: Path) -> dict[str, Any]:
    """{"ok": bool, "cause": str | None}: the instance's tests collect in this sandbox (at the
    base commit, before any patch), cached under `root` by instance and script."""
    from orchard_cli.tasks.swe import official

    start, end = official.markers()
    check = collect_script(script, start, end, record.get("test_patch") or "")
    if check is None:
        return {"ok": True, "cause": None, "checked": False}
    path = cache_path(root, record["instance_id"], check)
    if path.is_file():
        return json.loads(path.read_text())
    sandbox.write_file(CHECK_SCRIPT, check, 0o755)
    job = sandbox.exec(f"bash {CHECK_SCRIPT} > {CHECK_LOG} 2>&1", timeout=CHECK_TIMEOUT)
    log = sandbox.read_file(CHECK_LOG).decode(errors="replace")
    if job.did_not_run or job.timed_out:
        return {"ok": True, "cause": None, "checked": False}  # no answer: the grade stands alone
    found = re.findall(r"orchard-check-exit=(\d+)", log)
    exit_code = int(found[-1]) if found else job.exit_code
    listing = sandbox.exec("ls -1 /testbed /testbed/src /testbed/lib 2>/dev/null", timeout=60).stdout
    section = log.split(start, 1)[-1].split(end, 1)[0]
    why = cause(section, exit_code, repository_names(listing))
    result = {"ok": why is None, "cause": why, "checked": True, "exit": exit_code}
    _write(path, result)
    return result


def _module_names(requirement: str) -> set[str]:
    """The module names a left-out requirement might go by ('pyqt5-sip' -> pyqt5_sip, pyqt5sip...)."""
    name = re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower()
    return {name, name.replace("-", "_"), name.replace("-", ""), name.replace("_", ""), name.split("-")[0]}


def lacking(text: str, left_out: list[str]) -> list[str]:
    """The left-out requirements whose module `text` says is missing (`No module named 'x'`)."""
    missing = {m.group(1).split(".")[0].lower() for m in MISSING_MODULE.finditer(text)}
    return [r for r in left_out if missing & _module_names(r)]


def judge(outcome: Outcome, check: dict[str, Any] | None, left_out: list[str] | None = None) -> Outcome:
    """An unresolved outcome whose tests miss a package the build left out (one the package index
    does not have: era.adjust) is `missing_dependency`; one in an environment that failed its
    check is `env_error`, with the cause; every other outcome stands."""
    if outcome.resolved or outcome.category != "unresolved":
        return outcome
    failed = check is not None and not check.get("ok", True)
    wanting = lacking(" ".join([check["cause"] if failed else "", outcome.log or ""]), left_out or [])
    if wanting:
        return outcome.model_copy(update={
            "category": "missing_dependency", "reward": 0.0,
            "error": f"the tests need {', '.join(wanting)}, which the environment's build left out: "
                     "the package index does not have it (a conda package of the instance's environment file)"})
    if not failed:
        return outcome
    return outcome.model_copy(update={
        "category": "env_error", "reward": 0.0,
        "error": f"the environment cannot run this instance's tests: {check['cause']} "
                 "(found collecting them at the base commit with the test patch, before the patch)"})
