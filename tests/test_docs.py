"""The docs work as written: every `orchard` command in README.md and docs/*.md parses against the
Typer app (an unknown command or option fails here in milliseconds, not in a reader's shell);
every shell block that runs orchard says whether it can run here (`<!-- docs: ... -->`); every
repository path the docs name exists; and the blocks marked `fast` run, on a fresh ORCHARD_HOME.
`scripts/check-docs.sh` runs the rest that need no endpoint (minutes)."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_lines import check_argv, split_line
from docs_blocks import ROOT, SHELLS, all_blocks, doc_files, inline_commands

MARKS = {"fast", "run", "endpoint", "skip", "orchard-only"}
PATH_SPAN = re.compile(r"`((?:orchard_cli|tasks|harnesses|commands|bench|scripts|docs|tests)/[\w./*-]*)`")
BLOCKS = all_blocks()


def test_every_command_in_the_docs_parses():
    problems, count = [], 0
    for block in BLOCKS:
        for line in block.commands:
            count += 1
            problem = check_argv(split_line(line)[1:])
            if problem:
                problems.append(f"{block.where}: {problem}")
    for path in doc_files():
        for number, span in inline_commands(path):
            count += 1
            problem = check_argv(split_line(span)[1:], complete=False)
            if problem:
                problems.append(f"{path.name}:{number}: {problem}")
    assert count > 100  # the docs do hold commands: the extraction works
    assert not problems, "\n".join(problems)


def test_every_block_that_runs_orchard_is_marked():
    unmarked = [b.where for b in BLOCKS if b.lang in SHELLS and b.commands and b.mark not in MARKS]
    assert not unmarked, f"mark each with <!-- docs: fast|run|endpoint|skip REASON --> on the line above: {unmarked}"
    assert [b for b in BLOCKS if b.mark == "fast"], "no block is marked fast"
    for block in BLOCKS:
        if block.mark in ("fast", "run"):  # runnable blocks hold no placeholder for an endpoint
            assert not re.search(r"--base-url\s+(U|https://host)|--model\s+M\b|\bgpt-x\b", block.text), block.where


def test_paths_the_docs_name_exist():
    missing = []
    for path in doc_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for span in PATH_SPAN.findall(line):
                if not glob.glob(str(ROOT / span)):
                    missing.append(f"{path.name}:{number}: {span}")
    assert not missing, missing


def test_no_command_reads_the_default_home_when_orchard_home_is_set():
    for block in BLOCKS:
        assert "~/.orchard" not in block.text, f"{block.where}: use ${{ORCHARD_HOME:-$HOME/.orchard}}"


@pytest.mark.bwrap
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mark == "fast"], ids=lambda b: b.where)
def test_fast_blocks_run(block, tmp_path):
    env = {**os.environ, "ORCHARD_HOME": str(tmp_path / "home"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{block.where}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
