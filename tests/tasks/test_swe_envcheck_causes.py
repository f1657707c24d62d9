"""What the per-instance environment check blames on the environment, from real check output."""

from __future__ import annotations

from orchard_cli.outcome import Outcome
from orchard_cli.tasks.swe import envcheck

# pytest-7168 (SWE-bench Lite): the environment of pytest 5.4 was installed at its setup commit,
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

# A test module that cannot import a name of the repository (the fix adds it): the patch's
# business, not the environment's, even though the traceback is raw.
OWN_IMPORT = """+ python bin/test sympy/core/tests/test_evalf.py
Traceback (most recent call last):
  File "/testbed/bin/test", line 105, in <module>
    import sympy
  File "/testbed/sympy/core/tests/test_evalf.py", line 3, in <module>
    from sympy.core.evalf import new_helper
ImportError: cannot import name 'new_helper' from 'sympy.core.evalf' (/testbed/sympy/core/evalf.py)
"""


def test_a_console_script_that_cannot_load_its_entry_point_is_the_environments():
    why = envcheck.cause(STALE_SCRIPT, 1, {"src", "testing", "setup.py"})
    assert why is not None and "pytest script" in why and "console_main" in why, why
    unresolved = Outcome(resolved=False, category="unresolved", log=STALE_SCRIPT)
    judged = envcheck.judge(unresolved, {"ok": False, "cause": why})
    assert judged.category == "env_error" and "console_main" in judged.error


def test_a_test_module_importing_what_the_fix_adds_is_not():
    assert envcheck.cause(OWN_IMPORT, 1, {"sympy", "bin", "setup.py"}) is None
