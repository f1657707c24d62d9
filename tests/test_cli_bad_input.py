"""Bad input is a usage error: exit 2, one `error:` line on stderr (and a hint), no traceback, and
nothing written. The commands and their options come from the Typer app itself, so a new command
or option is covered as soon as it exists:

- every number declares its range (min/max) unless it is listed in UNBOUNDED; a value outside it
  is refused before the command starts;
- every path says whether it wants a file or a folder (every --out must); the other kind is
  refused before the command starts;
- data files (suites, datasets, predictions, trajectories) that are binary are refused by the
  commands that read them, and unknown names are refused by `tasks ls` and `tasks show` alike.
"""

from __future__ import annotations

import os
import typing
from pathlib import Path

import pytest
import typer

from orchard_cli.main import _register, app, main

UNBOUNDED = {"seed", "sample_seed"}
"""Numeric options where any integer is meaningful."""


def _commands() -> list[tuple[list[str], object]]:
    _register()
    found = []

    def walk(command, path):
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                walk(sub, [*path, name])
        else:
            found.append((path, command))

    walk(typer.main.get_command(app), [])
    return found


def _base(annotation):
    """int / float / Path / str of an annotation (Optional[...] and list[...] unwrapped)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, list, getattr(__import__("types"), "UnionType", None)):
        return _base(args[0]) if args else annotation
    return annotation


def _params():
    for path, command in _commands():
        for param in command.params:
            if param.name == "help":
                continue
            info = param.type_descriptor.parameter_info
            yield path, param, _base(param.type_descriptor.annotation), info


def _flag(param) -> str | None:
    return next((o for o in param.opts if o.startswith("--")), None)


def run(capsys, argv, cwd):
    before = {p for p in cwd.rglob("*")}
    code = main(argv)
    captured = capsys.readouterr()
    after = {p for p in cwd.rglob("*")}
    return code, captured.err, sorted(str(p) for p in after - before)


def check_refused(capsys, argv, cwd, mentions):
    code, err, made = run(capsys, argv, cwd)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"orchard {' '.join(argv)} -> exit {code}: {err[-800:]}"
    assert "Traceback" not in err, err
    assert len([line for line in lines if line.startswith("error:")]) == 1 and len(lines) <= 2, err
    assert mentions in lines[0], f"orchard {' '.join(argv)}: {lines[0]!r} does not name {mentions!r}"
    assert made == [], f"orchard {' '.join(argv)} wrote {made}"


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "a-file.txt").write_text("x\n")
    (work / "a-folder").mkdir()
    (work / "blob.jsonl").write_bytes(bytes(range(256)) * 8)  # binary, with newlines
    return work


def test_every_number_has_a_range_and_values_outside_it_are_refused(capsys, cwd):
    checked = 0
    for path, param, base, info in _params():
        if base not in (int, float) or param.name in UNBOUNDED or getattr(param, "is_flag", False):
            continue
        flag = _flag(param)
        assert info.min is not None or info.max is not None, \
            f"orchard {' '.join(path)} {flag}: declare min/max (or add it to UNBOUNDED)"
        bad = info.min - 1 if info.min is not None else info.max + 1
        check_refused(capsys, [*path, flag, str(bad)], cwd, flag)
        checked += 1
    assert checked >= 40  # the app's own numbers, not a vacuous pass


def test_every_path_says_file_or_folder_and_the_other_kind_is_refused(capsys, cwd):
    checked = 0
    for path, param, base, info in _params():
        if base is not Path:
            continue
        flag = _flag(param)
        where = flag or param.name
        assert info.file_okay is False or info.dir_okay is False, \
            f"orchard {' '.join(path)} {where}: say file_okay=False (a folder) or dir_okay=False (a file)"
        wrong = cwd / ("a-file.txt" if info.file_okay is False else "a-folder")
        argv = [*path, flag, str(wrong)] if flag else [*path, str(wrong)]
        check_refused(capsys, argv, cwd, flag or "")
        checked += 1
    assert checked >= 15
    outs = [(p, param) for p, param, base, _ in _params() if param.name == "out"]
    assert outs and all(base is Path for _, param, base, _ in _params() if param.name == "out")


BINARY_INPUTS = [
    ["eval", "blob.jsonl", "--predictions", "gold"],
    ["eval", "calc", "--dataset", "blob.jsonl", "--predictions", "gold"],
    ["eval", "swe-mini", "--predictions", "blob.jsonl"],
    ["distill", "blob.jsonl", "--base-url", "scripted", "--out", "t.jsonl"],
    ["tasks", "ls", "swe-mini", "--dataset", "blob.jsonl"],
    ["tasks", "show", "blob.jsonl"],
    ["rerank", "candidates", "blob.jsonl", "--out", "cands"],
    ["view", "blob.jsonl"],
    ["distill", "export", "blob.jsonl", "--out", "exported"],
    ["train", "--trajectories", "blob.jsonl", "--model", "smollm2", "--out", "student"],
    ["rerank", "train", "--trajectories", "blob.jsonl", "--out", "value"],
    ["rollout", "blob.jsonl", "--family", "quiz", "--out", "r.jsonl"],
    ["rl", "--rollouts", "blob.jsonl", "--out", "rl-run"],
]


@pytest.mark.parametrize("argv", BINARY_INPUTS, ids=lambda a: " ".join(a[:2]))
def test_a_binary_data_file_is_a_usage_error(capsys, cwd, argv):
    check_refused(capsys, argv, cwd, "blob.jsonl")


def test_an_unknown_suite_is_exit_2_for_ls_and_show(capsys, cwd):
    for argv in (["tasks", "ls", "nope"], ["tasks", "show", "nope"], ["eval", "nope", "--predictions", "gold"]):
        check_refused(capsys, argv, cwd, "nope")


def test_orchard_debug_shows_the_traceback_and_keeps_the_exit_code(capsys, cwd, monkeypatch):
    monkeypatch.setenv("ORCHARD_DEBUG", "1")
    assert main(["tasks", "show", "nope"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "error: unknown suite 'nope'" in err


def test_a_distill_resume_onto_a_file_that_is_not_trajectories_is_refused(capsys, cwd):
    for name in ("blob.jsonl", "a-file.txt"):
        before = (cwd / name).read_bytes()
        check_refused(capsys, ["distill", "calc", "--base-url", "scripted", "--resume", "--out", name],
                      cwd, name)
        assert (cwd / name).read_bytes() == before  # nothing appended


def test_env_up_names_a_missing_sdk_before_starting(capsys, cwd, monkeypatch, tmp_path):
    """`env up --backend docker` without the docker package: the cause and its install line,
    exit 3 (a missing dependency), not the dead service's last log line."""
    fake = tmp_path / "site" / "docker"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'docker'\", name='docker')\n")
    monkeypatch.syspath_prepend(str(fake.parent))
    for name in [m for m in list(__import__("sys").modules) if m == "docker" or m.startswith("docker.")]:
        monkeypatch.delitem(__import__("sys").modules, name)
    for detach in ([], ["--detach"]):
        assert main(["env", "up", "--backend", "docker", "--port", "0", *detach]) == 3
        err = capsys.readouterr().err
        assert "needs the docker SDK" in err and "orchard-cli[docker]" in err, err
    assert not (Path(os.environ["ORCHARD_HOME"]) / "env" / "service.json").exists()
