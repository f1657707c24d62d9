"""Grading a patch the way SWE-bench grades it.

Run: the model patch is applied with the sandbox's apply_patch (git apply, --3way, patch --fuzz),
then the eval script runs (it resets the test files, applies the test_patch and prints the
'>>>>> Start/End Test Output' markers around the test command) with stdout and stderr in one log,
as SWE-bench runs it; the log is parsed by the repository's official swebench 4.1.0 parser.

Verdict (`verdict`): no valid result when the log holds one of swebench's failure codes or lacks
the markers; the parser reads the text between the markers (the whole log when that gives
nothing). A FAIL_TO_PASS test counts as passing only when it PASSED or XFAILed (a skipped or
missing one is a failure); a PASS_TO_PASS test is kept when it PASSED, XFAILed or was SKIPPED, and
fails when missing, FAILED or ERROR. An expected id that pytest truncated mid-parameter matches
logged ids by prefix when they all agree on pass/fail. Resolved iff every FAIL_TO_PASS passes and
every PASS_TO_PASS is kept. These are the rules of swebench 5.x's `get_eval_report`; 4.1.0 lets a
skipped FAIL_TO_PASS test drop out of the count, so orchard applies 5.x's stricter rule.
"""

from __future__ import annotations

import re
import time
from types import SimpleNamespace
from typing import Any

from orchard_cli.env import SandboxHandle
from orchard_cli.tasks.base import Outcome
from orchard_cli.tasks.swe import official

EVAL_SCRIPT = "/tmp/orchard-eval.sh"
EVAL_LOG = "/tmp/orchard-eval.log"
DEFAULT_TEST_TIMEOUT = 1800.0  # SWE-bench's default per-instance timeout
LOG_KEEP = 200_000  # characters of the log kept on the Outcome (head and tail)

PASSING = ("PASSED", "XFAIL")
FAILING = ("FAILED", "ERROR")


def parse_log(record: dict[str, Any], log: str, parser_name: str | None) -> tuple[dict[str, str], bool]:
    """(status map, valid) from a log, with the official parser of the instance."""
    if any(code in log for code in official.bad_codes()):
        return {}, False
    start, end = official.markers()
    if start not in log or end not in log:
        return {}, False
    parser = official.log_parser(parser_name, record["repo"])
    spec = SimpleNamespace(instance_id=record["instance_id"], repo=record["repo"],
                           version=record.get("version", ""))
    status_map = parser(log.split(start, 1)[1].split(end, 1)[0], spec)
    if not status_map:
        status_map = parser(log, spec)
    return status_map, True


def _lookup(case: str, status_map: dict[str, str]) -> str | None:
    if case in status_map:
        return status_map[case]
    if case.count("[") > case.count("]"):  # an id pytest cut short in the middle of a parameter
        found = [s for k, s in status_map.items() if k.startswith(case)]
        if found and len({s in PASSING for s in found}) == 1:
            return found[0]
    return None


def tests_report(status_map: dict[str, str], fail_to_pass: list[str],
                 pass_to_pass: list[str]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for name, cases, kept in (("FAIL_TO_PASS", fail_to_pass, PASSING),
                              ("PASS_TO_PASS", pass_to_pass, PASSING + ("SKIPPED",))):
        success, failure = [], []
        for case in cases:
            (success if _lookup(case, status_map) in kept else failure).append(case)
        report[name] = {"success": success, "failure": failure}
    report["counts"] = {f"{k}_{side}": len(report[k][side]) for k in ("FAIL_TO_PASS", "PASS_TO_PASS")
                        for side in ("success", "failure")}
    return report


def failing_tests(report: dict[str, Any]) -> list[str]:
    """The FAIL_TO_PASS and PASS_TO_PASS tests a tests report counts as failures."""
    return [t for kind in ("FAIL_TO_PASS", "PASS_TO_PASS") for t in (report.get(kind) or {}).get("failure", [])]


def verdict(record: dict[str, Any], log: str, parser_name: str | None = None) -> tuple[bool, dict[str, Any]]:
    """(resolved, tests report) for a finished eval log."""
    status_map, valid = parse_log(record, log, parser_name or record.get("log_parser"))
    report = tests_report(status_map, record.get("FAIL_TO_PASS", []), record.get("PASS_TO_PASS", []))
    report["log_valid"] = valid
    report["parsed_tests"] = len(status_map)
    # failing tests that did not run to a failure: skipped, or absent from the log
    report["unrun"] = [c for c in failing_tests(report) if _lookup(c, status_map) not in FAILING]
    resolved = (valid and not report["FAIL_TO_PASS"]["failure"]
                and not report["PASS_TO_PASS"]["failure"])
    return resolved, report


# What a failed name lookup prints (getaddrinfo's EAI_AGAIN / EAI_NONAME, as Python and curl say
# them): a test that needs the internet, which grading sandboxes reach only under --network full.
NO_INTERNET = re.compile(r"Temporary failure in name resolution|Name or service not known|"
                         r"nodename nor servname provided|Could not resolve host")
# A terminal colour code: tox runs pytest with colours, which wrap its section headers.
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def needs_internet(report: dict[str, Any], log: str) -> list[str]:
    """The failing tests, when every one of them failed on a name lookup: the failure report of
    each (unittest's `ERROR: name` / `FAIL: name` section, pytest's `____ name ____` one) shows a
    lookup failure. Empty when any failed otherwise, or has no report to read: then the instance
    is simply unresolved."""
    failing = failing_tests(report)
    if not failing or not NO_INTERNET.search(log):
        return []
    log = ANSI.sub("", log)
    headers = list(FAILURE_HEADER.finditer(log))
    ends = [h.start() for h in headers[1:]] + [len(log)]
    sections = [(h.group(1) or h.group(2), log[h.end():end]) for h, end in zip(headers, ends)]
    for test in failing:
        name = test.split("::")[-1].split(" (")[0].strip()
        mine = [body for header, body in sections if name in header]
        if not mine or not any(NO_INTERNET.search(body) for body in mine):
            return []
    return failing


# The header of one test's failure report: unittest's `ERROR: test_x (mod.Class)`, pytest's
# `____ Class.test_x[param] ____` (pytest centres the name in its line of underscores: a long name
# keeps one or two on each side, as requests-863's `_ RequestsTestSuite.test_post_fields_... __`);
# not the `_ _ _ _` line between the steps of one traceback (it ends in `_` at odd widths).
FAILURE_HEADER = re.compile(r"^(?:(?:ERROR|FAIL): (.+)|_+ ((?=[^_ ]).+?) _+)$", re.MULTILINE)


def clip(log: str) -> str:
    if len(log) <= LOG_KEEP:
        return log
    half = LOG_KEEP // 2
    return f"{log[:half]}\n[orchard: {len(log) - LOG_KEEP} characters of the log cut]\n{log[-half:]}"


def run_and_grade(record: dict[str, Any], sandbox: SandboxHandle, patch: str, script: str, *,
                  parser_name: str | None, timeout: float = DEFAULT_TEST_TIMEOUT,
                  workdir: str = "/testbed") -> Outcome:
    """Apply `patch`, run `script` (the eval script) and grade its log."""
    if not patch or not patch.strip():
        return Outcome(resolved=False, category="empty_patch", error="the patch is empty")
    try:
        applied = sandbox.apply_patch(patch, cwd=workdir)
    except Exception as exc:
        return Outcome(resolved=False, category="infra_error", error=f"apply_patch failed: {exc}")
    if not applied.applied:
        return Outcome(resolved=False, category="patch_apply_failed",
                       error="the patch applies with none of git apply, --3way, patch --fuzz",
                       log=clip(applied.output))
    started = time.monotonic()
    try:
        sandbox.write_file(EVAL_SCRIPT, script, 0o755)
        job = sandbox.exec(f"bash {EVAL_SCRIPT} > {EVAL_LOG} 2>&1", timeout=timeout)
        log = sandbox.read_file(EVAL_LOG).decode(errors="replace")
    except Exception as exc:
        return Outcome(resolved=False, category="infra_error", error=f"running the tests failed: {exc}")
    seconds = round(time.monotonic() - started, 2)
    if job.oom_killed:
        return Outcome(resolved=False, category="env_error", log=clip(log),
                       error=f"out of memory (limit {sandbox.info.spec.memory}) while running the tests")
    if job.timed_out:
        resolved, report = verdict(record, log, parser_name)
        report["seconds"] = seconds
        return Outcome(resolved=False, category="timeout", tests=report, log=clip(log),
                       error=f"the tests ran past {timeout:g} s")
    if job.did_not_run:
        return Outcome(resolved=False, category="infra_error", log=clip(log),
                       error=f"the sandbox could not run the tests: {job.error}")
    resolved, report = verdict(record, log, parser_name)
    report["seconds"] = seconds
    report["patch_method"] = applied.method
    error = None if report["log_valid"] else "the log has no valid test output (markers missing or a failure code)"
    category = "resolved" if resolved else "unresolved"
    offline = [] if resolved or not report["log_valid"] else needs_internet(report, log)
    if offline:
        category = "needs_network"
        error = (f"{len(offline)} test(s) failed looking up internet hosts, which grading sandboxes "
                 f"reach only under --network full: {', '.join(offline[:20])}{' ...' if len(offline) > 20 else ''}")
    return Outcome(resolved=resolved, category=category,
                   reward=1.0 if resolved else 0.0, tests=report, log=clip(log), error=error)


