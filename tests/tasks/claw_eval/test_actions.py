"""The harnesses' own tools as Claw-Eval's runner names them (orchard_cli.tools.builtins and
tasks/claw_eval/actions.py), through their public functions: each harness's shell and file tools
map to Bash/Read/Write/Edit/Glob, and a shell command counts as a task tool's call only when it
is that one call and nothing else."""

from __future__ import annotations

import pytest

from orchard_cli.evidence import Dispatch
from orchard_cli.tasks.claw_eval.actions import RUNNER_NAMES, interleave, sandbox_calls
from orchard_cli.tools.builtins import EDIT, LIST, READ, SHELL, WRITE, action, task_tool_call

# (harness, its tool name, its arguments) -> (kind, target, the runner's name)
HARNESS_TOOLS = [
    ("bash agent", "bash", {"command": "ls -la"}, SHELL, "ls -la", "Bash"),
    ("codex", "exec_command", {"cmd": "cat a.txt", "workdir": "/w"}, SHELL, "cat a.txt", "Bash"),
    ("codex", "view_image", {"path": "/w/p.png"}, READ, "/w/p.png", "Read"),
    ("codex", "apply_patch", {"input": "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch"}, EDIT,
     "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch", "Edit"),
    ("openclaw", "exec", {"command": "pwd"}, SHELL, "pwd", "Bash"),
    ("openclaw", "read", {"path": "/w/notes.md", "offset": 3}, READ, "/w/notes.md", "Read"),
    ("openclaw", "write", {"path": "/w/out.md", "content": "hi"}, WRITE, "/w/out.md", "Write"),
    ("openclaw", "edit", {"path": "/w/out.md", "oldText": "hi", "newText": "ho"}, EDIT, "/w/out.md", "Edit"),
    ("openclaw", "ls", {"path": "/w"}, LIST, "/w", "Glob"),
    ("zeroclaw", "shell", {"command": "echo ok"}, SHELL, "echo ok", "Bash"),
    ("zeroclaw", "file_read", {"path": "/w/a"}, READ, "/w/a", "Read"),
    ("zeroclaw", "file_write", {"path": "/w/b", "content": "z"}, WRITE, "/w/b", "Write"),
]


@pytest.mark.parametrize("harness,name,arguments,kind,target,runner", HARNESS_TOOLS,
                         ids=[f"{h}-{n}" for h, n, *_ in HARNESS_TOOLS])
def test_each_harness_tool_has_its_kind_and_runner_name(harness, name, arguments, kind, target, runner):
    found = action(name, arguments)
    assert found is not None and (found.kind, found.target) == (kind, target)
    assert RUNNER_NAMES[found.kind] == runner


def test_kept_arguments_and_the_file_path_fallback():
    assert action("write", {"path": "/a", "content": "x", "mode": 1}).extra == {"content": "x"}
    assert action("read", {"path": "/a", "offset": 2, "limit": 5}).extra == {"offset": 2, "limit": 5}
    assert action("read", {"file_path": "/b"}).target == "/b"  # a read naming its path the other way


@pytest.mark.parametrize("name,arguments", [
    ("send_email", {"to": "a"}),  # a task's tool
    ("update_plan", {"plan": []}),  # a harness's bookkeeping
    ("write_stdin", {"chars": "y\n"}),  # continues a command: not a new one
    ("bash", "ls"),  # arguments that are not an object
])
def test_what_is_not_a_builtin(name, arguments):
    assert action(name, arguments) is None


ONLY_A_CALL = [
    ("task-tool send_email '{\"to\": \"a@b\"}'", "send_email"),
    ("  task-tool list_files  ", "list_files"),
    ("task-tool search '{\"q\": \"a && b | c > d\"}'", "search"),  # operators inside quotes are data
    ('task-tool search "{\\"q\\": 1}"', "search"),
    ("python3 /opt/orchard/task_tool.py get_doc '{\"id\": 1}'", "get_doc"),
    ("task-tool send_email - <<'EOF'\n{\"to\": \"a@b\", \"body\": \"x | y && z\"}\nEOF", "send_email"),
    ("task-tool send_email - <<EOF\n{}\nEOF", "send_email"),
    ('task-tool send_email - <<-"END"\n\t{}\n\tEND', "send_email"),
]

MORE_THAN_A_CALL = [
    "task-tool a '{}' | jq .",  # a pipe
    "cat q.json | task-tool a -",
    "task-tool a '{}' && task-tool b '{}'",  # a list
    "task-tool a '{}'; ls",
    "task-tool a '{}' > out.json",  # a redirection
    "task-tool a - <<'EOF'\n{}\nEOF\nls",  # a heredoc and another command
    "task-tool a '{\"x\": 1}",  # an unclosed quote
    "task-tool --help",
    "task-tool a '{}' extra",
    "echo task-tool a",
    "ls -la",
]


@pytest.mark.parametrize("command,tool", ONLY_A_CALL)
def test_a_command_that_is_one_task_tool_call(command, tool):
    assert task_tool_call(command) == tool


@pytest.mark.parametrize("command", MORE_THAN_A_CALL)
def test_a_command_that_is_more_than_the_call_is_bash(command):
    assert task_tool_call(command) is None


def _use(id_, name, input_):
    return {"type": "tool_use", "id": id_, "name": name, "input": input_}


def _result(id_, text):
    return {"type": "tool_result", "tool_use_id": id_, "content": [{"type": "text", "text": text}]}


def test_sandbox_calls_rename_in_order_and_a_bare_task_tool_call_is_the_tools():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [
            _use("1", "bash", {"command": "task-tool list_inbox '{}'"}),
            _use("2", "bash", {"command": "task-tool get_mail '{\"id\": 1}' | jq .subject"}),
            _use("3", "read", {"path": "/w/notes.md"}),
            _use("4", "send_email", {"to": "x"}),  # over MCP
            _use("5", "ls", {"path": "/w"}),
        ]},
        {"role": "user", "content": [_result("1", "raw"), _result("2", "exit code: 0\nhello"),
                                     _result("3", "notes"), _result("4", "ok"), _result("5", "a b")]},
    ]
    dispatches = [Dispatch(seq=0, tool="list_inbox", arguments={}, status=200, result={"mails": [1]}),
                  Dispatch(seq=1, tool="get_mail", arguments={"id": 1}, status=200, result={"subject": "hi"}),
                  Dispatch(seq=2, tool="send_email", arguments={"to": "x"}, status=200, result="sent")]
    calls = sandbox_calls(messages, dispatches, {"list_inbox", "get_mail", "send_email"})
    # the bare call became the task tool's own call, with its recorded arguments and result
    first = messages[1]["content"][0]
    assert (first["name"], first["input"]) == ("list_inbox", {})
    assert messages[2]["content"][0]["content"][0]["text"] == '{"mails": [1]}'
    assert [c["tool"] for c in calls] == ["Bash", "Read", "Glob"]
    assert [c["after"] for c in calls] == [2, 2, 3]
    assert calls[0]["input"] == {"command": "task-tool get_mail '{\"id\": 1}' | jq .subject"}
    assert calls[0]["body"]["exit_code"] == 0
    assert calls[1]["input"] == {"file_path": "/w/notes.md"}
    assert calls[2]["input"] == {"pattern": "*", "path": "/w"}
    assert [b["name"] for b in messages[1]["content"]] == ["list_inbox", "Bash", "Read", "send_email", "Glob"]

    task = [{"tool_name": d.tool} for d in dispatches]
    assert [d["tool_name"] for d in interleave(task, calls)] == [
        "list_inbox", "get_mail", "Bash", "Read", "send_email", "Glob"]
    bash = interleave(task, calls)[2]
    assert bash["endpoint_url"] == "local://sandbox/Bash" and bash["response_status"] == 200


def test_codex_apply_patch_is_an_edit_carrying_the_patch():
    patch = "*** Begin Patch\n*** Update File: a.md\n-x\n+y\n*** End Patch"
    messages = [{"role": "assistant", "content": [_use("p", "apply_patch", {"input": patch}),
                                                  _use("w", "file_write", {"path": "/w/b", "content": "z"})]},
                {"role": "user", "content": [_result("p", "Done"), _result("w", "ok")]}]
    calls = sandbox_calls(messages, [], set())
    assert [(c["tool"], c["input"]) for c in calls] == [
        ("Edit", {"patch": patch}), ("Write", {"file_path": "/w/b", "content": "z"})]
