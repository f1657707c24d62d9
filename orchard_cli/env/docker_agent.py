"""The exec agent that runs inside each docker sandbox (stdlib only, Python 3.6+).

The docker backend copies this file into the sandbox's control folder (bind-mounted at
/run/orchard) and starts it with the container. It listens on /run/orchard/agent.sock; the host
connects to that socket through the bind mount, so a command costs a fork in the container instead
of a round trip through the engine (`docker exec`: ~50 ms; this: a few ms).

Protocol, one command per connection: the host sends one JSON line
  {"argv": [...] or "shell": "command line", "env": {...}, "cwd": "/x", "stdin": base64|null, "timeout": s, "limit": bytes,
   "marker": "ORCHARD_EXEC_ID=..."}
and reads one JSON line back
  {"exit_code": int|null, "stdout": base64, "stderr": base64, "stdout_dropped": n,
   "stderr_dropped": n, "timed_out": bool, "duration": s, "error": str|null}.
Each command runs in its own session with the marker in its environment; at the deadline the
session and every process carrying the marker (children that escaped with setsid included) are
killed with SIGKILL. With network='proxy' the agent also forwards 127.0.0.1:PORT to the host's
proxy bridge at /run/orchard/proxy.sock.
"""

import base64
import json
import os
import selectors
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time

CTL = os.path.dirname(os.path.abspath(__file__))
# Output that arrives after the command itself exited is collected for this long; children that
# still hold its pipes afterwards keep running, detached (as with `docker exec`, which waits 2 s).
DRAIN_GRACE = 0.5


def _kill_marked(marker, pgid):
    """SIGKILL the session's group and every process whose environment holds `marker`."""
    needle = marker.encode()
    for _ in range(50):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % name, "rb") as fh:
                    entries = fh.read().split(b"\0")
            except OSError:
                continue
            if needle in entries:
                found = True
                try:
                    os.kill(int(name), signal.SIGKILL)
                except OSError:
                    pass
        if not found:
            return
        time.sleep(0.01)


def _oom_first(pid):
    # Commands, not the agent, should be chosen by the OOM killer (raising needs no privilege).
    try:
        with open("/proc/%d/oom_score_adj" % pid, "w") as fh:
            fh.write("1000")
    except OSError:
        pass


def _argv(req):
    if req.get("argv"):
        return req["argv"]
    shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    return [shell, "-c", req["shell"]]


def run(req):
    started = time.monotonic()
    env = dict(os.environ)
    env.update(req.get("env") or {})
    key, _, value = req["marker"].partition("=")
    env[key] = value
    limit = int(req.get("limit") or (1 << 20))
    stdin = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
    argv = _argv(req)
    try:
        proc = subprocess.Popen(
            argv, cwd=req.get("cwd") or None, env=env, start_new_session=True,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError as exc:
        missing = exc.filename or argv[0]
        if req.get("cwd") and not os.path.isdir(req["cwd"]):
            return {"error": "working directory %s does not exist" % req["cwd"]}
        return {"exit_code": 127, "stderr": base64.b64encode(
            ("orchard: %s: command not found\n" % missing).encode()).decode()}
    except OSError as exc:
        return {"error": "could not start %r: %s" % (argv[0], exc)}
    _oom_first(proc.pid)
    if stdin is not None:
        def feed():
            try:
                proc.stdin.write(stdin)
            except OSError:
                pass
            finally:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        threading.Thread(target=feed, daemon=True).start()
    out = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    dropped = {fd: 0 for fd in out}
    sel = selectors.DefaultSelector()
    for pipe in (proc.stdout, proc.stderr):
        sel.register(pipe.fileno(), selectors.EVENT_READ)
    deadline = started + float(req.get("timeout") or 600)
    timed_out = False
    exited_at = None
    while sel.get_map():
        now = time.monotonic()
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > DRAIN_GRACE:
            break
        if now >= deadline:
            timed_out = True
            break
        wait = min(deadline - now, 0.05 if exited_at is None else DRAIN_GRACE)
        for key_, _ in sel.select(wait):
            chunk = os.read(key_.fd, 65536)
            if not chunk:
                sel.unregister(key_.fd)
                continue
            room = limit - len(out[key_.fd])
            out[key_.fd] += chunk[:max(room, 0)]
            dropped[key_.fd] += max(len(chunk) - max(room, 0), 0)
    sel.close()
    if not timed_out:
        try:  # both pipes closed early (`exec >/dev/null`): wait for the process itself
            proc.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        _kill_marked(req["marker"], proc.pid)
    code = proc.wait()
    fds = list(out)
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()
    return {
        "exit_code": None if timed_out else code,
        "stdout": base64.b64encode(bytes(out[fds[0]])).decode(),
        "stderr": base64.b64encode(bytes(out[fds[1]])).decode(),
        "stdout_dropped": dropped[fds[0]], "stderr_dropped": dropped[fds[1]],
        "timed_out": timed_out, "duration": time.monotonic() - started,
    }


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline()
        if not line:
            return
        try:
            reply = run(json.loads(line.decode()))
        except Exception as exc:  # reported to the host, never fatal to the agent
            reply = {"error": "agent: %s: %s" % (type(exc).__name__, exc)}
        self.wfile.write(json.dumps(reply).encode() + b"\n")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 128


def _pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def forward(listener):
    """127.0.0.1:port in the sandbox -> the host bridge at /run/orchard/proxy.sock."""
    while True:
        conn, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(os.path.join(CTL, "proxy.sock"))
        except OSError:
            conn.close()
            upstream.close()
            continue
        for a, b in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def main():
    path = os.path.join(CTL, "agent.sock")
    try:
        os.unlink(path)
    except OSError:
        pass
    server = Server(path, Handler)
    os.chmod(path, 0o666)
    if len(sys.argv) > 1 and int(sys.argv[1]):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(sys.argv[1])))
        listener.listen(128)
        threading.Thread(target=forward, args=(listener,), daemon=True).start()
    with open(os.path.join(CTL, "agent.ready.tmp"), "w") as fh:
        fh.write(str(os.getpid()))
    os.rename(os.path.join(CTL, "agent.ready.tmp"), os.path.join(CTL, "agent.ready"))
    server.serve_forever()


if __name__ == "__main__":
    main()
