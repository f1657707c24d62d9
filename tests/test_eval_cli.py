"""`orchard eval` end to end through the CLI, on a small real SWE-bench-format instance file built
from a git repository (tests/tasks/swe_repo.py), graded by the SWE family on the local backend:
exit codes, the run folder, resume, and the HTML scorecard as headless Chromium renders it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "tasks"))
import swe_repo  # noqa: E402

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-cli")
    inst = swe_repo.make_instances(root / "mirror")
    rows = [inst["scripted"], inst["own"]]
    (root / "calc.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    broken = {**inst["own"], "instance_id": "acme__calc-3", "base_commit": "1" * 40}
    (root / "broken.jsonl").write_text("\n".join(json.dumps(r) for r in [*rows, broken]) + "\n")
    preds = [{"instance_id": "acme__calc-1", "model_name_or_path": "m", "model_patch": inst["wrong"]},
             {"instance_id": "acme__calc-2", "model_name_or_path": "m", "model_patch": inst["gold"]}]
    (root / "preds.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    return {"root": root, "inst": inst, "home": root / "home"}


def orchard(world, *args, timeout=300):
    """`orchard ARGS` in the world folder, with one ORCHARD_HOME (environments built once)."""
    env = {**os.environ, "ORCHARD_HOME": str(world["home"]), "COLUMNS": "100"}
    proc = subprocess.run([sys.executable, "-m", "orchard_cli.main", *args], cwd=world["root"],
                          env=env, capture_output=True, text=True, timeout=timeout)
    return proc


def common(world):
    return ["--repo-mirror", str(world["root"] / "mirror")]


def test_gold_resolves_and_writes_the_run_folder(world):
    out = world["root"] / "gold"
    proc = orchard(world, "eval", "calc.jsonl", "--predictions", "gold", "--out", str(out),
                   "--workers", "2", *common(world))
    assert proc.returncode == 0, proc.stderr
    assert "resolved 2/2 (100.0%)" in proc.stdout and "scorecard.html" in proc.stdout
    assert "2 resolved" in proc.stderr and "0 errors" in proc.stderr  # the progress bar
    card = json.loads((out / "scorecard.json").read_text())
    assert (card["total"], card["resolved"], card["errors"], card["resolved_rate"]) == (2, 2, 0, 1.0)
    assert card["suite"] == "calc" and card["headline"] == "resolved_rate"
    assert card["reproducibility"]["config"]["predictions"] == "gold"
    assert len(card["reproducibility"]["dataset_sha256"]) == 64
    for name in ("config.json", "results.jsonl", "predictions.jsonl", "scorecard.md", "scorecard.html"):
        assert (out / name).is_file(), name
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["category"] for r in results} == {"resolved"}
    assert all(r["schema_version"] == 1 and r["tests"]["counts"]["FAIL_TO_PASS_success"] == 1
               for r in results)
    logs = out / "logs" / "acme__calc-1" / "attempt-1"
    assert (logs / "patch.diff").read_text() == world["inst"]["gold"]
    assert ">>>>> Start Test Output" in (logs / "test_output.txt").read_text()
    assert "unittest" in (logs / "eval.sh").read_text()
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert sorted(p["instance_id"] for p in preds) == ["acme__calc-1", "acme__calc-2"]
    assert all(p["model_patch"] == world["inst"]["gold"] for p in preds)

    # The same folder again: refused without --resume; with it, nothing is re-run.
    again = orchard(world, "eval", "calc.jsonl", "--predictions", "gold", "--out", str(out), *common(world))
    assert again.returncode == 2 and "is not empty" in again.stderr
    resumed = orchard(world, "eval", "calc.jsonl", "--predictions", "gold", "--out", str(out),
                      "--resume", *common(world))
    assert resumed.returncode == 0, resumed.stderr
    assert "2 already finished" in resumed.stderr
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    other = orchard(world, "eval", "calc.jsonl", "--predictions", "empty", "--out", str(out),
                    "--resume", *common(world))
    assert other.returncode == 2 and "different configuration" in other.stderr
    assert "'gold' -> 'empty'" in other.stderr and len(other.stderr.strip().splitlines()) <= 2


def test_empty_patches_and_json_output(world):
    out = world["root"] / "empty"
    proc = orchard(world, "eval", "calc.jsonl", "--predictions", "empty", "--out", str(out),
                   "--format", "json", *common(world))
    assert proc.returncode == 0, proc.stderr
    card = json.loads(proc.stdout)  # stdout is exactly the scorecard
    assert card["by_category"]["empty_patch"] == 2 and card["resolved"] == 0
    assert card == json.loads((out / "scorecard.json").read_text())


def test_predictions_file_and_fail_under(world):
    out = world["root"] / "preds"
    proc = orchard(world, "eval", "calc.jsonl", "--predictions", "preds.jsonl", "--out", str(out),
                   "--fail-under", "60%", *common(world))
    assert proc.returncode == 1, proc.stderr
    assert "below --fail-under 60.0%" in proc.stderr
    card = json.loads((out / "scorecard.json").read_text())
    assert card["resolved"] == 1 and card["by_category"]["unresolved"] == 1
    assert card["source"] == "predictions:preds.jsonl"
    # A second run of the same predictions, then compare: equal runs, no flips.
    out2 = world["root"] / "gold-for-compare"
    assert orchard(world, "eval", "calc.jsonl", "--predictions", "gold", "--out", str(out2),
                   *common(world)).returncode == 0
    cmp = orchard(world, "eval", "compare", str(out), str(out2), "--format", "json")
    assert cmp.returncode == 0, cmp.stderr
    data = json.loads(cmp.stdout)
    assert data["b_only"] == ["acme__calc-1"] and data["a_only"] == [] and data["diff"] == 0.5


def test_a_predictions_file_may_hold_more_of_the_suite_than_is_selected(world):
    """As the official harness: --instances picks from the file, the other lines are left aside."""
    out = world["root"] / "preds-one"
    proc = orchard(world, "eval", "calc.jsonl", "--predictions", "preds.jsonl", "--instances",
                   "acme__calc-2", "--out", str(out), "--format", "json", *common(world))
    assert proc.returncode == 0, proc.stderr
    card = json.loads(proc.stdout)
    assert (card["total"], card["resolved"]) == (1, 1)
    graded = [json.loads(line)["instance_id"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert graded == ["acme__calc-2"]


def test_environment_errors_exit_3_unless_tolerated(world):
    out = world["root"] / "broken"
    proc = orchard(world, "eval", "broken.jsonl", "--predictions", "gold", "--out", str(out), *common(world))
    assert proc.returncode == 3, proc.stderr
    assert "1 instance(s) ended in env/infra errors (--max-errors 0)" in proc.stderr
    card = json.loads((out / "scorecard.json").read_text())
    assert card["by_category"]["env_error"] == 1 and card["by_category"]["unresolved"] == 0
    assert card["resolved"] == 2 and card["resolved_rate_graded"] == 1.0
    assert card["resolved_rate"] == pytest.approx(2 / 3)
    result = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()
              if "acme__calc-3" in line][0]
    assert "could not check out 111111111111" in result["error"]
    tolerated = orchard(world, "eval", "broken.jsonl", "--predictions", "gold", "--out",
                        str(world["root"] / "tolerated"), "--max-errors", "1", *common(world))
    assert tolerated.returncode == 0, tolerated.stderr


@pytest.mark.parametrize("args, message", [
    (["--predictions", "bad.jsonl"], "line 2: not valid JSON"),
    (["--predictions", "unknown.jsonl"], "unknown instance 'nobody__x-1'"),
    (["--predictions", "notdiff.jsonl"], "model_patch is not a unified diff"),
    (["--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--harness", "nosuch"], "harness 'nosuch'"),
    ([], "nothing to evaluate"),
    (["--predictions", "gold", "--instances", "acme__calc-9"], "unknown instance id"),
    (["--predictions", "gold", "--fail-under", "2"], "not a rate"),
    (["--predictions", "gold", "--slice", "x"], "is not A:B"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(world, args, message):
    root = world["root"]
    (root / "bad.jsonl").write_text('{"instance_id": "acme__calc-1", "model_patch": ""}\n{oops\n')
    (root / "unknown.jsonl").write_text(json.dumps({"instance_id": "nobody__x-1", "model_patch": ""}) + "\n")
    (root / "notdiff.jsonl").write_text(json.dumps({"instance_id": "acme__calc-1", "model_patch": "fix"}) + "\n")
    out = root / f"bad-{abs(hash(message))}"
    proc = orchard(world, "eval", "calc.jsonl", "--out", str(out), *args, *common(world))
    assert proc.returncode == 2, proc.stderr
    error_lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and message in error_lines[0], proc.stderr
    assert not out.exists()  # nothing half-written


def test_unknown_suite_lists_the_valid_ones(world):
    proc = orchard(world, "eval", "swe-nope", "--predictions", "gold")
    assert proc.returncode == 2 and "swe-verified" in proc.stderr


def _chromium(*args, cwd):
    profile = Path(cwd) / "chromium-profile"
    return subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.chromium
def test_chromium_renders_the_same_numbers_as_scorecard_json(world, tmp_path):
    out = world["root"] / "html"
    proc = orchard(world, "eval", "broken.jsonl", "--predictions", "gold", "--out", str(out),
                   "--max-errors", "1", *common(world))
    assert proc.returncode == 0, proc.stderr
    card = json.loads((out / "scorecard.json").read_text())
    dom = _chromium("--dump-dom", (out / "scorecard.html").as_uri(), cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout

    def value(ident):
        match = re.search(rf'id="{ident}"[^>]*data-value="([^"]+)"[^>]*>([^<]*)<', html)
        assert match, f"#{ident} not in the rendered DOM"
        return match.group(1), match.group(2)

    assert value("resolved") == (str(card["resolved"]), str(card["resolved"]))
    assert value("total") == (str(card["total"]), str(card["total"]))
    assert value("errors") == (str(card["errors"]), str(card["errors"]))
    rate, shown = value("resolved-rate")
    assert float(rate) == pytest.approx(card["resolved_rate"]) and shown == f"{100 * card['resolved_rate']:.1f}%"
    for category, count in card["by_category"].items():
        assert f'data-category="{category}">{count}<' in html
    for repo, score in card["by_repo"].items():
        assert f"{100 * score['resolved_rate']:.1f}%" in html and repo in html
    assert "<script" not in (out / "scorecard.html").read_text()  # self-contained, no JS
    assert not re.search(r'(src|href)="(https?:)?//', (out / "scorecard.html").read_text())
    shot = _chromium("--screenshot=" + str(tmp_path / "s.png"), "--window-size=1200,900",
                     (out / "scorecard.html").as_uri(), cwd=tmp_path)
    assert shot.returncode == 0 and (tmp_path / "s.png").stat().st_size > 10_000
    if os.environ.get("ORCHARD_KEEP_SCREENSHOT"):
        shutil.copy(tmp_path / "s.png", os.environ["ORCHARD_KEEP_SCREENSHOT"])


def test_ctrl_c_exits_130_with_a_partial_scorecard_and_no_sandbox_left(world):
    import signal
    import time

    root = world["root"]
    (root / "hang.jsonl").write_text(json.dumps({"instance_id": "acme__calc-1", "model_name_or_path": "m",
                                                 "model_patch": world["inst"]["hang"]}) + "\n")
    out = root / "interrupted"
    env = {**os.environ, "ORCHARD_HOME": str(world["home"])}
    proc = subprocess.Popen([sys.executable, "-m", "orchard_cli.main", "eval", "calc.jsonl", "--predictions",
                             "hang.jsonl", "--out", str(out), *common(world)], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not any((world["home"] / "env" / "local").glob("sb-*")) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # an attempt is under way in a sandbox (its patch hangs the tests for 600 s)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    card = json.loads((out / "scorecard.json").read_text())
    assert card["complete"] is False and card["missing"] >= 1
    assert not list((world["home"] / "env" / "local").glob("sb-*")), "a sandbox outlived the run"
