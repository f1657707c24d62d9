"""What one `task-tool` call costs inside a sandbox: the command orchard's bash agent gives a task's
tools, against the recording proxy's real tool gateway and a tool that answers at once.

    python bench/task_tool_bench.py [--calls 30] [--rounds 5] [--json OUT]

In one local (bubblewrap) sandbox with network='proxy', each way runs `--calls` calls in a shell
loop, timed inside the sandbox; the ways are interleaved round by round and the medians over the
rounds are reported (ms per call):

  floor            `bash -c true`: what any command costs the bash agent (a process)
  task_tool.py     `python3 task_tool.py NAME JSON`: a Python process per call (before)
  helper, script   `task-tool NAME JSON` on PATH (task_tool.sh) to the agent's helper over
                   /dev/tcp: one bash per call, no Python
  helper, function `task-tool` as the exported bash function the agent sets: no process
  each from `bash -c`: the helper ways as the bash agent runs a command (its own bash -c first)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

WAYS = {
    "floor (bash -c true)": ("bash -c true", False),
    "task_tool.py (a python per call)": ("python3 /tmp/b/task_tool.py echo '{\"a\": 1}' >/dev/null", False),
    "task-tool, helper (script)": ("command task-tool echo '{\"a\": 1}' >/dev/null", True),
    "task-tool, helper (function)": ("task-tool echo '{\"a\": 1}' >/dev/null", True),
    "bash -c + task-tool, helper (function)": ("bash -c \"task-tool echo '{\\\"a\\\": 1}' >/dev/null\"", True),
}
DRIVER = ("import importlib.util,os,subprocess,sys; spec=importlib.util.spec_from_file_location('tt','/tmp/b/task_tool.py');"
          "m=importlib.util.module_from_spec(spec); spec.loader.exec_module(m); h=m.Helper().start();"
          "os.environ[m.PORT_ENV]=str(h.port); os.environ['BASH_FUNC_task-tool%%']='() ( . /tmp/b/task-tool \"$@\" )';"
          "sys.exit(subprocess.run(['bash','-c',sys.argv[1]]).returncode)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from orchard_cli.env import SandboxHandle, connect
    from orchard_cli.env.models import SandboxSpec
    from orchard_cli.harnesses.common import sandbox_base_url
    from orchard_cli.models.scripted import ScriptedEndpoint
    from orchard_cli.proxy import start_proxy
    from orchard_cli.tools import ToolReply, ToolSession, ToolSpec
    from orchard_cli.tools.spec import HOST_TOOLS_DIR

    class Echo:
        def call(self, service: str, action: str, arguments: dict) -> ToolReply:
            return ToolReply(result={"echo": arguments})

    endpoint = ScriptedEndpoint(["unused"])
    proxy = start_proxy(endpoint)
    session = ToolSession([ToolSpec(name="echo", description="echo", service="s", action="echo")], Echo())
    episode = proxy.open_episode("task-tool-bench", tools=session)
    env = connect("local")
    sandbox = SandboxHandle.create(env, SandboxSpec(network="proxy", proxy_url=episode.base_url, timeout=1800))
    times: dict[str, list[float]] = {name: [] for name in WAYS}
    try:
        tools_url = sandbox_base_url(sandbox).removesuffix("/v1") + "/tools"
        sandbox.write_file("/tmp/b/task_tool.py", (HOST_TOOLS_DIR / "task_tool.py").read_bytes())
        sandbox.write_file("/tmp/b/task-tool", (HOST_TOOLS_DIR / "task_tool.sh").read_bytes(), mode=0o755)
        environ = {"ORCHARD_TOOLS_URL": tools_url, "ORCHARD_TOOLS_TOKEN": episode.api_key,
                   "PATH": "/tmp/b:/usr/local/bin:/usr/bin:/bin"}
        for _ in range(args.rounds):
            for name, (command, helper) in WAYS.items():
                loop = (f"s=$(date +%s%N); for i in $(seq {args.calls}); do {command}\ndone; e=$(date +%s%N); "
                        f"echo $(( (e-s)/{args.calls}/1000 ))")
                argv = ["python3", "-c", DRIVER, loop] if helper else ["bash", "-c", loop]
                job = sandbox.exec(argv, env=environ, timeout=600)
                if job.exit_code != 0:
                    sys.exit(f"{name}: {job.stderr[-500:]}")
                times[name].append(int(job.stdout.strip()) / 1000)
    finally:
        sandbox.destroy()
        env.close()
        endpoint.stop()
        proxy.stop()
    load = os.getloadavg()
    print(f"# ms per call, median of {args.rounds} interleaved rounds of {args.calls} calls; load {load[0]:.2f}")
    print(f"{'way':42s} {'median':>8s} {'min':>8s} {'max':>8s}")
    for name, found in times.items():
        print(f"{name:42s} {statistics.median(found):8.1f} {min(found):8.1f} {max(found):8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"times_ms": times, "calls": args.calls, "rounds": args.rounds, "load": load}, f, indent=1)


if __name__ == "__main__":
    main()
