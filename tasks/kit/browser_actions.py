"""The web action space, BrowserGym's in spirit: each action is a tool (service `browser`) that
every harness sees the same way (MCP for OpenClaw, Codex and ZeroClaw; `task-tool` for the bash
agent; orchard's web agent calls them directly), and each returns the page as it is afterwards.

An element is named by `bid`, an id from the last observation's accessibility tree (Playwright's
own `[ref=e12]`), or by `selector`, any Playwright selector (`role=button[name="Add to cart"]`,
`#qty`), one of the two (a top-level `anyOf` is not a schema every model API takes, so the
browser checks it): the gold solutions use selectors, so they survive a page whose ids moved. Coordinate
actions (`mouse_click`) serve vision models. `answer` (or BrowserGym's `send_msg_to_user`) is the
final reply to the user; the last one is the episode's answer.
"""

from __future__ import annotations

from typing import Any

from orchard_cli.tools.spec import ToolSpec

SERVICE = "browser"
_ELEMENT = {"bid": {"type": "string", "description": "the element's id in the observation (e.g. 'e12')"},
            "selector": {"type": "string", "description": "or a Playwright selector (e.g. \"role=button[name='Go']\")"}}


def _schema(properties: dict[str, Any], required: list[str] | None = None, element: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {**(_ELEMENT if element else {}), **properties},
                              "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


ACTIONS: dict[str, dict[str, Any]] = {
    "observe": {"description": "Look at the page: URL, title, open tabs and its accessibility tree with element ids.",
                "input_schema": _schema({})},
    "click": {"description": "Click an element.",
              "input_schema": _schema({"button": {"type": "string", "enum": ["left", "middle", "right"]},
                                       "double": {"type": "boolean"}}, element=True)},
    "fill": {"description": "Clear a text field and type a value into it.",
             "input_schema": _schema({"value": {"type": "string"}}, ["value"], element=True)},
    "select_option": {"description": "Choose one or more options (by label or value) of a <select>.",
                      "input_schema": _schema({"options": {"anyOf": [{"type": "string"},
                                                                     {"type": "array", "items": {"type": "string"}}]}},
                                              ["options"], element=True)},
    "check": {"description": "Tick (checked=true) or untick a checkbox or radio button.",
              "input_schema": _schema({"checked": {"type": "boolean"}}, element=True)},
    "hover": {"description": "Move the mouse over an element.", "input_schema": _schema({}, element=True)},
    "press": {"description": "Press a key or combination (e.g. 'Enter', 'Control+a'), in an element if one is named.",
              "input_schema": _schema({"key": {"type": "string"}, **_ELEMENT}, ["key"])},
    "scroll": {"description": "Scroll the page by a number of pixels (positive dy: down).",
               "input_schema": _schema({"dx": {"type": "number"}, "dy": {"type": "number"}})},
    "goto": {"description": "Open a URL in the current tab (only the task's sites can be reached).",
             "input_schema": _schema({"url": {"type": "string"}}, ["url"])},
    "go_back": {"description": "Go back one page in the current tab's history.", "input_schema": _schema({})},
    "go_forward": {"description": "Go forward one page in the current tab's history.", "input_schema": _schema({})},
    "new_tab": {"description": "Open a new tab (at a URL, if given) and focus it.",
                "input_schema": _schema({"url": {"type": "string"}})},
    "tab_focus": {"description": "Focus the tab with this index (see the observation's tab list).",
                  "input_schema": _schema({"index": {"type": "integer", "minimum": 0}}, ["index"])},
    "tab_close": {"description": "Close the current tab.", "input_schema": _schema({})},
    "mouse_click": {"description": "Click at page coordinates (pixels from the top left of the viewport).",
                    "input_schema": _schema({"x": {"type": "number"}, "y": {"type": "number"},
                                             "button": {"type": "string", "enum": ["left", "middle", "right"]}},
                                            ["x", "y"])},
    "answer": {"description": "Give the user your final answer (text). Call it once, when the task is done.",
               "input_schema": _schema({"text": {"type": "string"}}, ["text"])},
    "send_msg_to_user": {"description": "The same as answer (BrowserGym's name).",
                         "input_schema": _schema({"text": {"type": "string"}}, ["text"])},
}
NAMES = tuple(ACTIONS)
FINAL = ("answer", "send_msg_to_user")


def tool_specs(names: tuple[str, ...] | list[str] = NAMES) -> list[ToolSpec]:
    """The action tools as the tool surface serves them."""
    return [ToolSpec(name=name, description=ACTIONS[name]["description"], input_schema=ACTIONS[name]["input_schema"],
                     service=SERVICE, action=name) for name in names]
