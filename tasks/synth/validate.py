"""Validating a synthesized task with the SWE family's own setup and grader, in fresh sandboxes.

Valid means: the gold patch resolves (`family.grade`); the tree as given does not, with every
FAIL_TO_PASS test failing and every PASS_TO_PASS test kept. The second check runs the family's
eval script on the unpatched tree and reads it with the family's `verdict` (`grade` itself
answers 'empty_patch' for an empty patch without running anything).
"""

from __future__ import annotations

from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.errors import OrchardError
from orchard_cli.evidence import Evidence

UNPATCHED_LOG = "/tmp/orchard-synth-unpatched.log"
UNPATCHED_SCRIPT = "/tmp/orchard-synth-unpatched.sh"


def _sandbox(family: Any, env: Any, task: Any, backend: str) -> SandboxHandle:
    sandbox = SandboxHandle.create(env, family.task_spec(task, backend))
    try:
        family.prepare(task, sandbox)
    except BaseException:
        sandbox.destroy()
        raise
    return sandbox


def grade_unpatched(family: Any, task: Any, sandbox: SandboxHandle) -> tuple[bool, dict[str, Any]]:
    """(resolved, tests report) of the tree as it is, by the family's eval script and verdict."""
    from orchard_cli.tasks.swe.grading import DEFAULT_TEST_TIMEOUT, verdict
    from orchard_cli.tasks.swe.family import official_image
    from orchard_cli.tasks.swe.instance import eval_script

    recipe = family.recipe(task)
    script = eval_script(task.record, recipe, keep_install=official_image(sandbox))
    sandbox.write_file(UNPATCHED_SCRIPT, script, 0o755)
    job = sandbox.exec(f"bash {UNPATCHED_SCRIPT} > {UNPATCHED_LOG} 2>&1", timeout=DEFAULT_TEST_TIMEOUT)
    log = sandbox.read_file(UNPATCHED_LOG).decode(errors="replace")
    if job.timed_out or job.did_not_run:
        raise OrchardError(f"the unpatched tests did not finish ({job.error or job.status})")
    return verdict(task.record, log, recipe.log_parser)


def _gold(family: Any, env: Any, task: Any, backend: str) -> Any:
    with _sandbox(family, env, task, backend) as sandbox:
        return family.run_tests(task, Evidence(patch=task.record["patch"]), sandbox)


def _unpatched(family: Any, env: Any, task: Any, backend: str) -> tuple[bool, dict[str, Any]]:
    with _sandbox(family, env, task, backend) as sandbox:
        return grade_unpatched(family, task, sandbox)


def validate(family: Any, env: Any, record: dict[str, Any], backend: str = "local") -> str | None:
    """None when the task is valid, else why not (one line). Both checks run at once."""
    from concurrent.futures import ThreadPoolExecutor

    task = family.task(record, "synth-validate")
    family.repository(task)  # rebuilt once, before two sandboxes want it
    try:
        with ThreadPoolExecutor(2, thread_name_prefix="orchard-validate") as pool:
            gold_future = pool.submit(_gold, family, env, task, backend)
            unpatched_future = pool.submit(_unpatched, family, env, task, backend)
            gold = gold_future.result()
            resolved, report = unpatched_future.result()
    except OrchardError as exc:
        return f"could not grade: {exc.message}"
    if not gold.resolved:
        counts = gold.tests.get("counts", {})
        return f"the gold patch does not resolve it ({gold.category}; {gold.error or counts})"
    if resolved:
        return "it is resolved without any patch"
    if not report.get("log_valid"):
        return "the unpatched run gave no valid test log"
    if report["FAIL_TO_PASS"]["success"]:
        return f"FAIL_TO_PASS test passes without the fix (flaky?): {report['FAIL_TO_PASS']['success'][0]}"
    if report["PASS_TO_PASS"]["failure"]:
        return f"PASS_TO_PASS test fails without the fix: {report['PASS_TO_PASS']['failure'][0]}"
    return None
