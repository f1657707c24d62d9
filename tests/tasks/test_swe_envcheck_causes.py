"""What the per-instance environment check blames on the environment, from real check output."""

from __future__ import annotations

from orchard_cli.outcome import Outcome
from orchard_cli.tasks.swe import envcheck

# pytest-7168 (SWE-bench Lite): the environment of pytest 5.4 it shared was installed at a later commit,
# whose console script calls `pytest:console_main`; the instance's base commit is older and has
# no console_main, so `pytest` stops before collecting anything (gold was graded unresolved).
STALE_SCRIPT = """+ pytest -rA testing/io/test_saferepr.py
Traceback (most recent call last):
  File "/opt/miniconda3/envs/testbed/bin/pytest", line 33, in <module>
    sys.exit(load_entry_point('pytest', 'console_scripts', 'pytest')())
  File "/opt/miniconda3/envs/testbed/bin/pytest", line 25, in importlib_load_entry_point
    return next(matches).load()
  File "/opt/miniconda3/envs/testbed/lib/python3.9/importlib/metadata.py", line 88, in load
    return functools.reduce(getattr, attrs, module)
AttributeError: module 'pytest' has no attribute 'console_main'
"""

# pip writes `from pytest import console_main` into the script instead: the same staleness.
PIP_SCRIPT = """Traceback (most recent call last):
  File "/opt/miniconda3/envs/testbed/bin/pytest", line 5, in <module>
    from pytest import console_main
ImportError: cannot import name 'console_main' from 'pytest' (/testbed/src/pytest/__init__.py)
"""

# The runner loaded and then failed while running (a conftest the test patch changes uses an API
# the fix adds): the repository's own name, the patch's business, not the environment's, though
# the script's <module> line says load_entry_point too.
WHILE_RUNNING = """Traceback (most recent call last):
  File "/opt/miniconda3/envs/testbed/bin/pytest", line 33, in <module>
    sys.exit(load_entry_point('pytest', 'console_scripts', 'pytest')())
  File "/testbed/src/_pytest/config/__init__.py", line 105, in main
    config = _prepareconfig(args, plugins)
  File "/testbed/src/_pytest/config/__init__.py", line 257, in _prepareconfig
    return pluginmanager.hook.pytest_cmdline_parse(
  File "/testbed/testing/conftest.py", line 4, in <module>
    from _pytest.pytester import new_fixture_api
ImportError: cannot import name 'new_fixture_api' from '_pytest.pytester' (/testbed/src/_pytest/pytester.py)
"""


def test_a_console_script_that_cannot_load_its_entry_point_is_the_environments():
    why = envcheck.cause(STALE_SCRIPT, 1, {"src", "testing", "setup.py"})
    assert why is not None and "pytest script" in why and "console_main" in why, why
    unresolved = Outcome(resolved=False, category="unresolved", log=STALE_SCRIPT)
    judged = envcheck.judge(unresolved, {"ok": False, "cause": why})
    assert judged.category == "env_error" and "console_main" in judged.error
    why = envcheck.cause(PIP_SCRIPT, 1, {"src", "testing", "setup.py"})
    assert why is not None and "console_main" in why, why


def test_an_import_error_after_the_runner_started_is_not():
    assert envcheck.cause(WHILE_RUNNING, 1, {"src", "testing", "setup.py"}) is None
