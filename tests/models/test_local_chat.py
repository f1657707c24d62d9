"""ChatJob's streaming logic on a character-level stand-in for the model (no torch): what is held
back, where a reply stops, and that the streamed and whole answers always agree."""

from __future__ import annotations

import json
import threading
from typing import Any, Iterator

import pytest

from orchard_cli.errors import UsageError
from orchard_cli.models.local_chat import ChatJob, ContextLengthError
from orchard_cli.models.local_model import Step
from orchard_cli.proxy.sse import ChatAssembler

EXEC = {"type": "function", "function": {"name": "exec_command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}


class CharModel:
    """One token per character; replies with `script`, then ends its turn (max_tokens cuts it short)."""

    name, context = "chars", 4096

    def __init__(self, script: str) -> None:
        self.script = script
        self.lock = threading.Lock()
        self.prompts: list[str] = []

    def encode_chat(self, messages: list[dict[str, Any]], prefix: str = "") -> list[int]:
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>" + prefix
        self.prompts.append(text)
        return [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)

    def steps(self, prompt_ids: list[int], *, max_tokens: int, cancel: threading.Event | None = None,
              info: dict[str, Any] | None = None, **_: Any) -> Iterator[Step]:
        for n, char in enumerate(self.script[:max_tokens]):
            yield Step(ord(char), -0.1 * (n + 1), [(ord(char), -0.1 * (n + 1))])


def both(script: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The streamed chunks and the whole completion of the same run."""
    job = ChatJob(CharModel(script), {"messages": [{"role": "user", "content": "go"}], **body})
    chunks = list(job.chunks())
    return chunks, job.completion()


def streamed_text(chunks: list[dict[str, Any]]) -> str:
    return "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c["choices"])


def assembled(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    assembler = ChatAssembler()
    for chunk in chunks:
        assembler.feed(chunk)
    return assembler.result()["choices"][0]


def test_plain_text_streams_one_piece_per_token_and_agrees():
    chunks, whole = both("Hello!", {"max_tokens": 50})
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]] == list("Hello!")
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": "Hello!"}
    assert assembled(chunks)["message"]["content"] == "Hello!"
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"] == "stop"


def test_a_tool_call_is_never_streamed_as_text():
    script = 'Sure.\n<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "ls"}}\n</tool_call>'
    chunks, whole = both(script, {"tools": [EXEC], "max_tokens": 200})
    assert streamed_text(chunks) == "Sure.\n" and "<" not in streamed_text(chunks)
    message = whole["choices"][0]["message"]
    assert message["content"] == "Sure.\n"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"cmd": "ls"}
    got = assembled(chunks)
    assert got["message"]["tool_calls"] == message["tool_calls"]
    assert got["finish_reason"] == whole["choices"][0]["finish_reason"] == "tool_calls"


def test_a_reply_stops_where_the_model_invents_a_tool_response():
    script = '<tool_call>{"name": "exec_command", "arguments": {"cmd": "ls"}}</tool_call>\n<tool_response>\na.py'
    chunks, whole = both(script, {"tools": [EXEC], "max_tokens": 500})
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert whole["choices"][0]["message"]["content"] is None  # the "\n" before it is blank
    assert whole["usage"]["completion_tokens"] < len(script)


def test_a_malformed_call_arrives_whole_with_the_note_in_both_forms():
    script = 'Plan:\n<tool_call>{"name": "exec_command", "arguments": {"cmd": </tool_call>'
    chunks, whole = both(script, {"tools": [EXEC], "max_tokens": 200})
    content = whole["choices"][0]["message"]["content"]
    assert content.startswith(script) and "[orchard: tool call not understood: " in content
    assert streamed_text(chunks) == content and "tool_calls" not in whole["choices"][0]["message"]


def test_a_shell_fence_becomes_a_call_and_other_fences_stay_text():
    chunks, whole = both("Run:\n```bash\nls -la\n```", {"tools": [EXEC], "max_tokens": 200})
    assert whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"cmd": "ls -la"}'
    assert streamed_text(chunks) == "Run:\n" == whole["choices"][0]["message"]["content"]
    text = "Code:\n```python\nprint(1)\n```\nok"
    chunks, whole = both(text, {"tools": [EXEC], "max_tokens": 200})
    assert streamed_text(chunks) == whole["choices"][0]["message"]["content"] == text


def test_cut_off_by_max_tokens_inside_a_call_is_length_and_malformed():
    script = '<tool_call>{"name": "exec_command", "arguments": {"cmd": "ls"}}</tool_call>'
    chunks, whole = both(script, {"tools": [EXEC], "max_tokens": 20})
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "length" and "cut off (max_tokens)" in choice["message"]["content"]
    assert streamed_text(chunks) == choice["message"]["content"]


def test_stop_strings_are_not_shown_even_partly():
    chunks, whole = both("one two STOP three", {"stop": ["STOP"], "max_tokens": 50})
    assert whole["choices"][0]["message"]["content"] == "one two " == streamed_text(chunks)
    assert whole["choices"][0]["finish_reason"] == "stop"


def test_forced_tool_choice_is_part_of_the_parsed_reply():
    body = {"tools": [EXEC], "tool_choice": {"type": "function", "function": {"name": "exec_command"}},
            "max_tokens": 50}
    job = ChatJob(CharModel('{"cmd": "pwd"}}\n</tool_call>'), {"messages": [{"role": "user", "content": "x"}], **body})
    whole = job.run()
    assert job.model.prompts[0].endswith('<assistant><tool_call>\n{"name": "exec_command", "arguments": ')
    assert whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"cmd": "pwd"}'


def test_token_ids_and_logprobs_line_up_with_the_text():
    body = {"max_tokens": 50, "logprobs": True, "top_logprobs": 1, "return_token_ids": True,
            "stream_options": {"include_usage": True}}
    chunks, whole = both("abc", body)
    choice = whole["choices"][0]
    assert choice["token_ids"] == [97, 98, 99] and [e["token"] for e in choice["logprobs"]["content"]] == list("abc")
    assert whole["prompt_token_ids"] == chunks[0]["prompt_token_ids"]
    got = assembled(chunks)
    assert got["token_ids"] == choice["token_ids"] and got["logprobs"] == choice["logprobs"]
    assert chunks[-1]["usage"] == whole["usage"] and whole["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize("body, error", [
    ({"messages": []}, UsageError), ({"messages": "hi"}, UsageError),
    ({"messages": [{"role": "user", "content": "x"}], "n": 3}, UsageError),
    ({"messages": [{"role": "user", "content": "x"}], "top_p": 2}, UsageError),
    ({"messages": [{"role": "user", "content": "x"}], "stop": [1]}, UsageError),
    ({"messages": [{"role": "user", "content": "x" * 5000}]}, ContextLengthError),
])
def test_bad_requests_raise_usage_errors(body, error):
    with pytest.raises(error):
        ChatJob(CharModel(""), body)


def test_max_tokens_is_clipped_to_the_room_left():
    job = ChatJob(CharModel(""), {"messages": [{"role": "user", "content": "x" * 4000}], "max_tokens": 1000})
    assert job.max_tokens == CharModel.context - len(job.prompt_ids)
