"""orchard's bash agent: the program that runs INSIDE a sandbox (standard library only, no orchard
imports; started as `python3 -I bash_agent_main.py ...`).

One tool, `bash`. Each turn sends the conversation to `{base_url}/chat/completions`; each tool
call's command runs in a fresh `bash -c` in the working directory (a time limit per command, the
output cut to a head and a tail) and its output goes back as the tool result. A model without
native tool calls may answer with exactly one fenced ```bash block instead: orchard's fallback
markup, run the same way, its output sent back as a user message. A malformed call (bad JSON, an
unknown tool, no command, several blocks) goes back to the model as an error. The run ends when
the model answers with neither, when a command prints the done marker first, or after max_turns.
The last stdout line is a JSON summary.

A task's own tools (`--tools-file`, a JSON list of name, description, input_schema) are not native
tools here: the system prompt lists them and says how to call one from the shell, with orchard's
`task-tool` (task_tool.sh beside task_tool.py; ORCHARD_TOOLS_URL and ORCHARD_TOOLS_TOKEN in the
environment reach the episode's tool gateway). For the run, this program serves task_tool.py's
`Helper` from a thread (ORCHARD_TASK_TOOL_PORT in its commands' environment), so a call from a
command starts no Python process: task_tool.sh talks to the helper over bash's /dev/tcp; and
`task-tool` is also an exported bash function (sourcing task_tool.sh in a subshell), so a call from
a command's own bash starts no program at all.

Continuing a conversation: with `--session-file`, the message history is saved there (JSON,
`{"schema_version": 1, "messages": [...]}`, replaced whole) when the run ends; with `--resume` too,
the run starts from that history, the prompt appended as the user's next message, and goes on
with the same loop (the history's own system prompt is kept).
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

DONE_MARKER = "ORCHARD_TASK_DONE"
SYSTEM = (
    "You are a software engineer working in a repository at {workdir}. You can run shell commands "
    "with the `bash` tool; each runs in a fresh `bash -c` in that directory. If you cannot call "
    "tools, reply with exactly one fenced block:\n```bash\n<command>\n```\nand nothing runs "
    "otherwise. Make the change the task asks for. When you are done, reply without a command "
    f"(or run `echo {DONE_MARKER}`)."
)
SYSTEM_TOOLS = (
    "You are an assistant working in {workdir} for the user. You can run shell commands with the "
    "`bash` tool; each runs in a fresh `bash -c` in that directory. If you cannot call tools, reply "
    "with exactly one fenced block:\n```bash\n<command>\n```\nand nothing runs otherwise. Do what "
    "the user asks, with the task tools below. When you are done, reply without a command: your "
    f"final answer for the user (or run `echo {DONE_MARKER}`)."
)
BASH_TOOL = {"type": "function", "function": {
    "name": "bash", "description": "Run a bash command in the repository and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}
TASK_TOOL = "/tmp/orchard-bash-agent/bin/task_tool.py"
"""Where the harness writes task_tool.py (bash_agent.TASK_TOOL_COPY)."""
TASK_COMMAND = "task-tool"
"""On the agent's PATH in the sandbox: `task-tool NAME JSON` runs task_tool.py."""
TOOLS_SECTION = (
    "\n\n## Task tools\n"
    "This task also gives you the tools below. Call one from the shell, its arguments as one JSON "
    "object:\n"
    "    {command} NAME '{{\"argument\": \"value\"}}'\n"
    "It prints the tool's result as JSON (exit code 0), or the error on stderr (exit code 1). "
    "`{command} NAME -` reads the arguments from stdin (for long or quote-heavy "
    "values); `{command} --list` lists the tools again. (`{command}` is `python3 {task_tool}`.)"
)
FENCE = re.compile(r"```(?:bash|sh|shell)[ \t]*\n(.*?)```", re.DOTALL)
OPEN_FENCE = re.compile(r"```(?:bash|sh|shell)\b")


def tools_section(tools, task_tool=TASK_TOOL):
    """The system prompt's section on the task's tools: how to call them (with an example call of
    the first tool), then each tool's name, description and input schema."""
    lines = [TOOLS_SECTION.format(task_tool=task_tool, command=TASK_COMMAND)]
    if tools:
        bare = [t for t in tools if not (t.get("input_schema") or {}).get("required")]
        lines.append("For example:\n```bash\n%s %s '{}'\n```" % (TASK_COMMAND, (bare or tools)[0]["name"]))
    for tool in tools:
        schema = json.dumps(tool.get("input_schema") or {"type": "object", "properties": {}}, sort_keys=True)
        lines.append(f"\n### {tool['name']}\n{(tool.get('description') or '').strip()}\n"
                     f"Arguments (JSON schema): {schema}")
    return "\n".join(lines)


def start_tool_helper(path):
    """task_tool.py's Helper, loaded from `path` and serving from a thread; its port goes into the
    environment every command inherits. None (commands run task_tool.py instead) when it cannot
    start: a sandbox without loopback, say."""
    import importlib.util

    try:
        spec = importlib.util.spec_from_file_location("orchard_task_tool", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        helper = module.Helper().start()
    except Exception as exc:  # noqa: BLE001 - the slow path still works
        log(f"task-tool helper not started ({type(exc).__name__}: {exc}); task-tool runs task_tool.py")
        return None
    os.environ[module.PORT_ENV] = str(helper.port)
    script = os.path.join(os.path.dirname(path), TASK_COMMAND)
    if os.path.isfile(script):  # `task-tool` as a function of every bash the commands start: no exec
        os.environ[f"BASH_FUNC_{TASK_COMMAND}%%"] = f'() ( . {script} "$@" )'
    return helper


def log(message):
    print(f"[bash-agent] {message}", file=sys.stderr, flush=True)


def chat(args, key, messages):
    body = {"model": args.model, "messages": messages, "tools": [BASH_TOOL], "stream": False}
    data = json.dumps(body).encode()
    for attempt in range(3):
        request = urllib.request.Request(
            args.base_url.rstrip("/") + "/chat/completions", data=data, method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(request, timeout=args.request_timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            if exc.code < 500 and exc.code != 429 or attempt == 2:
                raise RuntimeError(f"model call failed: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            if attempt == 2:
                raise RuntimeError(f"model call failed: {exc}") from None
        time.sleep(1 + 2 * attempt)
    raise RuntimeError("unreachable")


def run_command(command, args):
    env = {k: v for k, v in os.environ.items() if k != "ORCHARD_API_KEY"}
    proc = subprocess.Popen(["bash", "-c", command], cwd=args.workdir, env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, errors="replace")
    try:
        output, _ = proc.communicate(timeout=args.command_timeout)
        status = f"exit code {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        status = f"killed after {args.command_timeout:g} s"
    limit = args.output_limit
    if len(output) > limit:
        output = (output[: limit // 2] + f"\n[... {len(output) - limit} characters cut ...]\n"
                  + output[-limit // 2:])
    return output, f"[{status}]\n{output}"


def parse_tool_call(call):
    """The command of a native tool call, or an error message for the model."""
    function = call.get("function") or {}
    if function.get("name") != "bash":
        return None, f"error: unknown tool {function.get('name')!r}; the only tool is `bash`"
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError as exc:
        return None, f"error: the arguments are not valid JSON ({exc}); send {{\"command\": \"...\"}}"
    command = arguments.get("command") if isinstance(arguments, dict) else None
    if not isinstance(command, str) or not command.strip():
        return None, "error: the bash tool needs a non-empty string `command`"
    return command, None


def parse_text(text):
    """(command, error) from a reply without tool calls; (None, None) means the model is done."""
    blocks = FENCE.findall(text or "")
    if len(blocks) == 1 and blocks[0].strip():
        return blocks[0], None
    if len(blocks) > 1:
        return None, f"format error: {len(blocks)} bash blocks; send exactly one per reply"
    if OPEN_FENCE.search(text or ""):
        return None, "format error: the ```bash block is empty or never closed"
    return None, None


def load_history(path, prompt):
    """The saved conversation with `prompt` appended as the user's next message."""
    try:
        with open(path, encoding="utf-8") as fh:
            messages = json.load(fh)["messages"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"no saved conversation to resume at {path}: {exc}") from None
    return messages + [{"role": "user", "content": prompt}]


def save_history(path, messages):
    """Write the conversation for the next turn (to a temporary file first, so a run killed
    mid-write leaves the previous history whole)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump({"schema_version": 1, "messages": messages}, fh)
    os.replace(path + ".tmp", path)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt-file", required=True)
    parser.add_argument("--workdir", default=os.getcwd())
    parser.add_argument("--max-turns", type=int, default=50)
    parser.add_argument("--command-timeout", type=float, default=120.0)
    parser.add_argument("--request-timeout", type=float, default=600.0)
    parser.add_argument("--output-limit", type=int, default=10000)
    parser.add_argument("--tools-file", help="the task's tools (JSON list), called through task_tool.py")
    parser.add_argument("--task-tool", default=TASK_TOOL, help="task_tool.py (its Helper serves the commands' calls)")
    parser.add_argument("--session-file", help="save the conversation here when the run ends")
    parser.add_argument("--resume", action="store_true", help="continue the conversation in --session-file")
    args = parser.parse_args(argv)
    key = os.environ.get("ORCHARD_API_KEY", "none")
    with open(args.prompt_file, encoding="utf-8") as fh:
        prompt = fh.read()
    system = SYSTEM.format(workdir=args.workdir)
    if args.tools_file:
        with open(args.tools_file, encoding="utf-8") as fh:
            system = SYSTEM_TOOLS.format(workdir=args.workdir) + tools_section(json.load(fh))
        start_tool_helper(args.task_tool)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    summary = {"turns": 0, "tool_calls": 0, "fenced_blocks": 0, "format_errors": 0, "finish": "max_turns"}
    code = 0
    try:
        if args.resume:
            messages = load_history(args.session_file or "", prompt)
            summary["resumed_messages"] = len(messages) - 1
        while summary["turns"] < args.max_turns:
            summary["turns"] += 1
            reply = chat(args, key, messages)
            message = (reply.get("choices") or [{}])[0].get("message") or {}
            text = message.get("content") or ""
            if isinstance(text, list):  # content parts
                text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
            calls = message.get("tool_calls") or []
            if calls:
                messages.append({"role": "assistant", "content": text or None, "tool_calls": calls})
                done = False
                for call in calls:
                    command, error = parse_tool_call(call)
                    if command is None:
                        summary["format_errors"] += 1
                        result = error
                    else:
                        summary["tool_calls"] += 1
                        log(f"$ {command}")
                        output, result = run_command(command, args)
                        done = done or output.lstrip().startswith(DONE_MARKER)
                    messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": result})
                if done:
                    summary["finish"] = "done"
                    break
                continue
            messages.append({"role": "assistant", "content": text})
            command, error = parse_text(text)
            if error:
                summary["format_errors"] += 1
                messages.append({"role": "user", "content": error})
                continue
            if command is None:
                summary["finish"] = "done"
                break
            summary["fenced_blocks"] += 1
            log(f"$ {command}")
            output, result = run_command(command, args)
            if output.lstrip().startswith(DONE_MARKER):
                summary["finish"] = "done"
                break
            messages.append({"role": "user", "content": f"Output of your command:\n{result}"})
    except RuntimeError as exc:
        log(str(exc))
        summary["finish"], summary["error"], code = "error", str(exc), 2
    if args.session_file and (not args.resume or "resumed_messages" in summary):  # not a history that never loaded
        try:
            save_history(args.session_file, messages)
        except OSError as exc:
            summary["session_error"] = f"could not save the conversation: {exc}"
    print(json.dumps(summary), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
