"""A small but real SWE-bench-format instance: a git repository with a bug, its fix, a test patch.

`make_instances(mirror)` creates `acme/calc` under the mirror folder and returns instance records:
one written like the dataset's (an eval_script for /testbed and conda), one with its own recipe
only (test_cmd), plus the patches the tests grade (gold, wrong, non-applying, hanging).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = "acme/calc"
CREATED_AT = "2024-05-01T12:00:00Z"
RECIPE = {"python": "3.10", "packages": ["pytest==8.2.0"],
          "install": ["python -m pip install -e ."], "log_parser": "pytest"}

BUGGY = '''def add(a, b):
    return a - b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b
'''
TESTS = '''import pytest

from calc import mul, sub


def test_sub():
    assert sub(3, 1) == 2


def test_mul():
    assert mul(2, 3) == 6


@pytest.mark.skip(reason="not today")
def test_later():
    assert False
'''


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=env).stdout


def diff_of(work: Path, path: str, new_text: str) -> str:
    """The unified diff that turns `path` into `new_text` (the work tree is left unchanged)."""
    target = work / path
    old = target.read_text()
    target.write_text(new_text)
    try:
        return git(work, "diff", "--", path)
    finally:
        target.write_text(old)


def make_repo(mirror: Path) -> tuple[Path, str]:
    work = mirror / "acme" / "calc"
    (work / "calc").mkdir(parents=True)
    (work / "tests").mkdir()
    (work / "setup.py").write_text('from setuptools import setup\n\n'
                                   'setup(name="calc", version="0.1", packages=["calc"])\n')
    (work / "calc" / "__init__.py").write_text(BUGGY)
    (work / "tests" / "test_calc.py").write_text(TESTS)
    (work / ".gitignore").write_text("*.egg-info/\n__pycache__/\n")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "calc with a bug in add")
    return work, git(work, "rev-parse", "HEAD").strip()


def make_instances(mirror: Path) -> dict:
    work, base = make_repo(mirror)
    src = "calc/__init__.py"
    gold = diff_of(work, src, BUGGY.replace("return a - b", "return a + b", 1))
    wrong = diff_of(work, src, BUGGY.replace("return a - b", "return a * b", 1))
    hang = diff_of(work, src, "import time\n\n" + BUGGY.replace(
        "    return a - b", "    time.sleep(600)\n    return a + b", 1))
    breaks_p2p = diff_of(work, src, BUGGY.replace("return a - b", "return a + b", 1)
                         .replace("return a * b", "return a ** b"))
    test_patch = diff_of(work, "tests/test_calc.py", TESTS.replace(
        "from calc import mul, sub", "from calc import add, mul, sub").replace(
        "def test_sub():", "def test_add():\n    assert add(2, 3) == 5\n\n\ndef test_sub():"))
    not_applying = gold.replace("return a - b", "return a - b - 0").replace("+    return a + b",
                                                                         "+    return b + a")
    f2p = ["tests/test_calc.py::test_add"]
    p2p = ["tests/test_calc.py::test_sub", "tests/test_calc.py::test_mul"]
    common = {"repo": REPO, "base_commit": base, "environment_setup_commit": base,
              "patch": gold, "test_patch": test_patch, "created_at": CREATED_AT, "version": "0.1",
              "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(p2p),
              "hints_text": "", "problem_statement": "add() subtracts instead of adding"}
    scripted = {**common, "instance_id": "acme__calc-1", "environment": RECIPE,
                "eval_script": dataset_style_script(base, test_patch)}
    own = {**common, "instance_id": "acme__calc-2",
           "environment": {**RECIPE, "test_cmd": "pytest -rA tests/test_calc.py"}}
    return {"scripted": scripted, "own": own, "gold": gold, "wrong": wrong, "hang": hang,
            "breaks_p2p": breaks_p2p, "not_applying": not_applying, "base": base}


def dataset_style_script(base: str, test_patch: str) -> str:
    """An eval script as SWE-bench's data writes them (compare the dataset's eval_script column)."""
    return "\n".join([
        "#!/bin/bash", "set -uxo pipefail", "source /opt/miniconda3/bin/activate",
        "conda activate testbed", "cd /testbed", "git config --global --add safe.directory /testbed",
        "cd /testbed", "git status", "git show", f"git -c core.fileMode=false diff {base}",
        "source /opt/miniconda3/bin/activate", "conda activate testbed",
        "python -m pip install -e .", f"git checkout {base} tests/test_calc.py",
        f"git apply -v - <<'EOF_114329324912'\n{test_patch}\nEOF_114329324912",
        ": '>>>>> Start Test Output'", "pytest -rA tests/test_calc.py", ": '>>>>> End Test Output'",
        f"git checkout {base} tests/test_calc.py", ""])
