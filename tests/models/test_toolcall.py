"""orchard's tool-call format on fixed strings: rendering the prompt, parsing replies, holding back."""

from __future__ import annotations

import json

import pytest

from orchard_cli.models.toolcall import (NOTE, describe_tools, forced_start, markers, parse_reply, render_messages,
                                         safe_length)


def fn(name: str, props: dict | None = None, required: tuple[str, ...] = (), desc: str = "") -> dict:
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": props or {}, "required": list(required)}}}


EXEC = fn("exec_command", {"cmd": {"type": "string", "description": "the command"},
                           "workdir": {"type": "string"}}, ("cmd",), "Runs a shell command.")
READ = fn("read_file", {"path": {"type": "string"}}, ("path",), "Reads a file.")
OPENCLAW_EXEC = fn("exec", {"command": {"type": "string"}}, ("command",))
SHELL_ARRAY = fn("shell", {"command": {"type": "array", "items": {"type": "string"}}}, ("command",))


def args_of(call: dict) -> dict:
    return json.loads(call["function"]["arguments"])


# ---- parsing <tool_call> blocks ----

def test_one_call_with_text_around_it():
    reply = 'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    parsed = parse_reply(reply, [EXEC, READ])
    assert parsed.error is None
    assert parsed.content == "Let me look.\n"
    [call] = parsed.tool_calls
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "read_file" and args_of(call) == {"path": "a.py"}


def test_several_calls_in_order_and_blank_content_is_none():
    reply = ('<tool_call>{"name": "exec_command", "arguments": {"cmd": "ls"}}</tool_call>\n'
             '<tool_call>{"name": "read_file", "arguments": "{\\"path\\": \\"b\\"}"}</tool_call>\n')
    parsed = parse_reply(reply, [EXEC, READ])
    assert parsed.content is None
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["exec_command", "read_file"]
    assert args_of(parsed.tool_calls[1]) == {"path": "b"}  # string arguments holding JSON are unwrapped
    assert len({c["id"] for c in parsed.tool_calls}) == 2


def test_missing_arguments_mean_empty_object_and_unclosed_last_block_counts():
    parsed = parse_reply('<tool_call>\n{"name": "read_file"}', [READ])
    assert parsed.error is None and args_of(parsed.tool_calls[0]) == {}


@pytest.mark.parametrize("reply, reason", [
    ('<tool_call>{"name": "exec_command", "arguments": {"cmd": "ls"</tool_call>', "not valid JSON"),
    ('<tool_call>["exec_command"]</tool_call>', 'with a "name"'),
    ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', "no tool named 'rm_rf'"),
    ('<tool_call>{"name": "exec_command", "arguments": ["ls"]}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "exec_command", "arguments": "ls -l"}</tool_call>', "a string that is not JSON"),
])
def test_malformed_call_comes_back_as_content_with_the_note(reply, reason):
    parsed = parse_reply(reply, [EXEC])
    assert parsed.tool_calls == []
    assert reason in parsed.error
    assert parsed.content == reply + NOTE.format(reason=parsed.error)
    assert parsed.content.endswith('Write each call as <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>.]')
    assert "[orchard: tool call not understood: " in parsed.content


def test_one_malformed_block_cancels_the_good_ones():
    reply = ('<tool_call>{"name": "exec_command", "arguments": {"cmd": "ls"}}</tool_call>'
             '<tool_call>{"name": "nope"}</tool_call>')
    parsed = parse_reply(reply, [EXEC])
    assert parsed.tool_calls == [] and "no tool named 'nope'" in parsed.error


def test_a_block_cut_off_by_max_tokens_is_malformed():
    reply = '<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls"}}'
    assert parse_reply(reply, [EXEC]).tool_calls  # ended by the model: accepted
    parsed = parse_reply(reply, [EXEC], truncated=True)
    assert parsed.tool_calls == [] and "cut off" in parsed.error


def test_no_tools_offered_or_tool_choice_none_parses_nothing():
    reply = '<tool_call>{"name": "exec_command", "arguments": {"cmd": "ls"}}</tool_call>'
    assert parse_reply(reply, None).content == reply
    assert parse_reply(reply, [EXEC], tool_choice="none").tool_calls == []
    assert parse_reply("   \n", None).content is None


# ---- fenced shell blocks ----

@pytest.mark.parametrize("tool, key, value", [
    (EXEC, "cmd", "ls -la\necho done"),
    (OPENCLAW_EXEC, "command", "ls -la\necho done"),
    (fn("bash", {"command": {"type": "string"}}), "command", "ls -la\necho done"),
    (SHELL_ARRAY, "command", ["bash", "-lc", "ls -la\necho done"]),
])
def test_a_bash_fence_is_a_call_to_the_offered_shell_tool(tool, key, value):
    reply = "I will list the files.\n```bash\nls -la\necho done\n```\nThen I read them."
    parsed = parse_reply(reply, [READ, tool])
    [call] = parsed.tool_calls
    assert call["function"]["name"] == tool["function"]["name"]
    assert args_of(call) == {key: value}
    assert parsed.content == "I will list the files.\n\nThen I read them."


def test_untagged_fence_counts_but_other_languages_do_not():
    assert args_of(parse_reply("```\npwd\n```", [EXEC]).tool_calls[0]) == {"cmd": "pwd"}
    python_then_prose = "```python\nprint(1)\n```\nDone."
    parsed = parse_reply(python_then_prose, [EXEC])
    assert parsed.tool_calls == [] and parsed.content == python_then_prose and parsed.error is None
    # the first shell block after a python block is the call
    parsed = parse_reply("```python\nprint(1)\n```\nnow run:\n```sh\npython a.py\n```", [EXEC])
    assert args_of(parsed.tool_calls[0]) == {"cmd": "python a.py"}


def test_fences_need_a_shell_tool_and_lose_to_tool_call_blocks():
    assert parse_reply("```bash\nls\n```", [READ]).tool_calls == []
    reply = '```bash\nls\n```\n<tool_call>{"name": "read_file", "arguments": {"path": "x"}}</tool_call>'
    [call] = parse_reply(reply, [EXEC, READ]).tool_calls
    assert call["function"]["name"] == "read_file"


def test_unclosed_fence_counts_unless_cut_off():
    assert parse_reply("```bash\nmake test", [EXEC]).tool_calls
    assert parse_reply("```bash\nmake te", [EXEC], truncated=True).tool_calls == []
    assert parse_reply("```bash\n\n```", [EXEC]).tool_calls == []  # an empty script is no call


# ---- rendering the prompt ----

def test_tools_are_described_in_the_system_prompt():
    out = render_messages([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], [EXEC])
    assert [m["role"] for m in out] == ["system", "user"]
    system = out[0]["content"]
    assert system.startswith("Be brief.\n\n# Tools")
    assert "<tool_call>" in system and "- exec_command: Runs a shell command." in system
    assert '"cmd": "string, required: the command"' in system and '"workdir": "string"' in system
    assert describe_tools([EXEC]) in system


def test_history_is_written_in_the_same_markup():
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "Dev rules."}]},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "exec_command", "arguments": '{"cmd": "ls"}'}},
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "print(1)"}]},
    ]
    out = render_messages(messages, [EXEC, READ])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Dev rules.\n\n# Tools")
    assert out[2]["content"] == ('Looking.\n<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n'
                                 '</tool_call>\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n'
                                 '</tool_call>')
    assert out[3]["content"] == "<tool_response>\na.py\n</tool_response>\n<tool_response>\nprint(1)\n</tool_response>"
    # what the model writes parses back to the same calls
    parsed = parse_reply(out[2]["content"], [EXEC, READ])
    assert [(c["function"]["name"], args_of(c)) for c in parsed.tool_calls] == [
        ("exec_command", {"cmd": "ls"}), ("read_file", {"path": "a"})]


def test_no_tools_no_system_prompt_is_added():
    assert render_messages([{"role": "user", "content": "hi"}]) == [{"role": "user", "content": "hi"}]
    out = render_messages([{"role": "user", "content": "hi"}], [EXEC], tool_choice="none")
    assert out == [{"role": "user", "content": "hi"}]
    out = render_messages([{"role": "user", "content": "hi"}], [EXEC])
    assert out[0]["role"] == "system" and out[0]["content"].startswith("You are a helpful assistant.\n\n# Tools")


def test_tool_choice_forces_the_start_of_the_reply():
    assert forced_start([EXEC], "auto") == "" and forced_start(None, "required") == ""
    assert forced_start([EXEC], "required") == '<tool_call>\n{"name": "'
    start = forced_start([EXEC], {"type": "function", "function": {"name": "exec_command"}})
    assert start == '<tool_call>\n{"name": "exec_command", "arguments": '
    parsed = parse_reply(start + '{"cmd": "ls"}}\n</tool_call>', [EXEC])
    assert args_of(parsed.tool_calls[0]) == {"cmd": "ls"}


# ---- streaming hold-back ----

def test_safe_length_holds_markers_and_their_prefixes():
    holds = markers([EXEC])
    assert holds == ("<tool_call>", "```")
    assert markers([READ]) == ("<tool_call>",) and markers([EXEC], "none") == () and markers(None) == ()
    assert safe_length("Hello there", holds) == len("Hello there")
    assert safe_length("Hello <tool", holds) == len("Hello ")
    assert safe_length("Hello <tool_call>{...", holds) == len("Hello ")
    assert safe_length("Run:\n``", holds) == len("Run:\n")
    assert safe_length("Run:\n", holds, hold_space=True) == len("Run:")
    assert safe_length("abc STO", ("STOP",)) == len("abc ")
