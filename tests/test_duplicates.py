"""The duplicate-code check: pylint's similarity engine (`symilar`, what its duplicate-code
check R0801 runs), pinned in the test extra, over orchard's own code (orchard_cli/ and tasks/;
tasks/data/ holds task files that run inside sandboxes, not orchard's code). Eight lines alike,
comments and docstrings aside, fail the run: share them instead. (Eight, not fewer: at seven
the only pairs are two modules' runs of import lines. symilar's --ignore-imports and
--ignore-signatures are not used: they build each module with astroid, whose inference imports
what the module imports, and take minutes instead of seconds.)

The two in-sandbox agents (harnesses/*_agent_main.py) are copied into sandboxes as single files,
so they stay outside the check."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MIN_LINES = 8


@pytest.mark.slow
def test_no_block_of_eight_lines_is_written_twice():
    files = sorted(str(p.relative_to(ROOT)) for folder in ("orchard_cli", "tasks") for p in (ROOT / folder).rglob("*.py")
                   if "__pycache__" not in p.parts and not p.relative_to(ROOT).as_posix().startswith("tasks/data/"))
    assert len(files) > 200, files
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from pylint.checkers.symilar import Run; Run(sys.argv[1:])",
         "--duplicates", str(MIN_LINES), "--ignore-comments", "--ignore-docstrings", *files],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    total = re.search(r"TOTAL lines=(\d+) duplicates=(\d+)", run.stdout)
    assert total is not None, run.stdout[-2000:] + run.stderr[-2000:]
    assert int(total.group(1)) > 30_000
    assert total.group(2) == "0", run.stdout[-6000:]
