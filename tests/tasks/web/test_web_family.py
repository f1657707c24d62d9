"""The web family through the rollout core and the CLI, on the bundled web-mini suite: every task
is valid three ways (its gold passes, a null run and its near miss fail), the apps are out of the
agent sandbox's reach, a run is graded again from its evidence alone, and a run killed with -9
resumes running each attempt once and leaves no browser or app server behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from orchard_cli.family import RunOptions
import pytest

from orchard_cli.env import SandboxHandle, connect
from orchard_cli.rollout.episode import Episode, run_episode
from orchard_cli.rollout.solvers import GoldSolver
from orchard_cli.families import load_suite
from orchard_cli.tasks.validate import validate_tasks

pytestmark = [pytest.mark.chromium, pytest.mark.bwrap]


def orchard(cwd, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "orchard_cli.main", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "COLUMNS": "120"})


def test_every_web_mini_task_is_valid_three_ways():
    family, tasks = load_suite("web-mini")
    assert len(tasks) >= 40
    sites = {family.parsed(t).site for t in tasks}
    assert sites == {"shop", "wiki", "mail", "booking"}
    try:
        results = validate_tasks(family, tasks, workers=2)
    finally:
        family.close()
    bad = [f"{r.task_id}: {r.reason()}" for r in results if not r.valid]
    assert len(results) == len(tasks) and not bad, "\n".join(bad)


PROBE = """import json, os, socket, sys
seen = {}
for port in sys.argv[1].split(","):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect(("127.0.0.1", int(port))); seen[port] = "open"
    except OSError as exc:
        seen[port] = f"closed {exc}"
seen["state_folder"] = os.path.exists(sys.argv[2])
print(json.dumps(seen))
"""


@pytest.mark.parametrize("network", ["none", "proxy"])
def test_the_apps_their_state_and_the_browser_are_out_of_the_agent_sandboxs_reach(network):
    """As the gold solver's sandbox has it (no network) and as an agent's has it (only its proxy)."""
    import http.server
    import threading

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    family, tasks = load_suite("web-mini", limit=1)
    env = connect("local")
    episode = family.episode(tasks[0], RunOptions())
    spec = episode.spec("local")
    if network == "proxy":
        spec = spec.model_copy(update={"network": "proxy",
                                       "proxy_url": f"http://127.0.0.1:{proxy.server_address[1]}"})
    try:
        sandbox = SandboxHandle.create(env, spec)
        try:
            episode.setup(sandbox)
            web = episode.owned
            ports = [str(p) for p in web.apps.ports().values()]
            sandbox.write_file("probe.py", PROBE)
            job = sandbox.exec(["python3", "probe.py", ",".join(ports), str(web.root)], timeout=60)
            assert job.exit_code == 0, job.stderr
            seen = json.loads(job.stdout)
            assert all(seen[p].startswith("closed") for p in ports), seen
            assert seen["state_folder"] is False, "the apps' databases and Maildir are not visible inside"
        finally:
            sandbox.destroy()
    finally:
        episode.__exit__(None, None, None)
        family.close()
        env.close()
        proxy.shutdown()


class _BrowserCrashes(GoldSolver):
    """The gold solution, with the browser killed (as a crash would) before it starts."""

    def solve(self, context):
        web = context.env.owned
        subprocess.run(["pkill", "-9", "-f", f"ORCHARD_WEB_BROWSER {web.browser.root}"], check=True, timeout=30)
        deadline = time.monotonic() + 30
        while web.browser.failed() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return super().solve(context)


def test_a_browser_that_crashes_mid_episode_is_infra_error_in_the_run_and_in_a_regrade():
    family, tasks = load_suite("web-mini", limit=1)
    env = connect("local")
    try:
        result = run_episode(Episode(task=tasks[0], attempt=1, solver=_BrowserCrashes(), episode_id="crash"),
                             family=family, env=env, options=RunOptions())
        assert result.outcome.category == "infra_error", result.outcome
        assert result.evidence.state["failure"]
        with family.episode(tasks[0], RunOptions()) as regrade:  # what regrade reads: no sandbox, no browser
            assert regrade.grade(result.evidence, None).category == "infra_error"
        again = run_episode(Episode(task=tasks[0], attempt=2, solver=GoldSolver(), episode_id="after"),
                            family=family, env=env, options=RunOptions())
        assert again.outcome.category == "resolved" and family.pool.started == 2, "a dead set is never reused"
    finally:
        family.close()
        env.close()


def _ours(home) -> list[str]:
    """Browser and app processes of this ORCHARD_HOME (their command lines name its folders)."""
    out = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(home) in line and ("web" in line)]


def test_regrade_agrees_and_a_killed_run_resumes_each_attempt_once(tmp_path, _orchard_home):
    argv = [sys.executable, "-m", "orchard_cli.main", "eval", "web-mini", "--predictions", "gold", "--limit", "8",
            "--out", str(tmp_path / "run")]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = tmp_path / "run" / "results.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and len(results.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    assert _ours(_orchard_home), "the run's browser and apps are found while it runs"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while _ours(_orchard_home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ours(_orchard_home) == []
    done = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    keys = [(r["instance_id"], r["attempt"]) for r in rows]
    assert len(keys) == len(set(keys)) == 8 and all(r["resolved"] for r in rows)
    assert {"site", "category"} <= set(rows[0]["groups"])

    again = orchard(tmp_path, "eval", "regrade", str(tmp_path / "run"), "--format", "json")
    assert again.returncode == 0, again.stderr[-2000:]
    card = json.loads((tmp_path / "run" / "regrade" / "scorecard.json").read_text())
    assert card["resolved"] == 8 and set(card["by_group"]["site"]) <= {"shop", "wiki", "mail", "booking"}
    assert _ours(_orchard_home) == []
    assert list((_orchard_home / "web").iterdir()) == [], "the killed run's set folder is swept, the others removed"
