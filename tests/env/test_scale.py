"""1,200 local sandboxes alive at once in one process whose soft open-files limit starts at 1,024:
the manager raises it, descriptors above 1,024 occur (select() would fail on them), one IO thread
serves every sandbox, each runs a command, and nothing is left afterwards."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

COUNT = 1200
SCRIPT = textwrap.dedent('''\
    import json, os, resource, threading
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from orchard_cli.env.manager import EnvManager
    from orchard_cli.env.models import ExecRequest, SandboxSpec

    count = int(os.environ["SCALE_COUNT"])
    soft_before = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    env = EnvManager("local")
    threads_before = threading.active_count()
    with ThreadPoolExecutor(8) as pool:
        infos = list(pool.map(lambda _: env.create_sandbox(SandboxSpec()), range(count)))
    fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
    threads = threading.active_count() - threads_before
    with ThreadPoolExecutor(16) as pool:
        jobs = list(pool.map(lambda i: env.exec(i.sandbox_id, ExecRequest(command="echo $((6*7))", wait=True)),
                             infos))
    alive = len(env.list_sandboxes())
    nofile = env.exec(infos[0].sandbox_id, ExecRequest(command="ulimit -n", wait=True)).stdout.strip()
    env.close()
    folder = Path(os.environ["ORCHARD_HOME"]) / "env" / "local"
    ids = {f"orchard-{i.sandbox_id}" for i in infos}
    cgroups = [root for root, _, _ in os.walk("/sys/fs/cgroup") if os.path.basename(root) in ids]
    print(json.dumps({
        "soft_before": soft_before, "soft_after": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "max_fd": fds[-1], "threads": threads, "alive": alive, "nofile": nofile,
        "ok": sum(1 for j in jobs if j.ok and j.stdout.strip() == "42"),
        "folders": sorted(p.name for p in folder.iterdir()) if folder.exists() else [],
        "cgroups": cgroups,
        "children": [p for p in os.listdir("/proc") if p.isdigit() and
                     open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getpid())],
    }))
''')


def test_1200_sandboxes_past_a_1024_soft_limit(_orchard_home):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2 * COUNT + 512:
        why = f"this machine's hard open-files limit ({hard}) cannot hold {COUNT} sandboxes"
        pytest.fail(why) if os.environ.get("ORCHARD_TEST_STRICT") == "1" else pytest.skip(why)

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=900,
                          preexec_fn=low_soft_limit,
                          env={**os.environ, "SCALE_COUNT": str(COUNT), "ORCHARD_HOME": str(_orchard_home)})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["soft_before"] == 1024 and seen["soft_after"] > 2 * COUNT, seen
    assert seen["nofile"] == "1024", seen  # commands keep the limit the process started with
    assert seen["max_fd"] > 1024, seen  # select() could not watch these
    assert seen["alive"] == COUNT and seen["ok"] == COUNT, seen
    assert seen["threads"] <= 4, seen  # no thread per sandbox: one IO loop (and the reaper's)
    assert seen["folders"] == [] and seen["cgroups"] == [] and seen["children"] == [], seen
