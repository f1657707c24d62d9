"""Help that teaches, checked over the whole Typer app (a new command or option is covered at
once): every command ends with an example that parses; every option that takes a suite, a
harness, a family or a backend lists every registered one; `-h` works everywhere; option names
are never cut, however narrow the terminal; `orchard eval --help` shows the run's options."""

from __future__ import annotations

import re

import pytest

from cli_lines import check_argv, split_line
from orchard_cli.commands._help import fill_help, registered, walk
from orchard_cli.main import command, main

NAMES = registered()
LISTS = {"suite": "{suites}", "eval_suite": "{suites}", "harness": "{harnesses}", "family": "{families}",
         "backend": "{backends}"}
NOT_LISTED = {("tasks", "synth", "family"): "synth makes tasks of three families only (swe, claw, web)",
              ("rerank", "candidates", "suite"): "candidates are made for suites with gold patches",
              ("recipe", "family"): "the recipe synthesizes its tasks: the two families synth makes for it (claw, web)",
              ("recipe", "harness"): "a harness of the recipe's family (bash, codex, openclaw... for claw; web for web)"}


def _tree():
    root = command()
    fill_help(root, NAMES)
    return [(path, c) for path, c in walk(root) if not getattr(c, "commands", None)]


COMMANDS = _tree()


def test_every_command_ends_with_an_example_that_parses():
    missing, broken = [], []
    for path, cmd in COMMANDS:
        text = cmd.help or ""
        match = re.search(r"Examples?:\n((?:[ \t]+orchard .*\n?)+)", text)
        if not match:
            missing.append(" ".join(path))
            continue
        for line in match.group(1).splitlines():
            problem = check_argv(split_line(line.strip())[1:])
            if problem:
                broken.append(problem)
    assert not missing, f"commands without an example: {missing}"
    assert not broken, broken


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_option_lists_name_every_registered_one(path, cmd):
    for param in cmd.params:
        key = LISTS.get(param.name or "")
        if key is None or (*path, param.name) in NOT_LISTED:
            continue
        text = " ".join((param.help or "").split())
        for name in NAMES[key].split(", "):
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), \
                f"orchard {' '.join(path)} {param.opts[0] if param.opts else param.name}: {name!r} not in {text!r}"


def test_dash_h_everywhere_and_names_never_cut(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    for path, cmd in COMMANDS:
        assert main([*path, "-h"]) == 0, path
        out = capsys.readouterr().out
        assert out.startswith("Usage: orchard"), (path, out[:200])
        for param in cmd.params:
            if getattr(param, "hidden", False):  # an old spelling: it works, and is not taught
                continue
            for opt in param.opts + param.secondary_opts:
                if opt.startswith("--"):
                    assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", out), (path, opt)
        assert "…" not in out.split("Options:")[-1].split("\n", 1)[0]


def test_the_group_help_shows_the_run_options(capsys):
    for group, options in (("eval", ("--harness", "--model", "--predictions", "--attempts")),
                           ("distill", ("--model", "--teacher", "SUITE", "--harness")),
                           ("judge", ("--judge-model", "--method"))):
        assert main([group, "--help"]) == 0
        out = capsys.readouterr().out
        assert all(o in out for o in options), (group, out[:500])
    assert main(["eval"]) == 0 and "--harness" in capsys.readouterr().out  # no arguments: the same help
    assert main(["eval", "compare", "-h"]) == 0 and "RUN_B" in capsys.readouterr().out


def test_the_help_lists_come_from_the_registries(monkeypatch):
    from orchard_cli.tasks.registry import families

    monkeypatch.setitem(families._targets, "acme-tasks", "orchard_cli.tasks.calc:CalcFamily")
    names = registered()
    assert "acme-tasks" in names["{families}"] and "claw-mini" in names["{suites}"] and "web" in names["{harnesses}"]
