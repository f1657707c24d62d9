"""`orchard judge` on a web-mini gold run: a scripted vision judge (a real OpenAI-compatible server
on loopback) receives the task and the episode's screenshots; verdicts, reasons, the judge model
and the prompts' hash land in the scorecard; `orchard judge export` writes Online-Mind2Web's layout."""

from __future__ import annotations

import json

import pytest

from orchard_cli.main import main
from orchard_cli.models.scripted import ScriptedEndpoint

pytestmark = [pytest.mark.chromium, pytest.mark.bwrap]


@pytest.fixture(scope="module")
def gold_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("web") / "run"
    assert main(["eval", "web-mini", "--predictions", "gold", "--limit", "2", "--out", str(run)]) == 0
    return run


def image_parts(requests: list[dict]) -> int:
    return sum(1 for log in requests for m in log["body"]["messages"] if isinstance(m.get("content"), list)
               for part in m["content"] if part.get("type") == "image_url"
               and part["image_url"]["url"].startswith("data:image/png;base64,"))


def test_each_action_leaves_a_screenshot(gold_run) -> None:
    for folder in (gold_run / "logs").glob("*/attempt-1"):
        evidence = json.loads((folder / "evidence.json").read_text())
        acted = [d for d in evidence["dispatches"] if d["status"] == 200]
        shots = sorted(folder.glob("step-*.png"))
        assert len(shots) == len(acted) + 1 and shots[0].name == "step-000.png"  # the start page, then each action
        assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in shots)


def test_webjudge_reads_every_screenshot_and_writes_a_scorecard(gold_run, tmp_path) -> None:
    ep = ScriptedEndpoint(["The page shows the booking confirmed.\nScore: 4\nStatus: success"], cycle=True,
                          model="judge-v")
    info = ep.start()
    try:
        out = tmp_path / "judged"
        code = main(["judge", str(gold_run), "--method", "webjudge", "--judge-model", "judge-v",
                     "--judge-base-url", info.base_url, "--out", str(out)])
    finally:
        ep.stop()
    assert code == 0
    card = json.loads((out / "scorecard.json").read_text())
    assert card["judge_model"] == "judge-v" and card["method"] == "webjudge" and len(card["prompt_sha256"]) == 64
    assert card["attempts"] == card["judged"] == 2 and card["success_rate"] == 1.0 and card["agreement"] == 1.0
    rows = [json.loads(line) for line in open(out / "judged.jsonl")]
    screenshots = sum(r["screenshots"] for r in rows)
    # per attempt: key points, one call per screenshot, the verdict (which re-sends the kept ones)
    assert len(ep.requests) == sum(r["calls"] for r in rows) == screenshots + 2 * len(rows)
    assert image_parts(ep.requests) == 2 * screenshots
    assert all(r["details"]["image_scores"] and r["reasons"].endswith("Status: success") for r in rows)
    assert set(card["by_task"]) == {r["task_id"] for r in rows}
    assert not (out / "judged.jsonl.partial").exists()


def test_webvoyager_disagreeing_judge_and_an_undecided_reply(gold_run, tmp_path, capsys) -> None:
    ep = ScriptedEndpoint(["The booking form is empty.\nNOT SUCCESS", "I cannot tell."], model="judge-v")
    info = ep.start()
    try:
        code = main(["judge", str(gold_run), "--method", "webvoyager", "--judge-model", "judge-v",
                     "--judge-base-url", info.base_url, "--out", str(tmp_path / "v"), "--format", "json"])
    finally:
        ep.stop()
    assert code == 0
    card = json.loads(capsys.readouterr().out)
    assert card["judged"] == 1 and card["errors"] == 1 and card["success_rate"] == 0.0 and card["agreement"] == 0.0
    assert image_parts(ep.requests) == sum(min(3, len(list(f.glob("step-*.png"))))
                                           for f in (gold_run / "logs").glob("*/attempt-1"))


def test_bad_method_and_a_folder_that_is_not_a_run(gold_run, tmp_path, capsys) -> None:
    assert main(["judge", str(gold_run), "--method", "nope", "--judge-model", "m", "--judge-base-url",
                 "http://127.0.0.1:9/v1"]) == 2
    assert main(["judge", str(tmp_path), "--judge-model", "m", "--judge-base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "not an orchard eval run" in capsys.readouterr().err


def test_export_in_online_mind2web_layout(gold_run, tmp_path) -> None:
    out = tmp_path / "om2w"
    assert main(["judge", "export", str(gold_run), "--out", str(out)]) == 0
    folders = sorted(p for p in out.iterdir())
    assert len(folders) == 2
    for folder in folders:
        result = json.loads((folder / "result.json").read_text())
        assert set(result) == {"task_id", "task", "final_result_response", "action_history", "thoughts"}
        assert result["task_id"] == folder.name and result["action_history"]
        shots = sorted((folder / "trajectory").iterdir(), key=lambda p: int(p.name.split("_")[0]))
        assert [p.name for p in shots][:2] == ["0_screenshot.png", "1_screenshot.png"]
        assert len(shots) == len(result["action_history"]) + 1
    assert main(["judge", "export", str(gold_run), "--out", str(out)]) == 2  # never over a folder with files
