"""Cross-check orchard's MiniWoB++ suite (tasks/miniwob/suite.py) against BrowserGym's miniwob tasks
on the same episodes: the same instruction and the same task area for one seed, and the same
verdict after the same reference steps.

BrowserGym pins playwright==1.44, so it lives in a venv of its own, never in orchard's:

    python3 -m venv ~/.cache/orchard-browsergym
    ~/.cache/orchard-browsergym/bin/pip install browsergym-miniwob==0.14.3

It drives the same Debian Chromium by executable path here. (Code that lets BrowserGym launch its
own browser, `gym.make("browsergym/miniwob.click-button")`, needs PLAYWRIGHT_BROWSERS_PATH instead:
a folder holding `chromium-1117/chrome-linux/chrome` -> Debian's binary and an empty
`chromium-1117/INSTALLATION_COMPLETE`.) Both sides read the HTML of the `miniwob` package installed
in orchard's venv (BrowserGym's MINIWOB_URL, trailing slash required).

For each task and seed, BrowserGym's own task class sets the episode up on its page and reports its
goal, the task area's HTML and the Math.seedrandom value it drew from the seed; orchard's
`suite.start` runs that value; then the reference steps of tasks/miniwob/gold.py (read off the
instruction) run on both pages, and BrowserGym's `validate()` and orchard's `suite.reward` must
agree (BrowserGym's reward is 1.0 exactly when orchard's `success` holds).

Usage: .venv/bin/python bench/miniwob_crosscheck.py [--python ~/.cache/orchard-browsergym/bin/python]
       [--tasks click-button,enter-text] [--seeds 0,1,2]
Without that venv it prints how to make it and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from orchard_cli.tasks.miniwob import suite
from orchard_cli.tasks.miniwob.gold import SOLVERS, gold_steps

DEFAULT_PYTHON = Path.home() / ".cache" / "orchard-browsergym" / "bin" / "python"
SHELL = os.environ.get("ORCHARD_CHROMIUM") or "/usr/lib/chromium/chromium-headless-shell"

# Runs in BrowserGym's venv: JSON lines in (setup, act), JSON lines out.
HELPER = r'''
import copy, json, sys
from playwright.sync_api import sync_playwright
from browsergym.miniwob import ALL_MINIWOB_TASKS

shell, base_url = sys.argv[1], sys.argv[2]
classes = {cls.subdomain: cls for cls in ALL_MINIWOB_TASKS}
pw = sync_playwright().start()
browser = pw.chromium.launch(executable_path=shell, args=["--no-sandbox"])
context = task = page = None
for line in sys.stdin:
    msg = json.loads(line)
    try:
        if msg["op"] == "setup":
            if context is not None:
                context.close()
            task = classes[msg["task"]](seed=msg["seed"], base_url=base_url)
            js_seed = int(copy.deepcopy(task.random).randint(0, 1000000))  # what setup() will draw
            context = browser.new_context(viewport=task.viewport)
            page = context.new_page()
            goal, info = task.setup(page)
            out = {"goal": goal, "js_seed": js_seed, "area": page.inner_html("#area"), "done": info["DONE_GLOBAL"]}
        else:
            for tool, args in msg["steps"]:
                if tool == "click":
                    page.click(args["selector"], timeout=5000)
                elif tool == "fill":
                    page.fill(args["selector"], args["value"], timeout=5000)
                elif tool == "check":
                    page.set_checked(args["selector"], args.get("checked", True), timeout=5000)
                else:
                    raise ValueError(f"no such step here: {tool}")
            reward, done, _, info = task.validate(page, [])
            out = {"reward": reward, "done": done, "raw_reward": info["RAW_REWARD_GLOBAL"]}
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out), flush=True)
browser.close()
pw.stop()
'''


class BrowserGym:
    def __init__(self, python: Path) -> None:
        base_url = (suite.html_root() / "miniwob").as_uri() + "/"
        self.proc = subprocess.Popen([str(python), "-c", HELPER, SHELL, base_url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def ask(self, **msg) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("BrowserGym's helper died (its stderr is above)")
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


async def orchard_side(page, name: str, js_seed: int, steps: list | None) -> dict:
    started = await suite.start(page, name, js_seed)
    out = {"goal": started["utterance"], "area": await page.inner_html("#area")}
    for tool, args in steps or []:
        if tool == "click":
            await page.click(args["selector"], timeout=5000)
        elif tool == "fill":
            await page.fill(args["selector"], args["value"], timeout=5000)
        elif tool == "check":
            await page.set_checked(args["selector"], args.get("checked", True), timeout=5000)
    out["reward"] = await suite.reward(page)
    return out


async def crosscheck(python: Path, tasks: list[str], seeds: list[int]) -> int:
    from playwright.async_api import async_playwright

    gym = BrowserGym(python)
    failures = 0
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=SHELL, args=["--no-sandbox"])
        page = await browser.new_page()
        print("task                 seed  js_seed  goal  area  bgym_reward  orchard_raw  agree")
        for name in tasks:
            for seed in seeds:
                theirs = gym.ask(op="setup", task=name, seed=seed)
                if "error" in theirs:
                    print(f"{name:20} {seed:4}  BrowserGym: {theirs['error']}")
                    failures += 1
                    continue
                steps = gold_steps(name, theirs["goal"])
                ours = await orchard_side(page, name, theirs["js_seed"], steps)
                judged = gym.ask(op="act", steps=steps or []) if steps else {"reward": None}
                same_goal, same_area = ours["goal"] == theirs["goal"], ours["area"] == theirs["area"]
                agree = judged["reward"] is None or (judged["reward"] == 1.0) == ours["reward"]["success"]
                ok = same_goal and same_area and agree and "error" not in judged
                failures += not ok
                print(f"{name:20} {seed:4}  {theirs['js_seed']:7}  {same_goal!s:5} {same_area!s:5} "
                      f"{judged.get('reward', judged.get('error'))!s:11}  {ours['reward']['raw_reward']:11}  {agree}")
        await browser.close()
    gym.close()
    print(f"{failures} disagreement(s)")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", type=Path,
                        default=Path(os.environ.get("ORCHARD_BROWSERGYM_PYTHON") or DEFAULT_PYTHON))
    parser.add_argument("--tasks", default=",".join(sorted(SOLVERS)))
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    if not args.python.is_file():
        print(f"no BrowserGym venv at {args.python}; make one (outside orchard's venv):\n"
              f"  python3 -m venv {args.python.parent.parent}\n"
              f"  {args.python.parent}/pip install browsergym-miniwob==0.14.3", file=sys.stderr)
        return 0
    tasks = [t for t in args.tasks.split(",") if t]
    return asyncio.run(crosscheck(args.python, tasks, [int(s) for s in args.seeds.split(",")]))


if __name__ == "__main__":
    sys.exit(main())
