"""`orchard tasks synth --family F` finds F's synthesizer through the registry
(orchard_cli/synthesis.py): claw and web list and choose their templates, swe has none, an unknown
family lists the ones there are, each family's output flag is checked before anything runs, a real
claw synthesis writes only tasks valid three ways, and a third-party synthesizer registered by name
is run by the same command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchard_cli.main import main
from orchard_cli.synthesis import SynthResult, synthesizers


def _run(capsys, *argv):
    code = main(["tasks", "synth", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("family,columns", [("claw", ["template", "category", "difficulty", "prompt"]),
                                            ("web", ["template", "site", "category", "difficulty", "prompt"])])
def test_list_shows_each_familys_templates(capsys, monkeypatch, family, columns):
    monkeypatch.setenv("COLUMNS", "250")  # the table folds long names on a narrow terminal
    code, out, err = _run(capsys, "--family", family, "--list", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["templates"]
    assert len(rows) >= 6 and all(list(r) == columns for r in rows)
    first, second = rows[0]["template"], rows[1]["template"]
    code, out, _ = _run(capsys, "--family", family, "--list", "--exclude-templates", first, "--format", "json")
    assert code == 0 and first not in [r["template"] for r in json.loads(out)["templates"]]
    code, out, _ = _run(capsys, "--family", family, "--list", "--templates", f"{first},{second}")
    assert code == 0 and first in out and second in out and "prompt (seed 0)" in out


@pytest.mark.parametrize("argv,message", [
    (["--family", "swe", "--templates", "x"], "--family swe has no templates"),
    (["--family", "swe", "--list"], "--family swe has no templates"),
    (["--family", "clwa", "--n", "1"], "did you mean claw"),
    (["--family", "claw", "--templates", "no-such-template"], "no claw template named no-such-template"),
    (["--family", "claw", "--n", "1"], "give --out-dir DIR"),
    (["--family", "web", "--n", "1", "--out", "x.jsonl"], "give --out-dir, not --out"),
    (["--family", "swe", "--out-dir", "x"], "give --out, not --out-dir"),
    (["--family", "swe", "--out", "x.jsonl"], "SWE tasks need --package"),
    (["--family", "claw", "--n", "1001", "--out-dir", "x"], "at most 1000 tasks per seed"),
])
def test_bad_requests_are_one_line_and_exit_2_before_anything_is_written(capsys, tmp_path, monkeypatch, argv,
                                                                         message):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, *argv)
    assert code == 2 and message in err, err
    assert not any(tmp_path.iterdir())


def test_claw_synthesis_through_the_registry_writes_tasks_valid_three_ways(capsys, tmp_path):
    out_dir = tmp_path / "claw"
    code, out, err = _run(capsys, "--family", "claw", "--templates", "mail-lookup", "--n", "2", "--seed", "5",
                          "--out-dir", str(out_dir), "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["kept"] == 2 and report["dropped"] == {} and report["templates"] == ["mail-lookup"]
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(report["tasks"])
    assert all((out_dir / task / "task.yaml").is_file() for task in report["tasks"])


class _Counting:
    """A third-party synthesizer: writes n lines to --out."""

    family = "counting"
    writes = "file"
    unit = "task"

    def templates(self):
        return None

    def describe(self):
        return []

    def check(self, request):
        if request.out is None:
            from orchard_cli.errors import UsageError

            raise UsageError("counting writes --out FILE")

    def run(self, request, say, on_task=None):
        Path(request.out).write_text("".join(f"{request.seed * 1000 + i}\n" for i in range(request.n)))
        return SynthResult(report={"family": "counting", "n": request.n}, kept=request.n, dropped={},
                           summary=[f"wrote {request.n}"])


def test_a_registered_synthesizer_is_run_by_the_same_command(capsys, tmp_path):
    synthesizers.register("counting")(_Counting)
    try:
        out = tmp_path / "n.txt"
        code, stdout, err = _run(capsys, "--family", "counting", "--n", "3", "--seed", "2", "--out", str(out),
                                 "--format", "json")
        assert code == 0, err
        assert json.loads(stdout) == {"family": "counting", "n": 3}
        assert out.read_text().split() == ["2000", "2001", "2002"]
        code, _, err = _run(capsys, "--family", "counting", "--list")
        assert code == 2 and "--family counting has no templates" in err and "claw or web" in err
    finally:
        synthesizers._targets.pop("counting", None)
