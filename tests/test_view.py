"""`orchard view FILE`: the HTML page of real distilled trajectories, as text and as Chromium
renders it."""

from __future__ import annotations

import json
import re
import subprocess
import zlib
from pathlib import Path

import pytest

import distill_world as dw
from orchard_cli.trajectory import read_trajectories
from orchard_cli.main import main

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture
def distilled(tmp_path_factory, monkeypatch):
    return dw.distilled(tmp_path_factory, monkeypatch)


def cli(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_one_page_for_all_episodes_and_one_per_episode(distilled, tmp_path, capsys):
    page = tmp_path / "all.html"
    code, stdout, _ = cli(capsys, "view", str(distilled), "--out", str(page))
    assert code == 0 and stdout.strip() == str(page)
    html = page.read_text()
    assert html.count('class="episode"') == 4 and "4 episodes, <b>2</b> resolved" in html
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)  # self-contained
    fixed = next(t for t in read_trajectories(distilled) if t.outcome.resolved)
    code, stdout, _ = cli(capsys, "view", str(distilled), "--episode", fixed.episode_id[:10])
    one = Path(stdout.strip())
    assert code == 0 and one.name == f"trajectories.{fixed.episode_id}.html" and one.parent == distilled.parent
    html = one.read_text()
    assert html.count('class="episode"') == 1 and ">resolved<" in html
    assert "sed -i &#x27;0,/return a - b/s//return a + b/&#x27; calc/__init__.py" in html  # the tool call
    assert '<span class="add">+    return a + b</span>' in html  # the patch
    assert "test_add (tests.test_calc.CalcTests)" in html and "add() now adds." in html
    assert "fixer" in html and "bash" in html


def test_an_unknown_episode_is_a_usage_error(distilled, capsys):
    code, _, stderr = cli(capsys, "view", str(distilled), "--episode", "ep-nope")
    assert code == 2 and "no episode" in stderr and "ep-" in stderr
    code, _, stderr = cli(capsys, "view", str(distilled), "--episode", "ep-")
    assert code == 2 and "4 episodes" in stderr


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _distinct_rows(data: bytes) -> int:
    """How many different pixel rows the (8-bit RGB/RGBA, non-interlaced) PNG has: a blank page has 1."""
    width, _ = _png_size(data)
    depth, colour = data[24], data[25]
    assert depth == 8 and colour in (2, 6)
    idat, pos = b"", 8
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * (3 if colour == 2 else 4) + 1
    return len({raw[i + 1:i + stride] for i in range(0, len(raw), stride)})


@pytest.mark.chromium
def test_chromium_renders_the_page(distilled, tmp_path, capsys):
    fixed = next(t for t in read_trajectories(distilled) if t.outcome.resolved)
    page = tmp_path / "one.html"
    assert cli(capsys, "view", str(distilled), "--episode", fixed.episode_id, "--out", str(page))[0] == 0
    common = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "add() now adds." in dom.stdout and json.dumps(fixed.task_id)[1:-1] in dom.stdout
    shot = tmp_path / "page.png"
    run = subprocess.run([*common, "--hide-scrollbars", "--window-size=1200,1600", f"--screenshot={shot}",
                          page.as_uri()], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    data = shot.read_bytes()
    assert _png_size(data) == (1200, 1600)
    assert _distinct_rows(data) > 100  # text, tables and code, not a blank page
