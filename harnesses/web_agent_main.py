"""orchard's web agent: the program that runs INSIDE a sandbox (standard library only, no orchard
imports; started as `python3 -I web_agent_main.py ...`).

Text only, so a small model can drive it: each turn sends one prompt (the task, the page as its
accessibility tree, the actions so far and their errors) to `{base_url}/chat/completions` and
reads one action back, written as BrowserGym writes them: `click("e12")`, `fill("e5", "red mug")`,
`select_option("e7", "blue")`, `press("Enter")`, `scroll(0, 400)`, `goto("shop:/cart")`,
`go_back()`, `tab_focus(1)`, `mouse_click(200, 340)`, `answer("Blue Mug")`. The action goes to the
episode's browser tools (ORCHARD_TOOLS_URL, Bearer ORCHARD_TOOLS_TOKEN); the page it returns is
the next turn's. A reply without an action, or with a malformed one, is shown back as an error.
The run ends at `answer` (or `send_msg_to_user`) or after max_turns. The last stdout line is a
JSON summary.

Continuing a conversation: with `--session-file`, the conversation (the user's messages and the
agent's answers) and the actions so far are saved there when the run ends; with `--resume` too,
the run starts from them, the prompt being the user's next message. The prompt's `# Task` section
then becomes `# Conversation` (each user message and answer in order); the browser is the
episode's, so the page is where the last turn left it.
"""

import argparse
import ast
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

SYSTEM = (
    "You are a web agent. You see a web page as an accessibility tree: each element has an id in "
    "[ref=...]. Reply with exactly one action per turn, on its own line, in this syntax:\n"
    "{actions}\n"
    "Use the ids of the page shown now. When the task is done, reply answer(\"...\") with your final "
    "answer for the user (answer(\"done\") when nothing was asked)."
)
SIGNATURES = {
    "click": ["bid"], "fill": ["bid", "value"], "select_option": ["bid", "options"], "check": ["bid", "checked"],
    "hover": ["bid"], "press": ["key"], "scroll": ["dx", "dy"], "goto": ["url"], "go_back": [],
    "go_forward": [], "new_tab": ["url"], "tab_focus": ["index"], "tab_close": [], "mouse_click": ["x", "y"],
    "answer": ["text"], "send_msg_to_user": ["text"],
}
EXAMPLES = ['click("e12")', 'fill("e5", "text to type")', 'select_option("e7", "option label")',
            'check("e9")', 'press("Enter")  or  press("e5", "Enter")', 'scroll(0, 400)', 'goto("url")',
            'go_back()', 'new_tab("url")', 'tab_focus(0)', 'mouse_click(x, y)', 'answer("final answer")']
FINAL = ("answer", "send_msg_to_user")
ACTION = re.compile(r"^\s*`*\s*([a-z_]+)\((.*)\)\s*`*\s*;?\s*$")
OBSERVATION_LIMIT = 12000
MAX_TOKENS = 400
"""A reply is one action line, perhaps after a few words of thought."""
HISTORY = 12


def log(message):
    print(f"[web-agent] {message}", file=sys.stderr, flush=True)


def _post(url, body, headers, timeout):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def chat(args, key, messages):
    body = {"model": args.model, "messages": messages, "stream": False, "max_tokens": args.max_tokens}
    for attempt in range(3):
        try:
            return _post(args.base_url.rstrip("/") + "/chat/completions", body,
                         {"Authorization": f"Bearer {key}"}, args.request_timeout)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            if exc.code < 500 and exc.code != 429 or attempt == 2:
                raise RuntimeError(f"model call failed: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            if attempt == 2:
                raise RuntimeError(f"model call failed: {exc}") from None
        time.sleep(1 + 2 * attempt)
    raise RuntimeError("unreachable")


def tool(name, arguments):
    """(ok, text) of one browser action through the episode's tool gateway."""
    url = os.environ["ORCHARD_TOOLS_URL"].rstrip("/") + "/" + name
    headers = {"Authorization": "Bearer " + os.environ.get("ORCHARD_TOOLS_TOKEN", "")}
    try:
        reply = _post(url, arguments, headers, 120)
    except urllib.error.HTTPError as exc:
        try:
            reply = json.loads(exc.read().decode("utf-8", "replace"))
        except ValueError:
            return False, f"the tool gateway answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeError(f"the tool gateway is unreachable: {exc}") from None
    if not isinstance(reply, dict) or "ok" not in reply:
        return False, "the tool gateway answered something unexpected"
    if not reply["ok"]:
        if reply.get("status") in (409, 503):  # the episode is over, or the browser is gone
            raise RuntimeError(f"the browser is gone: {reply.get('error')}")
        return False, str(reply.get("error") or "the action failed")
    result = reply.get("result")
    return True, result if isinstance(result, str) else json.dumps(result)


def parse_action(text):
    """(name, arguments) of the reply's last action line, or (None, error message)."""
    found = None
    for line in (text or "").splitlines():
        match = ACTION.match(line)
        if match and match.group(1) in SIGNATURES:
            found = match
    if found is None:
        return None, "no action found: reply with one action such as click(\"e12\") on its own line"
    name, raw = found.group(1), found.group(2).strip()
    try:
        values = ast.literal_eval("(" + raw + ",)") if raw else ()
    except Exception:  # noqa: BLE001 - whatever the model wrote (SyntaxError, TypeError, ...)
        return None, f"could not read the arguments of {name}({raw[:80]}): quote strings, e.g. click(\"e12\")"
    names = list(SIGNATURES[name])
    if name == "press" and len(values) == 2:
        names = ["bid", "key"]
    if len(values) > len(names):
        return None, f"{name} takes at most {len(names)} argument(s): {', '.join(names) or 'none'}"
    arguments = dict(zip(names, values))
    if "bid" in arguments:
        arguments["bid"] = str(arguments["bid"])
    if name == "tab_focus" and "index" in arguments:
        try:
            arguments["index"] = int(arguments["index"])
        except (TypeError, ValueError):
            return None, f"tab_focus takes a tab number, not {arguments['index']!r}"
    return (name, arguments), None


def prompt(conversation, observation, history):
    """The one user message of a turn: the task (or the conversation so far), the actions so far,
    the page now."""
    if len(conversation) == 1:
        lines = ["# Task", conversation[0]["content"].strip()]
    else:
        lines = ["# Conversation (the user's messages and your answers; act on the last message)"]
        lines += [f"{'User' if m['role'] == 'user' else 'You'}: {m['content'].strip()}" for m in conversation]
    lines += ["", "# Your actions so far"]
    lines += [f"{i + 1}. {h}" for i, h in enumerate(history[-HISTORY:])] or ["(none)"]
    page = observation if len(observation) <= OBSERVATION_LIMIT else observation[:OBSERVATION_LIMIT] + "\n..."
    lines += ["", "# The page now", page, "", "Your next action (one line):"]
    return "\n".join(lines)


def load_session(path, message):
    """(conversation, actions) saved by the last turn, the user's `message` appended."""
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
        conversation, history = list(state["conversation"]), list(state["history"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"no saved conversation to resume at {path}: {exc}") from None
    return conversation + [{"role": "user", "content": message}], history


def save_session(path, conversation, history):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump({"schema_version": 1, "conversation": conversation, "history": history}, fh)
    os.replace(path + ".tmp", path)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt-file", required=True)
    parser.add_argument("--max-turns", type=int, default=30)
    parser.add_argument("--request-timeout", type=float, default=600.0)
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument("--session-file", help="save the conversation and the actions here when the run ends")
    parser.add_argument("--resume", action="store_true", help="continue the conversation in --session-file")
    args = parser.parse_args(argv)
    key = os.environ.get("ORCHARD_API_KEY", "none")
    with open(args.prompt_file, encoding="utf-8") as fh:
        task = fh.read()
    system = SYSTEM.format(actions="\n".join("  " + e for e in EXAMPLES))
    summary = {"turns": 0, "actions": 0, "action_errors": 0, "format_errors": 0, "finish": "max_turns"}
    conversation, history = [{"role": "user", "content": task}], []
    loaded = not args.resume
    code = 0
    try:
        if args.resume:
            conversation, history = load_session(args.session_file or "", task)
            loaded = True
        ok, observation = tool("observe", {})
        while summary["turns"] < args.max_turns:
            summary["turns"] += 1
            reply = chat(args, key, [{"role": "system", "content": system},
                                     {"role": "user", "content": prompt(conversation, observation, history)}])
            message = (reply.get("choices") or [{}])[0].get("message") or {}
            text = message.get("content") or ""
            if isinstance(text, list):
                text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
            action, error = parse_action(text)
            if action is None:
                summary["format_errors"] += 1
                history.append(f"(no valid action: {error})")
                continue
            name, arguments = action
            shown = f"{name}({', '.join(json.dumps(v) for v in arguments.values())})"
            log(shown)
            summary["actions"] += 1
            ok, result = tool(name, arguments)
            if not ok:
                summary["action_errors"] += 1
                history.append(f"{shown} -> error: {result[:300]}")
                continue
            history.append(shown)
            observation = result
            if name in FINAL:
                conversation.append({"role": "assistant", "content": str(arguments.get("text", ""))})
                summary["finish"] = "answered"
                break
    except RuntimeError as exc:
        log(str(exc))
        summary["finish"], summary["error"], code = "error", str(exc), 2
    if args.session_file and loaded:
        try:
            save_session(args.session_file, conversation, history)
        except OSError as exc:
            summary["session_error"] = f"could not save the conversation: {exc}"
    print(json.dumps(summary), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
