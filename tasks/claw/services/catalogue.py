"""`ACTIONS`: every action of the claw services, with a one-line description and the JSON schema
of its arguments, from which a task (or a synthesiser) builds its `ToolSpec`s:

    ACTIONS["mail"]["send_message"] == {"description": "...", "input_schema": {...}}

Action names are unique across services (a task names a tool by its action). The schemas keep
to what every harness passes to the model unchanged (codex drops `minimum`/`maximum`, say):
`type` (a name, or a list of them for a nullable value), `description`, `default`, `properties`,
`required`, `items`, `additionalProperties`; bounds are checked by the action itself.
"""

from __future__ import annotations

from typing import Any

_STR = {"type": "string"}
_NSTR = {"type": ["string", "null"]}
_EMAILS = {"type": "array", "items": {"type": "string"}}
_WHEN = "ISO 8601 date-time with offset (e.g. 2026-12-01T10:00:00+01:00), or a date for all day"


def _obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _d(schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {**schema, "description": description, **extra}


ACTIONS: dict[str, dict[str, dict[str, Any]]] = {
    "mail": {
        "list_messages": {
            "description": "List the messages of a mailbox, newest first (id, from, subject, date, unread).",
            "input_schema": _obj({
                "mailbox": _d(_STR, "INBOX, Archive, Sent, Trash or another mailbox", default="INBOX"),
                "unread_only": _d({"type": "boolean"}, "only unread messages", default=False),
                "limit": _d({"type": "integer"}, "at most this many (1 to 200)", default=20),
            }),
        },
        "search_messages": {
            "description": "Find messages whose sender, recipients, subject or body contain the text "
                           "(case-insensitive), newest first.",
            "input_schema": _obj({
                "query": _d(_STR, "text to look for"),
                "mailbox": _d(_NSTR, "one mailbox, or null for all", default=None),
            }, ("query",)),
        },
        "read_message": {
            "description": "Read one message in full (it becomes read).",
            "input_schema": _obj({"id": _d(_STR, "the message id")}, ("id",)),
        },
        "send_message": {
            "description": "Send an e-mail from the user's address (a copy lands in Sent).",
            "input_schema": _obj({
                "to": _d({"type": ["array", "string"], "items": _STR}, "recipient address, or a list of them"),
                "cc": _d(_EMAILS, "Cc addresses", default=[]),
                "subject": _d(_STR, "subject line"),
                "body": _d(_STR, "plain-text body"),
                "in_reply_to": _d(_NSTR, "id of the message this answers", default=None),
            }, ("to", "subject", "body")),
        },
        "move_message": {
            "description": "Move a message to another mailbox.",
            "input_schema": _obj({"id": _d(_STR, "the message id"),
                                  "mailbox": _d(_STR, "the destination mailbox")}, ("id", "mailbox")),
        },
        "delete_message": {
            "description": "Delete a message (it moves to Trash).",
            "input_schema": _obj({"id": _d(_STR, "the message id")}, ("id",)),
        },
        "mark_message": {
            "description": "Mark a message read or unread.",
            "input_schema": _obj({"id": _d(_STR, "the message id"),
                                  "unread": _d({"type": "boolean"}, "true: unread, false: read")},
                                 ("id", "unread")),
        },
    },
    "calendar": {
        "list_events": {
            "description": "List calendar events overlapping [start, end) (both optional), by start time.",
            "input_schema": _obj({"start": _d(_NSTR, _WHEN, default=None),
                                  "end": _d(_NSTR, _WHEN, default=None)}),
        },
        "create_event": {
            "description": "Create a calendar event; returns its uid.",
            "input_schema": _obj({
                "summary": _d(_STR, "title"),
                "start": _d(_STR, _WHEN),
                "end": _d(_STR, _WHEN + "; not before start"),
                "location": _d(_STR, "where", default=""),
                "description": _d(_STR, "notes", default=""),
                "attendees": _d(_EMAILS, "attendee e-mail addresses", default=[]),
            }, ("summary", "start", "end")),
        },
        "update_event": {
            "description": "Change some fields of an event (the ones given).",
            "input_schema": _obj({
                "uid": _d(_STR, "the event's uid"),
                "summary": _d(_STR, "title"),
                "start": _d(_STR, _WHEN),
                "end": _d(_STR, _WHEN),
                "location": _d(_STR, "where"),
                "description": _d(_STR, "notes"),
                "attendees": _d(_EMAILS, "attendee e-mail addresses (replaces the list)"),
            }, ("uid",)),
        },
        "delete_event": {
            "description": "Delete a calendar event.",
            "input_schema": _obj({"uid": _d(_STR, "the event's uid")}, ("uid",)),
        },
        "list_todos": {
            "description": "List todos (open ones unless include_done).",
            "input_schema": _obj({"include_done": _d({"type": "boolean"}, "also completed todos", default=False)}),
        },
        "create_todo": {
            "description": "Create a todo; returns its uid.",
            "input_schema": _obj({"summary": _d(_STR, "what to do"),
                                  "due": _d(_NSTR, "due date or date-time (ISO 8601), or null", default=None)},
                                 ("summary",)),
        },
        "complete_todo": {
            "description": "Mark a todo done.",
            "input_schema": _obj({"uid": _d(_STR, "the todo's uid")}, ("uid",)),
        },
    },
    "contacts": {
        "search_contacts": {
            "description": "Find contacts whose name, e-mail, phone or organisation contain the text.",
            "input_schema": _obj({"query": _d(_STR, "text to look for (empty: every contact)")}, ("query",)),
        },
        "create_contact": {
            "description": "Add a contact; returns its uid.",
            "input_schema": _obj({"name": _d(_STR, "full name"), "email": _d(_STR, "e-mail address"),
                                  "phone": _d(_STR, "phone number", default=""),
                                  "org": _d(_STR, "organisation", default="")}, ("name", "email")),
        },
    },
}
