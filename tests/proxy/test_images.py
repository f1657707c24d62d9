"""Screenshots in recorded calls: a vision agent re-sends its screenshots on every turn; the proxy's
calls file and the trajectories file keep each image once, as a file beside them, and no line
carries base64. `orchard view` shows the images; `internalize` gives the bytes back."""

from __future__ import annotations

import base64
import json
import struct
import zlib

from proxy_helpers import client

from orchard_cli.images import PREFIX, images_dir, internalize
from orchard_cli.records import JsonlWriter
from orchard_cli.trajectory import Trajectory, TrajectoryOutcome, read_trajectories
from orchard_cli.view import view


def _png(seed: int, size: int = 96) -> bytes:
    """A real PNG of noise (incompressible, ~27 KiB: a screenshot's weight in a line)."""
    import random

    rng = random.Random(seed)
    rows = b"".join(b"\x00" + bytes(rng.getrandbits(8) for _ in range(size * 3)) for _ in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _externalized(value, folder):
    from orchard_cli.images import ImageStore

    return ImageStore(folder / "x").externalize(value)


def _url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def test_ten_calls_resending_five_screenshots_store_five_files_and_no_base64_line(scripted, proxy_for, tmp_path):
    shots = [_png(i) for i in range(5)]
    upstream = scripted([f"step {i}" for i in range(10)], dialects=("chat",))
    calls = tmp_path / "calls" / "calls.jsonl"
    proxy = proxy_for(upstream, out=calls)
    episode = proxy.open_episode("vision-1")
    http = client(episode)
    messages = [{"role": "system", "content": "You see the page."}]
    for turn in range(10):
        seen = shots[: turn // 2 + 1]  # a new screenshot every second turn, all of them re-sent
        content = [{"type": "text", "text": f"turn {turn}"}, *({"type": "image_url", "image_url": {"url": _url(s)}}
                                                           for s in seen)]
        reply = http.post("/chat/completions", json={"model": "m", "messages": [*messages, {"role": "user",
                                                                                            "content": content}]})
        assert reply.status_code == 200
    records = episode.records
    proxy.stop()

    lines = calls.read_text().splitlines()
    assert len(lines) == 10 and max(len(line.encode()) for line in lines) < 64 * 1024
    assert "base64," not in calls.read_text()
    stored = sorted(p.name for p in images_dir(calls).iterdir())
    assert len(stored) == 5 and all(name.endswith(".png") for name in stored)
    last = json.loads(lines[-1])["request"]["messages"][-1]["content"]
    refs = [p["image_url"]["url"] for p in last if p["type"] == "image_url"]
    assert len(refs) == 5 and all(r.startswith(PREFIX) for r in refs)
    back = internalize(last, images_dir(calls))  # the bytes come back
    assert back[1] == {"type": "image_url", "image_url": {"url": _url(shots[0])}} and back[0] == last[0]
    lookalike = {"role": "tool", "content": _url(shots[0]) + " and more text"}  # not an image part
    assert _url(shots[0]) in json.dumps(_externalized(lookalike, tmp_path))

    trajectories = tmp_path / "run" / "trajectories.jsonl"
    record = Trajectory(episode_id="vision-1", task_id="t", suite="s", family="web", source="agent", harness="h",
                        model="m", attempt=1, problem_statement="look", calls=records,
                        messages=records[-1].request["messages"], tools=[],
                        outcome=TrajectoryOutcome(resolved=False, category="unresolved"))
    with JsonlWriter(trajectories, images=True) as writer:
        writer.write(record)
    text = trajectories.read_text()
    assert len(text.encode()) < 64 * 1024 and "base64," not in text
    assert sorted(p.name for p in images_dir(trajectories).iterdir()) == stored
    [back] = read_trajectories(trajectories)
    assert back.calls[-1].request["messages"][-1]["content"][1]["image_url"]["url"] == refs[0]

    from orchard_cli.export import export_hf
    import pyarrow.parquet as pq

    exported = export_hf(trajectories, tmp_path / "dataset")
    [table] = [pq.read_table(f) for f in exported.files]
    content = json.loads(table.to_pylist()[0]["messages"][-1]["content"])
    assert content[1]["image_url"]["url"] == _url(shots[0]), "a dataset carries its images inline"

    page, shown = view(trajectories, out=tmp_path / "pages" / "view.html")
    html = page.read_text()
    assert shown == 1 and html.count("<img class='shot' src='../run/trajectories.images/") == 5
    assert all((page.parent / "../run/trajectories.images" / name).is_file() for name in stored)
