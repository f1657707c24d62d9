"""Claw services benchmark: cold start and warm reset of a service set, beside their floors.

Everything is measured in one run and printed as one table (medians, p90, ratios):

  cold start   floor: each server started bare (`python -m aiosmtpd -n`, pymap's maildir backend,
               `python -m radicale --auth-type none`), time to the first accepted connection, alone
               and all three at once | ClawServices.start() (the three, configured, in parallel)
  warm reset   floor: writing the same fixture's files with no server at all (MailStore.build +
               CalStore.build) | ClawServices.reset(fixture), small and medium fixtures | a
               restart of the bare servers, which is what a reset saves
  tool calls   list_messages, send_message (real SMTP submission), create_event, snapshot

Usage: .venv/bin/python bench/claw_services_bench.py [--starts 5] [--resets 30] [--calls 30]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchard_cli.tasks.claw.services import ClawServices, ServicesFixture
from orchard_cli.tasks.claw.services.calstore import CalStore
from orchard_cli.tasks.kit.mailstore import MailStore

PY = sys.executable


def fixture(messages: int, events: int, contacts: int) -> ServicesFixture:
    half = messages // 2

    def day(i: int) -> str:
        return f"2026-12-{1 + i % 28:02d}"

    inbox = [{"id": f"m{i}", "from": f"Sender {i} <s{i}@acme.test>", "to": ["me@example.com"],
              "subject": f"Message {i}", "date": f"2026-11-{1 + i % 28:02d}T09:00:00+01:00",
              "body": "Hello,\n\nsome text for the search to look through.\n" * 5, "unread": i % 3 == 0}
             for i in range(messages)]
    return ServicesFixture.model_validate({
        "mail": {"address": "me@example.com", "name": "Alex Doe",
                 "mailboxes": {"INBOX": inbox[: half or messages], "Archive": inbox[half or messages:]}},
        "calendar": {"timezone": "Europe/Berlin",
                     "events": [{"uid": f"e{i}", "summary": f"Meeting {i}", "start": f"{day(i)}T10:00:00+01:00",
                                 "end": f"{day(i)}T11:00:00+01:00", "attendees": ["bob@acme.test"]}
                                for i in range(events)],
                     "todos": [{"uid": f"t{i}", "summary": f"Todo {i}", "due": "2026-12-05"}
                               for i in range(events // 2)]},
        "contacts": [{"uid": f"c{i}", "name": f"Person {i}", "email": f"p{i}@acme.test"} for i in range(contacts)],
    })


SMALL = fixture(3, 2, 2)
MEDIUM = fixture(50, 20, 20)


def stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[math.ceil(len(ordered) * 0.9) - 1]


def row(name: str, samples: list[float], ref: float | None = None, ref_name: str = "floor") -> str:
    med, p90 = stats(samples)
    extra = f"  x{med / ref:6.2f} of {ref_name}" if ref else ""
    return f"  {name:<52} median {med:8.1f} ms  p90 {p90:8.1f} ms  (n={len(samples)}){extra}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bare_command(name: str, port: int, folder: Path) -> list[str]:
    if name == "smtp":
        return [PY, "-m", "aiosmtpd", "-n", "-l", f"127.0.0.1:{port}"]
    if name == "imap":
        return [PY, "-c", "from pymap.main import main; main()", "--no-tls", "--host", "127.0.0.1",
                "--port", str(port), "maildir", str(folder / "imap")]
    return [PY, "-m", "radicale", "--config", "", "--server-hosts", f"127.0.0.1:{port}", "--auth-type", "none",
            "--storage-filesystem-folder", str(folder / "dav")]


def bare_start(names: tuple[str, ...]) -> float:
    """Start the named servers bare, at once; ms until every one accepted a connection."""
    folder = Path(tempfile.mkdtemp(prefix="claw-bare-"))
    env = {**os.environ, "TMPDIR": str(folder), "FQDN": "localhost"}
    began = time.perf_counter()
    procs = {}
    for name in names:
        port = free_port()
        procs[name] = (subprocess.Popen(bare_command(name, port, folder), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, env=env), port)
    try:
        for name, (proc, port) in procs.items():
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"bare {name} exited with {proc.returncode}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.005)
        return (time.perf_counter() - began) * 1000
    finally:
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


def ours_start(starts: int) -> tuple[list[float], list[float]]:
    cold, stops = [], []
    for _ in range(starts):
        root = Path(tempfile.mkdtemp(prefix="claw-bench-"))
        services = ClawServices(root)
        began = time.perf_counter()
        services.start()
        cold.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        services.stop()
        stops.append((time.perf_counter() - began) * 1000)
        shutil.rmtree(root, ignore_errors=True)
    return cold, stops


def files_only(fx: ServicesFixture, runs: int) -> list[float]:
    out = []
    for i in range(runs):
        folder = Path(tempfile.mkdtemp(prefix="claw-files-"))
        began = time.perf_counter()
        MailStore.build(folder / f"a{i}", fx.mail)
        CalStore(folder / "dav", "me", fx.calendar.timezone).build(fx.calendar, fx.contacts)
        out.append((time.perf_counter() - began) * 1000)
        shutil.rmtree(folder, ignore_errors=True)
    return out


def timed(fn, runs: int) -> list[float]:
    fn()
    out = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        out.append((time.perf_counter() - began) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5, help="cold starts (and bare starts) to time")
    parser.add_argument("--resets", type=int, default=30, help="warm resets to time, per fixture")
    parser.add_argument("--calls", type=int, default=30, help="tool calls to time, per action")
    args = parser.parse_args()
    out = [f"claw services benchmark  (python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
           f"load {os.getloadavg()[0]:.2f})", "", "cold start: time to every server accepting connections"]

    bare = {name: [bare_start((name,)) for _ in range(args.starts)] for name in ("smtp", "imap", "caldav")}
    together = [bare_start(("smtp", "imap", "caldav")) for _ in range(args.starts)]
    floor = statistics.median(together)
    for name, label in (("smtp", "aiosmtpd"), ("imap", "pymap maildir"), ("caldav", "radicale")):
        out.append(row(f"floor: bare {label} alone", bare[name]))
    out.append(row("floor: the three bare, at once", together))
    cold, stops = ours_start(args.starts)
    out.append(row("ClawServices.start()", cold, floor))
    out.append(row("ClawServices.stop()", stops))

    out += ["", "warm reset: state made exactly the fixture"]
    root = Path(tempfile.mkdtemp(prefix="claw-bench-"))
    services = ClawServices(root)
    services.start()
    try:
        for label, fx in (("small (3 mails, 2 events, 2 contacts)", SMALL),
                          ("medium (50 mails, 20 events, 10 todos, 20 contacts)", MEDIUM)):
            files = files_only(fx, args.resets)
            out.append(row(f"floor: the files alone, {label.split(' ')[0]}", files))
            resets = timed(lambda fx=fx: services.reset(fx), args.resets)
            out.append(row(f"reset, {label}", resets, statistics.median(files)))
            out.append(row(f"reset, {label.split(' ')[0]}, vs a bare restart", resets, floor, "restart"))
        services.reset(MEDIUM)
        out += ["", "tool calls (medium fixture)"]
        out.append(row("mail.list_messages", timed(lambda: services.call("mail", "list_messages", {}), args.calls)))
        out.append(row("mail.send_message (SMTP submission)", timed(lambda: services.call(
            "mail", "send_message", {"to": "bob@acme.test", "subject": "Hi", "body": "Hello"}), args.calls)))
        out.append(row("calendar.create_event", timed(lambda: services.call("calendar", "create_event", {
            "summary": "X", "start": "2026-12-02T10:00:00+01:00", "end": "2026-12-02T11:00:00+01:00"}), args.calls)))
        out.append(row("snapshot()", timed(services.snapshot, args.calls)))
        out.append(row("failed() (probes all three)", timed(services.failed, args.calls)))
    finally:
        services.stop()
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
