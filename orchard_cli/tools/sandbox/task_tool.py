"""orchard's task tools as a command, run INSIDE the sandbox (python3 standard library, 3.6+).

    python3 /opt/orchard/tools/task_tool.py NAME '{"arg": "value"}'   # the result (text as it is, else JSON), exit 0
    python3 /opt/orchard/tools/task_tool.py NAME - < args.json         # the arguments from stdin
    python3 /opt/orchard/tools/task_tool.py --list                     # the tools and their schemas

A failed call prints its error on stderr and exits 1; a usage error exits 2. Environment:
ORCHARD_TOOLS_URL (the episode's tool gateway) and ORCHARD_TOOLS_TOKEN (its Bearer token);
ORCHARD_TOOLS_MAX_ARGS_BYTES, the most one call's arguments may hold (as the gateway refuses
more: checked here before sending, with the gateway's words).

The same calls without a process per call: a program that lives for the episode (orchard's bash
agent) runs `Helper` in a thread, on 127.0.0.1 in the sandbox, and `task_tool.sh` (installed as
`task-tool`) sends it each call over bash's /dev/tcp. The helper answers exactly what this command
would print and exit with, over one kept-alive connection to the gateway. Its protocol, one call
per connection:

    request   "<bytes of NAME> <bytes of ARGUMENTS> <ORCHARD_TOOLS_TOKEN>\\n" NAME ARGUMENTS
              (ARGUMENTS: JSON text; no ARGUMENTS at all ("<n> -1") means the default {}; NAME may
              be --list; the episode's token, since 127.0.0.1 is the host's under --network full)
    answer    "<exit code>\\n" then the text (stdout when the code is 0, else stderr); then close
"""

import hmac
import http.client
import json
import os
import socketserver
import sys
import threading
import time
import urllib.parse

USAGE = ("usage: task_tool.py NAME ['JSON' | -]    call a tool (arguments: a JSON object, default {})\n"
         "       task_tool.py --list               list the tools with their input schemas")
TIMEOUT = float(os.environ.get("ORCHARD_TOOLS_TIMEOUT_S") or 120)
IDLE_S = 20.0
"""A kept-alive connection idle longer than this is replaced before use (the gateway may have
closed it: aiohttp keeps an idle one 75 s)."""
HEADER_LIMIT = 512
"""Bytes of a helper request's first line."""
PORT_ENV = "ORCHARD_TASK_TOOL_PORT"
"""Where task_tool.sh finds the helper (set by the program that runs it for its commands)."""
ARGS_LIMIT = int(os.environ.get("ORCHARD_TOOLS_MAX_ARGS_BYTES") or 1048576)


class Failed(Exception):
    pass


class Gateway:
    """Requests to the episode's tool gateway over one HTTP/1.1 connection, kept alive between
    calls (`keep=False`: one request, then closed)."""

    def __init__(self, keep=True):
        url = os.environ.get("ORCHARD_TOOLS_URL", "").rstrip("/")
        self.token = os.environ.get("ORCHARD_TOOLS_TOKEN", "")
        if not url or not self.token:
            raise Failed("ORCHARD_TOOLS_URL and ORCHARD_TOOLS_TOKEN must be set")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise Failed("ORCHARD_TOOLS_URL must be an http(s) URL, not {!r}".format(url))
        self.kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path
        self.keep = keep
        self.conn = None
        self.used = 0.0

    def request(self, method, suffix, body=None):
        """(status, parsed JSON body or None, raw text) of one gateway request."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Authorization": "Bearer " + self.token, "Content-Type": "application/json"}
        if not self.keep:
            headers["Connection"] = "close"
        reused = self.conn is not None and time.monotonic() - self.used < IDLE_S
        if not reused:
            self.close()
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = self.kind(self.host, self.port, timeout=TIMEOUT)
            try:
                self.conn.request(method, self.path + suffix, body=data, headers=headers)
                response = self.conn.getresponse()
                status, raw = response.status, response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self.close()  # a kept-alive connection the gateway had closed: once more, on a new one
                if attempt or not reused:
                    raise Failed("tool gateway unreachable: {}".format(exc))
            except (http.client.HTTPException, OSError) as exc:
                self.close()
                raise Failed("tool gateway unreachable: {}".format(exc))
        self.used = time.monotonic()
        if not self.keep or response.will_close:
            self.close()
        text = raw.decode("utf-8", "replace")
        try:
            return status, json.loads(text), text
        except ValueError:
            return status, None, text

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def gateway_error(status, data, text):
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return "tool gateway answered HTTP {}: {}".format(status, message or text[:500])


def list_tools(gateway):
    status, data, text = gateway.request("GET", "")
    if status != 200 or not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        raise Failed(gateway_error(status, data, text))
    return data["tools"]


def oversized(size):
    return ("the arguments are {} bytes, over the {} bytes one tool call may send: send less at once "
            "(write large content to a file in the workspace instead)".format(size, ARGS_LIMIT))


def call(gateway, name, arguments):
    size = len(json.dumps(arguments, ensure_ascii=False).encode("utf-8", "replace"))
    if size > ARGS_LIMIT:
        raise Failed("{} failed (status 413): {}".format(name, oversized(size)))
    status, data, text = gateway.request("POST", "/" + urllib.parse.quote(name, safe=""), arguments)
    if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
        raise Failed(gateway_error(status, data, text))
    if not data["ok"]:
        raise Failed("{} failed (status {}): {}".format(name, data.get("status"), data.get("error")))
    return data.get("result")


def answer(name, raw, gateway=None):
    """(exit code, text) of `task_tool.py NAME RAW` (RAW: the arguments' JSON text; None: {});
    the text goes to stdout when the code is 0, else to stderr."""
    try:
        gateway = gateway or Gateway(keep=False)
        if name == "--list":
            return 0, json.dumps(list_tools(gateway), indent=2, ensure_ascii=False) + "\n"
        try:
            arguments = json.loads("{}" if raw is None else raw)
        except ValueError as exc:
            return 2, "task_tool.py: the arguments are not JSON ({}): {}\n".format(exc, raw[:200])
        if not isinstance(arguments, dict):
            return 2, "task_tool.py: the arguments must be a JSON object\n"
        result = call(gateway, name, arguments)
        return 0, (result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)) + "\n"
    except Failed as exc:
        return 1, "task_tool.py: {}\n".format(exc)


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if not argv or len(argv) > 2 or (argv[0] == "--list" and len(argv) > 1):
        print(USAGE, file=sys.stderr)
        return 2
    raw = argv[1] if len(argv) > 1 else None
    if raw == "-":
        raw = sys.stdin.read()
    code, text = answer(argv[0], raw)
    (sys.stdout if code == 0 else sys.stderr).write(text)
    return code


# -- the helper: the same answers without a process per call ---------------------------------------
class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        try:
            head = self.rfile.readline(HEADER_LIMIT).split()
            sizes = [int(n) for n in head[:2]]
            if len(head) != 3 or sizes[0] < 1 or sizes[1] < -1:
                raise ValueError(head)
            if not hmac.compare_digest(head[2], self.server.token):  # not this episode's caller: nothing read
                self._answer(1, "task_tool.py: the task-tool helper refused a call without this episode's token\n")
                return
            name = self.rfile.read(min(sizes[0], HEADER_LIMIT * 64)).decode("utf-8", "replace")
            # JSON text far over the cap is refused unread (within it, `call` checks the exact size)
            too_big = sizes[1] > 4 * ARGS_LIMIT
            raw = None if sizes[1] < 0 or too_big else self.rfile.read(sizes[1]).decode("utf-8", "replace")
        except (ValueError, OSError):
            code, text = 2, "task_tool.py: a malformed request to the task-tool helper\n"
        else:
            if too_big:
                code, text = 1, "task_tool.py: {} failed (status 413): {}\n".format(name, oversized(sizes[1]))
            else:
                code, text = answer(name, raw, self.server.gateway())
        self._answer(code, text)

    def _answer(self, code, text):
        try:
            self.wfile.write("{}\n{}".format(code, text).encode("utf-8"))
        except OSError:
            pass  # the caller is gone (killed at its time limit): nothing to tell


class Helper(socketserver.ThreadingTCPServer):
    """The calls of `task_tool.sh`, on 127.0.0.1 (a free port: `port`), each answered as `main`
    would, each through a kept-alive gateway connection of its own (idle ones are kept for the
    next calls). `start()` serves from a daemon thread (it ends with the program)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.token = Gateway().token.encode("utf-8")  # a missing ORCHARD_TOOLS_URL fails here, not at the first call
        socketserver.ThreadingTCPServer.__init__(self, ("127.0.0.1", 0), _Handler)
        self.port = self.server_address[1]
        self._idle = []
        self._lock = threading.Lock()
        self._local = threading.local()

    def process_request_thread(self, request, client_address):
        with self._lock:
            gateway = self._idle.pop() if self._idle else None
        self._local.gateway = gateway or Gateway()
        try:
            socketserver.ThreadingTCPServer.process_request_thread(self, request, client_address)
        finally:
            with self._lock:
                self._idle.append(self._local.gateway)

    def gateway(self):
        return self._local.gateway

    def start(self):
        threading.Thread(target=self.serve_forever, name="task-tool-helper", daemon=True).start()
        return self


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
