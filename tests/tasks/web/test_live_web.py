"""The live-web suites from the users' data files (WebVoyager, Online-Mind2Web, DeepShop), run
against local pages standing in for the live web (CI has no internet): orchard's web agent,
scripted by a teacher, browses them with `--network full`; the episodes wait for a judge
(needs_judge) and `orchard judge` decides them with the suite's own method, DeepShop aspect by
aspect. Without `--network full` no task starts (needs_network)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchard_cli.family import RunOptions
from orchard_cli.main import main
from orchard_cli.models.scripted import ScriptedEndpoint
from orchard_cli.families import load_suite

PAGES = {"/": "<html><title>Gadget shop</title><body><h1>Gadget shop</h1><a href='/mug.html'>Blue mug</a>"
              "</body></html>",
         "/mug.html": "<html><title>Blue mug</title><body><h1>Blue mug</h1><p>Price: $12, rated 4.6 stars</p>"
                      "</body></html>"}


class Site(BaseHTTPRequestHandler):
    hits: list[str] = []
    redirect_to = ""

    def do_GET(self) -> None:  # noqa: N802
        type(self).hits.append(self.path)
        if self.path == "/redir":  # an open redirect on the start site, to a loopback service
            self.send_response(302)
            self.send_header("Location", type(self).redirect_to)
            self.end_headers()
            return
        body = PAGES.get(self.path.split("?")[0])
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write((body or "not found").encode())

    def log_message(self, *args) -> None:
        pass


class Other(Site):
    hits: list[str] = []


def serve(handler=Site) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def deepshop_rows(url: str) -> list[dict]:
    return [{"web_name": "Gadgets", "id": "Gadgets--1", "ques": "Find a blue mug rated over 4 stars.", "web": url,
             "attribute": "Blue mug", "filter": "Rated over 4 stars", "sort": "None", "category": "Home",
             "difficulty": "easy"},
            {"web_name": "Gadgets", "id": "Gadgets--2", "ques": "Find a blue mug.", "web": url,
             "attribute": "Blue mug", "filter": "None", "sort": "None", "category": "Home", "difficulty": "easy"}]


def test_the_three_published_formats_load(tmp_path) -> None:
    voyager = write_jsonl(tmp_path / "WebVoyager_data.jsonl", [
        {"web_name": "Allrecipes", "id": "Allrecipes--0", "ques": "Find a lasagna recipe.", "web": "https://www.allrecipes.com/"},
        {"web_name": "GitHub", "id": "GitHub--3", "ques": "Find the most starred repo.", "web": "https://github.com/"}])
    family, tasks = load_suite("webvoyager", dataset=voyager)
    assert family.name == "live-web" and [t.task_id for t in tasks] == ["Allrecipes--0", "GitHub--3"]
    assert family.describe(tasks[0])["start"] == "https://www.allrecipes.com/"
    assert family.groups(tasks[1]) == {"website": "GitHub"}
    with family.episode(tasks[1], RunOptions()) as episode:
        assert "The browser is open at https://github.com/" in episode.prompt("/workspace")
        assert episode.requires.network and episode.requires.host == ["bubblewrap", "chromium", "playwright"]

    mind2web = tmp_path / "Online_Mind2Web.json"
    mind2web.write_text(json.dumps([
        {"task_id": "b7258ee05d75e6c50673a59914db412e", "website": "https://www.carmax.com/",
         "task_description": "Compare two SUVs.", "reference_length": 9, "level": "medium"},
        {"task_id": "0a1b", "website": "www.kbb.com", "confirmed_task": "Value my car.", "reference_length": 5}]))
    family, tasks = load_suite("online-mind2web", dataset=str(mind2web))
    described = [family.describe(t) for t in tasks]
    assert [d["start"] for d in described] == ["https://www.carmax.com/", "https://www.kbb.com"]
    assert described[0]["reference_length"] == 9 and described[0]["judge_method"] == "webjudge"
    assert family.groups(tasks[0]) == {"website": "carmax.com", "level": "medium"}

    family, tasks = load_suite("deepshop", dataset=write_jsonl(tmp_path / "deepshop.jsonl", deepshop_rows("https://a.example/")))
    assert [family.describe(t)["aspects"] for t in tasks] == [{"attribute": "Blue mug", "filter": "Rated over 4 stars"},
                                                             {"attribute": "Blue mug"}]
    assert family.groups(tasks[0]) == {"website": "Gadgets", "level": "easy", "category": "Home"}


@pytest.mark.parametrize("rows, says", [
    ([{"web_name": "A", "id": "A--0", "web": "https://a.example/"}], "line 1: no 'ques'"),
    ([{"id": "A--0", "ques": "q", "web": "https://a.example/"}, {"id": "A--0", "ques": "q", "web": "https://a.example/"}],
     "used twice"),
    ([{"id": "A--0", "ques": "q", "web": "ftp://a.example/"}], "not an http(s) address"),
    ([{"id": "A--0", "ques": "q", "web": "https://a.example/", "web_name": ["A"]}], "'web_name' is ['A'], not a text"),
])
def test_a_bad_data_file_is_one_line_and_exit_2(tmp_path, capsys, rows, says) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    assert main(["eval", "webvoyager", "--dataset", path, "--predictions", "empty", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not (tmp_path / "r").exists(), "nothing written for a refused run"


@pytest.mark.parametrize("suite, row, says", [
    ("online-mind2web", {"task_id": "x1", "website": "https://a.example/", "task_description": "d",
                         "reference_length": float("nan")}, "'reference_length' is nan"),
    ("deepshop", {**deepshop_rows("https://a.example/")[0], "category": 5.5}, "'category' is 5.5, not a text"),
])
def test_bad_fields_of_the_other_formats(tmp_path, capsys, suite, row, says) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")  # NaN as JSON allows it (json.dumps writes NaN)
    assert main(["eval", suite, "--dataset", str(path), "--predictions", "empty", "--out", str(tmp_path / "r")]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_without_a_data_file_or_with_a_bad_network_mode(tmp_path, capsys) -> None:
    assert main(["eval", "deepshop", "--predictions", "empty", "--out", str(tmp_path / "r")]) == 2
    assert "--dataset FILE" in capsys.readouterr().err
    path = write_jsonl(tmp_path / "d.jsonl", deepshop_rows("https://a.example/"))
    assert main(["eval", "deepshop", "--dataset", path, "--network", "open", "--out", str(tmp_path / "r")]) == 2
    assert "--network 'open'" in capsys.readouterr().err


def test_without_network_full_no_task_starts(tmp_path, capsys) -> None:
    path = write_jsonl(tmp_path / "w.jsonl", [{"id": "A--0", "ques": "q", "web": "https://a.example/"}] * 1)
    run = tmp_path / "run"
    assert main(["eval", "webvoyager", "--dataset", path, "--predictions", "empty", "--out", str(run)]) == 0
    card = json.loads((run / "scorecard.json").read_text())
    assert card["by_category"]["needs_network"] == 1 and card["resolved"] == 0
    capsys.readouterr()
    assert main(["judge", str(run), "--method", "deepshop", "--judge-model", "m",
                 "--judge-base-url", "http://127.0.0.1:9/v1"]) == 2  # a WebVoyager run has no DeepShop aspects
    assert "holds no DeepShop task" in capsys.readouterr().err


@pytest.fixture(scope="module")
def site():
    server = serve()
    other = serve(Other)  # a second loopback service the pages must not reach
    Site.redirect_to = f"http://127.0.0.1:{other.server_port}/secret"
    yield f"http://127.0.0.1:{server.server_port}", f"http://127.0.0.1:{other.server_port}"
    server.shutdown()
    other.shutdown()


@pytest.fixture(scope="module")
def deepshop_run(site, tmp_path_factory):
    """Two DeepShop tasks browsed by orchard's web agent, scripted: the first opens the product
    page, tries the cloud metadata address, answers; the second tries another loopback service,
    an open redirect on the start site to it, and a public-looking name that resolves to loopback,
    and answers."""
    import socket

    start, other = site
    tmp = tmp_path_factory.mktemp("live")
    data = write_jsonl(tmp / "deepshop.jsonl", deepshop_rows(start + "/"))
    teacher = ScriptedEndpoint([f'goto("{start}/mug.html")', 'goto("http://169.254.169.254/latest/meta-data")',
                                'answer("Blue mug, $12, 4.6 stars")',
                                f'goto("{other}/")', f'goto("{start}/redir")',
                                f'goto("http://intranet.example:{other.rsplit(":", 1)[1]}/secret")',
                                'answer("A blue mug")'], model="teacher")
    info = teacher.start()
    run = tmp / "run"
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):  # a DNS name that points at the host's loopback
        return real("127.0.0.1" if host == "intranet.example" else host, *args, **kwargs)

    socket.getaddrinfo = resolve
    try:
        code = main(["eval", "deepshop", "--dataset", data, "--network", "full", "--harness", "web",
                     "--model", "teacher", "--base-url", info.base_url, "--max-turns", "6", "--out", str(run)])
    finally:
        socket.getaddrinfo = real
        teacher.stop()
    assert code == 0
    return run


def _evidence(run, task_id: str) -> dict:
    return json.loads(next((run / "logs").glob(f"{task_id}*/attempt-1/evidence.json")).read_text())


@pytest.mark.chromium
@pytest.mark.bwrap
def test_the_agent_browses_the_pages_and_the_episodes_wait_for_a_judge(deepshop_run, site) -> None:
    card = json.loads((deepshop_run / "scorecard.json").read_text())
    assert card["by_category"]["needs_judge"] == 2 and card["errors"] == 0, card["by_category"]
    first = _evidence(deepshop_run, "Gadgets--1")
    assert first["answer"] == "Blue mug, $12, 4.6 stars"
    acted = [(d["tool"], d["status"]) for d in first["dispatches"] if d["tool"] != "observe"]
    assert acted == [("goto", 200), ("goto", 400), ("answer", 200)]
    assert first["state"]["url"].endswith("/mug.html")
    assert any(b["url"].startswith("http://169.254.169.254") for b in first["state"]["blocked"])
    second = _evidence(deepshop_run, "Gadgets--2")
    blocked = [b["url"] for b in second["state"]["blocked"]]
    assert f"{site[1]}/" in blocked, "another loopback port is not the web"
    assert f"{site[1]}/secret" in blocked, "nor is it behind a redirect of the start site"
    assert any(u.startswith("http://intranet.example") for u in blocked), "nor behind a name that resolves to it"
    assert Other.hits == [] and Site.hits.count("/redir") == 1
    assert Site.hits.count("/mug.html") == 1
    folder = next((deepshop_run / "logs").glob("Gadgets--1*/attempt-1"))
    succeeded = sum(d["status"] == 200 for d in first["dispatches"])
    assert len(list(folder.glob("step-*.png"))) == succeeded + 1, "the start page, then each action that worked"


@pytest.mark.chromium
@pytest.mark.bwrap
def test_deepshop_is_judged_aspect_by_aspect(deepshop_run, tmp_path) -> None:
    judge = ScriptedEndpoint(["The screenshot shows a blue mug.\nSUCCESS",
                              "No rating filter was applied on the page.\nNOT SUCCESS",
                              "A blue mug is shown.\n**SUCCESS**"], model="judge-v")
    info = judge.start()
    try:
        assert main(["judge", str(deepshop_run), "--judge-model", "judge-v", "--judge-base-url", info.base_url,
                     "--out", str(tmp_path / "j")]) == 0  # --method auto: the suite's own, deepshop
    finally:
        judge.stop()
    card = json.loads((tmp_path / "j" / "scorecard.json").read_text())
    assert card["method"] == "deepshop" and card["judged"] == 2 and card["successes"] == 1
    assert card["aspect_rates"] == {"attribute": 1.0, "filter": 0.0}
    rows = {r["task_id"]: r for r in map(json.loads, open(tmp_path / "j" / "judged.jsonl"))}
    assert rows["Gadgets--1"]["details"]["aspects"] == {"attribute": True, "filter": False}
    assert rows["Gadgets--2"]["success"] is True and rows["Gadgets--2"]["resolved"] is None
    asked = [m for r in judge.requests for m in r["body"]["messages"] if m["role"] == "user"]
    assert [m["content"][0]["text"].split("\n")[0] for m in asked] == [
        "Requirement: Blue mug", "Requirement: Rated over 4 stars", "Requirement: Blue mug"]
    assert all(p["type"] == "image_url" for m in asked for p in m["content"][1:])


@pytest.mark.chromium
@pytest.mark.bwrap
def test_deepshop_method_needs_deepshop_tasks_and_export_reads_a_live_run(deepshop_run, tmp_path, capsys) -> None:
    out = tmp_path / "m2w"
    assert main(["judge", "export", str(deepshop_run), "--out", str(out)]) == 0
    result = json.loads(next(out.glob("*/result.json")).read_text())
    assert result["task"] in ("Find a blue mug rated over 4 stars.", "Find a blue mug.")
    web_mini = tmp_path / "wm"
    assert main(["eval", "web-mini", "--predictions", "empty", "--limit", "1", "--out", str(web_mini)]) == 0
    capsys.readouterr()
    assert main(["judge", str(web_mini), "--method", "deepshop", "--judge-model", "m",
                 "--judge-base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "holds no DeepShop task" in capsys.readouterr().err
