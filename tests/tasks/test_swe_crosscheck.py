"""Cross-check: orchard's verdicts against the official grader of the OTHER major version.

orchard parses logs with swebench 4.1.0's parsers and applies SWE-bench's rules itself. Here the
same logs go to swebench 5.x's own `get_eval_report`, run in a virtual environment of its own
(created once, cached under pytest's cache dir) through a subprocess; every verdict and every
per-test success/failure list must agree.
"""

from __future__ import annotations

import io
import sys

import pytest

from orchard_cli.tasks.swe.grading import needs_internet, verdict

START, END = ">>>>> Start Test Output", ">>>>> End Test Output"


def wrap(body: str, before: str = "+ source /opt/miniconda3/bin/activate\n") -> str:
    return f"{before}+ : '{START}'\n{body}\n+ : '{END}'\n+ git checkout abc tests\n"


def pytest_log(lines: list[str]) -> str:
    return wrap("============================= test session starts ==============================\n"
                "collected 6 items\n\ntests/test_a.py ..F.s\n\n"
                "=========================== short test summary info ============================\n"
                + "\n".join(lines) + "\n========================= 1 failed, 4 passed in 0.52s =========================")


A, B, C = "tests/test_a.py::test_one", "tests/test_a.py::test_two", "tests/test_a.py::test_three"
D = "tests/test_a.py::test_param[log(photon)-x]"
DJ_A, DJ_B = "test_order_by (expressions.tests.BasicExpressionsTests)", \
    "test_filter (expressions.tests.BasicExpressionsTests)"


def django_log(a: str, b: str, extra: str = "") -> str:
    return wrap("Testing against Django installed in '/testbed/django'\nImporting application expressions\n"
                f"Skipping setup of unused database(s): other.\n{DJ_A} ... {a}\n{DJ_B} ... {b}\n{extra}"
                "\n----------------------------------------------------------------------\n"
                "Ran 2 tests in 0.012s\n")


def sympy_log(results: dict[str, str]) -> str:
    body = "\n".join(f"{name} {status}" for name, status in results.items())
    return wrap("============================= test process starts ==============================\n"
                "executable:         /opt/miniconda3/envs/testbed/bin/python  (3.9.20-final-0) [CPython]\n"
                f"sympy/geometry/tests/test_point.py[{len(results)}] \n{body}\n"
                "________________________________________________________________________________\n"
                "== tests finished: 2 passed, 1 failed, in 1.00 seconds ==")


CASES = [
    # (name, repo, log_parser, F2P, P2P, log)
    ("pytest all pass", "pytest-dev/pytest", "parse_log_pytest", [A], [B, C],
     pytest_log([f"PASSED {A}", f"PASSED {B}", f"PASSED {C}"])),
    ("pytest F2P fails", "pytest-dev/pytest", "parse_log_pytest", [A], [B],
     pytest_log([f"PASSED {B}", f"FAILED {A} - AssertionError: assert 1 == 2"])),
    ("pytest F2P skipped", "pytest-dev/pytest", "parse_log_pytest", [A], [B],
     pytest_log([f"PASSED {B}", f"SKIPPED {A}"])),
    ("pytest P2P skipped", "pytest-dev/pytest", "parse_log_pytest", [A], [B],
     pytest_log([f"PASSED {A}", f"SKIPPED {B}"])),
    ("pytest F2P missing", "pytest-dev/pytest", "parse_log_pytest", [A, C], [B],
     pytest_log([f"PASSED {A}", f"PASSED {B}"])),
    ("pytest F2P xfail", "pytest-dev/pytest", "parse_log_pytest", [A], [B],
     pytest_log([f"XFAIL {A} - reason: known", f"PASSED {B}"])),
    ("pytest P2P error", "pytest-dev/pytest", "parse_log_pytest", [A], [B],
     pytest_log([f"PASSED {A}", f"ERROR {B} - fixture 'tmpdir' not found"])),
    ("pytest collection error", "pydata/xarray", "parse_log_xarray", [A], [B],
     wrap("collected 0 items / 1 error\n\n==================================== ERRORS ====================================\n"
          "______________________ ERROR collecting tests/test_a.py _______________________\n"
          "ImportError while importing test module '/testbed/tests/test_a.py'.\n"
          "=========================== short test summary info ============================\n"
          "ERROR tests/test_a.py\n!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!")),
    ("pytest truncated id", "pytest-dev/pytest", "parse_log_pytest", ["tests/test_a.py::test_param[log(photon"], [B],
     pytest_log([f"PASSED {D}", f"PASSED {B}"])),
    ("log cut before the end marker", "pytest-dev/pytest", "parse_log_pytest", [A], [B],
     f"+ : '{START}'\ncollected 2 items\n\ntests/test_a.py .."),
    ("timeout code", "pytest-dev/pytest", "parse_log_pytest", [A], [B],
     pytest_log([f"PASSED {A}", f"PASSED {B}"]) + "\n>>>>> Tests Timed Out\n"),
    ("patch failed code", "pytest-dev/pytest", "parse_log_pytest", [A], [B],
     ">>>>> Patch Apply Failed\n" + pytest_log([f"PASSED {A}", f"PASSED {B}"])),
    ("pytest_v2 colours", "astropy/astropy", "parse_log_astropy", [A], [B],
     wrap(f"\x1b[32mPASSED\x1b[0m {A}\n\x1b[32mPASSED\x1b[0m {B}")),
    ("pytest_v2 old style", "sphinx-doc/sphinx", "parse_log_sphinx", [A], [B],
     wrap(f"{A} PASSED\n{B} FAILED")),
    ("scikit F2P failed with message", "scikit-learn/scikit-learn", "parse_log_scikit", [A], [B],
     wrap(f"PASSED {B}\nFAILED {A} - ValueError: bad - really")),
    ("pytest_options path param", "psf/requests", "parse_log_requests",
     ["tests/test_r.py::test_path[/data.txt]"], [B],
     wrap(f"PASSED tests/test_r.py::test_path[/home/u/x/data.txt]\nPASSED {B}")),
    ("pylint options", "pylint-dev/pylint", "parse_log_pylint", [A], [B, C],
     wrap(f"PASSED {A}\nPASSED {B}\nFAILED {C}")),
    ("django all ok", "django/django", "parse_log_django", [DJ_A], [DJ_B], django_log("ok", "ok")),
    ("django F2P FAIL", "django/django", "parse_log_django", [DJ_A], [DJ_B], django_log("FAIL", "ok")),
    ("django F2P skipped", "django/django", "parse_log_django", [DJ_A], [DJ_B],
     django_log("skipped 'Database has feature(s) supports_over_clause'", "ok")),
    ("django P2P error", "django/django", "parse_log_django", [DJ_A], [DJ_B], django_log("ok", "ERROR")),
    ("django docstring line then ok", "django/django", "parse_log_django", [DJ_A], [DJ_B],
     wrap(f"{DJ_A} ... System check identified no issues (0 silenced).\nok\n{DJ_B} ... ok\n")),
    ("sympy all ok", "sympy/sympy", "parse_log_sympy", ["test_issue_11617"], ["test_point", "test_transform"],
     sympy_log({"test_point": "ok", "test_issue_11617": "ok", "test_transform": "ok"})),
    ("sympy F2P F", "sympy/sympy", "parse_log_sympy", ["test_issue_11617"], ["test_point"],
     sympy_log({"test_point": "ok", "test_issue_11617": "F"})),
    ("sympy P2P E", "sympy/sympy", "parse_log_sympy", ["test_issue_11617"], ["test_point"],
     sympy_log({"test_point": "E", "test_issue_11617": "ok"})),
    ("sympy F2P missing", "sympy/sympy", "parse_log_sympy", ["test_issue_11617"], ["test_point"],
     sympy_log({"test_point": "ok"})),
    ("matplotlib mouse buttons", "matplotlib/matplotlib", "parse_log_matplotlib",
     ["lib/matplotlib/tests/test_widgets.py::test_span[1]"], [B],
     wrap(f"PASSED lib/matplotlib/tests/test_widgets.py::test_span[MouseButton.LEFT]\nPASSED {B}")),
    ("seaborn", "mwaskom/seaborn", "parse_log_seaborn", ["tests/test_core.py::TestX::test_y"], [B],
     wrap(f"tests/test_core.py::TestX::test_y PASSED [ 50%]\nPASSED {B}")),
    ("results only outside the markers", "pytest-dev/pytest", "parse_log_pytest", [A], [B],
     f"PASSED {A}\nPASSED {B}\n" + wrap("")),
]


def test_verdicts_match_swebench5(swebench5):
    cases = [{"instance_id": f"x__y-{i}", "repo": repo, "version": "1.0", "log_parser": parser,
              "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "log": log}
             for i, (_, repo, parser, f2p, p2p, log) in enumerate(CASES)]
    theirs = swebench5(cases)
    mismatches = []
    resolved_count = 0
    for (name, *_), case, official in zip(CASES, cases, theirs):
        resolved, report = verdict(case, case["log"], case["log_parser"])
        resolved_count += resolved
        if resolved != official["resolved"]:
            mismatches.append(f"{name}: orchard resolved={resolved}, swebench 5 {official['resolved']}")
        elif official["tests_status"] and report["log_valid"]:
            for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
                for side in ("success", "failure"):
                    if sorted(report[key][side]) != sorted(official["tests_status"][key][side]):
                        mismatches.append(f"{name}: {key} {side} {report[key][side]} != "
                                          f"{official['tests_status'][key][side]}")
    assert not mismatches, "\n".join(mismatches)
    assert len(CASES) >= 20 and 0 < resolved_count < len(CASES)  # both verdicts are exercised


def test_skipped_fail_to_pass_is_a_failure():
    """The rule 4.1.0's own report misses (a skipped F2P test drops out of its count)."""
    case = {"instance_id": "x__y-1", "repo": "pytest-dev/pytest", "FAIL_TO_PASS": [A], "PASS_TO_PASS": [B]}
    resolved, report = verdict(case, pytest_log([f"SKIPPED {A}", f"PASSED {B}"]), "pytest")
    assert not resolved and report["FAIL_TO_PASS"]["failure"] == [A]
    resolved, report = verdict(case, pytest_log([f"PASSED {A}", f"SKIPPED {B}"]), "pytest")
    assert resolved and report["PASS_TO_PASS"]["success"] == [B]


def test_a_coloured_failure_report_still_shows_the_failed_lookup():
    """tox runs sphinx's tests with colours (sphinx-8475, -8269, -10435): the pytest section header
    of each failing test is wrapped in colour codes, and the test that failed on a name lookup is
    still found, so the instance is needs_network, not unresolved."""
    red, bold, off = "\x1b[31m", "\x1b[1m", "\x1b[0m"
    lookup = ("links.txt:9: [broken] https://www.google.com/: HTTPSConnectionPool(host='www.google.com', "
              "port=443): Max retries exceeded (Caused by NewConnectionError('Failed to establish a new "
              "connection: [Errno -3] Temporary failure in name resolution'))")
    body = (f"=================================== FAILURES ===================================\n"
            f"{red}{bold}______________________________ test_defaults _______________________________{off}\n"
            f"{red}{bold}E       assert \"Anchor 'top' not found\" in \"{lookup}\"{off}\n"
            f"{red}{bold}_____________________________ test_anchors_ignored _____________________________{off}\n"
            f"{lookup}\n"
            f"{red}FAILED{off} {A} - AssertionError\n{red}FAILED{off} {B} - AssertionError\n")
    report = {"FAIL_TO_PASS": {"success": [], "failure": []},
              "PASS_TO_PASS": {"success": [], "failure": ["tests/test_build_linkcheck.py::test_defaults",
                                                          "tests/test_build_linkcheck.py::test_anchors_ignored"]}}
    assert needs_internet(report, wrap(body)) == report["PASS_TO_PASS"]["failure"]
    one = wrap(body.replace(f"{off}\n{lookup}\n", f"{off}\nValueError: 404\n"))
    assert "name resolution" in one and needs_internet(report, one) == []  # one failed otherwise


def test_a_long_test_name_keeps_its_failure_report():
    """pytest centres a failing test's name in a line of underscores; a long name keeps one or two
    on each side (requests-863: 2 of its 53 tests that failed on a lookup had such headers, and the
    gold patch was graded unresolved instead of needs_network). The header is pytest's own."""
    from _pytest.terminal import TerminalWriter

    lookup = "E       requests.exceptions.ConnectionError: [Errno -3] Temporary failure in name resolution\n"
    tests = [f"tests/test_requests.py::RequestsTestSuite::{name}"
             for name in ("test_HTTP_200_OK_GET", "test_post_fields_with_multiple_values_and_files_as_tuples")]
    headers = []
    for test in tests:
        out = io.StringIO()
        writer = TerminalWriter(out)
        writer.fullwidth = 80
        writer.sep("_", "RequestsTestSuite." + test.split("::")[-1])
        headers.append(out.getvalue())
    assert headers[1].startswith("_ ") and headers[1].rstrip().endswith(" __"), headers[1]  # pytest's own line
    body = "=================================== FAILURES ===================================\n" + \
        "".join(f"{header}{lookup}" for header in headers) + "".join(f"FAILED {t}\n" for t in tests)
    report = {"FAIL_TO_PASS": {"success": [], "failure": []}, "PASS_TO_PASS": {"success": [], "failure": tests}}
    assert needs_internet(report, wrap(body)) == tests
    other = wrap(body.replace(f"{headers[1]}{lookup}", f"{headers[1]}E       ValueError: 404\n"))
    assert needs_internet(report, other) == []  # the long-named test failed otherwise: unresolved
    # a traceback of several steps has `_ _ _` lines between them, which end in `_` at odd widths:
    # not a test's header (the lookup failure after them is still this test's)
    step = "\n".join(["    def test(self):", ">       get(url)", "", "_ " * 40 + "_", "", "    def get(url):"]) + "\n"
    deep = wrap(body.replace(f"{headers[1]}{lookup}", f"{headers[1]}{step}{lookup}"))
    assert needs_internet(report, deep) == tests


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
