"""A notebook service for the test tasks: notes to list, read, add and delete; /audit and /reset."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

app = FastAPI()
SOURCE = Path(os.environ.get("NOTEBOOK_DATA", "tasks/T01_find_code/fixtures/notes.json"))
state: dict = {}


def load() -> None:
    state.update(notes=json.loads(SOURCE.read_text(encoding="utf-8")), calls=[], added=[], deleted=[])


load()


class NoteId(BaseModel):
    note_id: str


class NewNote(BaseModel):
    title: str
    body: str = ""


@app.post("/notes/list")
def list_notes() -> dict:
    found = [{"note_id": n["note_id"], "title": n["title"]} for n in state["notes"]]
    state["calls"].append({"endpoint": "list"})
    return {"notes": found}


@app.post("/notes/get")
def get_note(req: NoteId):
    state["calls"].append({"endpoint": "get", "note_id": req.note_id})
    note = next((n for n in state["notes"] if n["note_id"] == req.note_id), None)
    if note is None:
        return JSONResponse(status_code=404, content={"error": f"no note {req.note_id}"})
    return note


@app.post("/notes/add")
def add_note(req: NewNote) -> dict:
    note = {"note_id": f"n{len(state['notes']) + 1}", "title": req.title, "body": req.body}
    state["notes"].append(note)
    state["added"].append(note)
    state["calls"].append({"endpoint": "add", "title": req.title})
    return {"added": note["note_id"]}


@app.post("/notes/delete")
def delete_note(req: NoteId) -> dict:
    state["notes"] = [n for n in state["notes"] if n["note_id"] != req.note_id]
    state["deleted"].append(req.note_id)
    state["calls"].append({"endpoint": "delete", "note_id": req.note_id})
    return {"deleted": req.note_id}


@app.get("/notes/audit")
def audit() -> dict:
    return {"calls": state["calls"], "added": state["added"], "deleted": state["deleted"]}


@app.post("/notes/reset")
def reset() -> dict:
    load()
    return {"status": "reset"}


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "9310")), log_level="warning")
