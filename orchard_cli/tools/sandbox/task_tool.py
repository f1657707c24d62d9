"""orchard's task tools as a command, run INSIDE the sandbox (python3 standard library, 3.6+).

    python3 /opt/orchard/tools/task_tool.py NAME '{"arg": "value"}'   # the result (text as it is, else JSON), exit 0
    python3 /opt/orchard/tools/task_tool.py NAME - < args.json         # the arguments from stdin
    python3 /opt/orchard/tools/task_tool.py --list                     # the tools and their schemas

A failed call prints its error on stderr and exits 1; a usage error exits 2. Environment:
ORCHARD_TOOLS_URL (the episode's tool gateway) and ORCHARD_TOOLS_TOKEN (its Bearer token);
ORCHARD_TOOLS_MAX_ARGS_BYTES, the most one call's arguments may hold (as the gateway refuses
more: checked here before sending, with the gateway's words).
"""

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

USAGE = ("usage: task_tool.py NAME ['JSON' | -]    call a tool (arguments: a JSON object, default {})\n"
         "       task_tool.py --list               list the tools with their input schemas")
TIMEOUT = float(os.environ.get("ORCHARD_TOOLS_TIMEOUT_S") or 120)
ARGS_LIMIT = int(os.environ.get("ORCHARD_TOOLS_MAX_ARGS_BYTES") or 1048576)


class Failed(Exception):
    pass


def request(method, suffix, body=None):
    """(status, parsed JSON body or None, raw text) of one gateway request."""
    url = os.environ.get("ORCHARD_TOOLS_URL", "").rstrip("/")
    token = os.environ.get("ORCHARD_TOOLS_TOKEN", "")
    if not url or not token:
        raise Failed("ORCHARD_TOOLS_URL and ORCHARD_TOOLS_TOKEN must be set")
    data = None if body is None else json.dumps(body).encode("utf-8")
    req = urllib.request.Request(url + suffix, data=data, method=method, headers={
        "Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise Failed("tool gateway unreachable: {}".format(getattr(exc, "reason", exc)))
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text), text
    except ValueError:
        return status, None, text


def gateway_error(status, data, text):
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return "tool gateway answered HTTP {}: {}".format(status, message or text[:500])


def list_tools():
    status, data, text = request("GET", "")
    if status != 200 or not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        raise Failed(gateway_error(status, data, text))
    return data["tools"]


def oversized(size):
    return ("the arguments are {} bytes, over the {} bytes one tool call may send: send less at once "
            "(write large content to a file in the workspace instead)".format(size, ARGS_LIMIT))


def call(name, arguments):
    size = len(json.dumps(arguments, ensure_ascii=False).encode("utf-8", "replace"))
    if size > ARGS_LIMIT:
        raise Failed("{} failed (status 413): {}".format(name, oversized(size)))
    status, data, text = request("POST", "/" + urllib.parse.quote(name, safe=""), arguments)
    if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
        raise Failed(gateway_error(status, data, text))
    if not data["ok"]:
        raise Failed("{} failed (status {}): {}".format(name, data.get("status"), data.get("error")))
    return data.get("result")


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if not argv or len(argv) > 2 or (argv[0] == "--list" and len(argv) > 1):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if argv[0] == "--list":
            print(json.dumps(list_tools(), indent=2, ensure_ascii=False))
            return 0
        raw = argv[1] if len(argv) > 1 else "{}"
        if raw == "-":
            raw = sys.stdin.read()
        try:
            arguments = json.loads(raw)
        except ValueError as exc:
            print("task_tool.py: the arguments are not JSON ({}): {}".format(exc, raw[:200]), file=sys.stderr)
            return 2
        if not isinstance(arguments, dict):
            print("task_tool.py: the arguments must be a JSON object", file=sys.stderr)
            return 2
        result = call(argv[0], arguments)
        print(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))
        return 0
    except Failed as exc:
        print("task_tool.py: {}".format(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
