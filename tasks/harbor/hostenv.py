"""A Harbor task on the local backend: only when its environment asks for nothing the host lacks.

The rule (`host_plan`): the Dockerfile (after `--image-map`) is built `FROM orchard/base:bookworm`,
whose tools (bash, python3, git, coreutils) the local backend's host has too, and adds nothing to
it: its instructions are only WORKDIR, COPY of files of the build context into the workdir, ENV,
ARG, LABEL and CMD (with `$VAR` references substituted as Docker does, from the ARG and ENV lines
before them and the base image's PATH). A RUN line, another base, a prebuilt `docker_image` or an ADD needs the image:
`needs_image`, naming why. The sandbox is the host's tools (read-only) with the workdir, and
/logs, /tests and /solution bound from a folder of the episode's own, removed in `release`.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path, PurePosixPath

BASE = "orchard/base:bookworm"
ALLOWED = {"FROM", "WORKDIR", "COPY", "ENV", "ARG", "LABEL", "CMD"}
HOST_TOOLS = ("bash", "python3", "tar", "base64")
BOUND = ("logs", "tests", "solution")
LABEL = "orchard.harbor.host_dir"


BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
"""The environment orchard's base image declares (what `$PATH` means in an ENV line)."""
_BRACED = re.compile(r"(\w+)(?::([-+])(.*))?", re.S)
_NAME = re.compile(r"\w+")


def words(text: str, known: dict[str, str]) -> list[str]:
    """A line's words as Docker reads ENV, ARG, WORKDIR and COPY: split at blanks outside quotes
    first, then `$VAR`, `${VAR}`, `${VAR:-word}`, `${VAR:+word}` substituted inside each word from
    the ARG and ENV values declared before the line (an unknown one is empty); a value holding
    blanks or quotes stays in its word. Nothing inside single quotes; `\\` escapes the next
    character (inside double quotes: `\\$`, `\\"`, `\\\\`). ValueError: an unclosed quote or `${`."""
    out: list[str] = []
    word: list[str] = []
    started = False
    i = 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            if started:
                out.append("".join(word))
                word, started = [], False
            i += 1
            continue
        started = True
        if c == "\\":
            word.append(text[i + 1:i + 2])
            i += 2
        elif c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ValueError("an unclosed single quote")
            word.append(text[i + 1:end])
            i = end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= len(text):
                    raise ValueError("an unclosed double quote")
                c = text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and text[i + 1:i + 2] in ('"', "$", "\\"):
                    word.append(text[i + 1])
                    i += 2
                elif c == "$":
                    value, i = _variable(text, i, known)
                    word.append(value)
                else:
                    word.append(c)
                    i += 1
        elif c == "$":
            value, i = _variable(text, i, known)
            word.append(value)
        else:
            word.append(c)
            i += 1
    if started:
        out.append("".join(word))
    return out


def _variable(text: str, i: int, known: dict[str, str]) -> tuple[str, int]:
    """The value of the reference at text[i] ('$') and the index after it."""
    if text[i + 1:i + 2] == "{":
        end = text.find("}", i + 2)
        match = _BRACED.fullmatch(text[i + 2:end]) if end >= 0 else None
        if not match:
            raise ValueError(f"a bad substitution at {text[i:i + 40]!r}")
        value = known.get(match[1], "")
        alt = " ".join(words(match[3], known)) if match[2] else ""
        if match[2] == "-":
            value = value or alt
        elif match[2] == "+":
            value = alt if value else ""
        return value, end + 1
    match = _NAME.match(text, i + 1)
    if not match:
        return "$", i + 1
    return known.get(match[0], ""), match.end()


def _lines(dockerfile: str) -> list[str]:
    """Instructions, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def host_plan(task, image_map: dict[str, str]) -> tuple[str, list[tuple[str, str]], dict[str, str]] | str:
    """(workdir, [(context source, destination)], env) when the task can run on the host, else
    the reason it needs its image."""
    from orchard_cli.tasks.harbor.environment import base_images, map_images

    if task.config.environment.docker_image and not task.dockerfile:
        return f"it runs in the prebuilt image {task.config.environment.docker_image}"
    dockerfile = map_images(task.dockerfile or "", image_map)
    bases = base_images(dockerfile)
    if bases != [BASE]:
        return f"its environment is built from {', '.join(bases) or 'nothing'}, not {BASE} alone"
    missing = [t for t in HOST_TOOLS if not shutil.which(t)]
    if missing:
        return f"the host lacks {', '.join(missing)}"
    workdir, copies, env = "/", [], {}
    known = dict(BASE_ENV)
    for line in _lines(dockerfile):
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word not in ALLOWED:
            return f"its Dockerfile has {word} lines (it changes the image: run it on docker)"
        try:  # Docker's order: the line split into words, then references substituted in each
            parts = words(rest, known) if word in ("ARG", "WORKDIR", "ENV", "COPY") else []
        except ValueError as exc:
            return f"its Dockerfile's line {line[:80]!r} does not parse ({exc})"
        if word == "ARG":
            for part in parts:
                name, sep, default = part.partition("=")
                if name and name not in known:
                    known[name] = default if sep else ""
        elif word == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / " ".join(parts))
        elif word == "ENV":
            if parts and "=" not in parts[0]:
                added = {parts[0]: " ".join(parts[1:])}
            else:
                added = dict(p.split("=", 1) for p in parts if "=" in p)
            env.update(added)  # every reference on the line saw the values from before it
            known.update(added)
        elif word == "COPY":
            parts = [p for p in parts if not p.startswith("--")]
            if len(parts) != 2:
                return f"COPY {rest!r}: only one source to one destination runs on the host"
            dest = str(PurePosixPath(workdir) / parts[1])
            if not (dest == workdir or dest.startswith(workdir.rstrip("/") + "/")):
                return f"COPY into {dest}, outside the workdir {workdir}"
            copies.append((parts[0], dest))
    if workdir == "/":
        return "it sets no WORKDIR"
    return workdir, copies, env


def host_folder(task_id: str) -> Path:
    """A new folder of the episode's /logs, /tests and /solution."""
    from orchard_cli.home import orchard_home

    root = orchard_home() / "harbor-host"
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=re.sub(r"[^a-z0-9-]", "-", task_id.lower())[:40] + "-", dir=root))
    for name in BOUND:
        (folder / name).mkdir()
    (folder / "logs" / "agent").mkdir()
    (folder / "logs" / "verifier").mkdir()
    return folder


def copy_in(task, sandbox, workdir: str, copies: list[tuple[str, str]]) -> None:
    """The COPY lines, done by writing the context's files into the workspace."""
    from orchard_cli.tasks.kit.taskfiles import TaskFiles

    files = TaskFiles(task.id, task.folder)
    for source, dest in copies:
        rel = str(PurePosixPath("environment") / source).rstrip("/")
        found = files.read_tree(rel) if files.is_dir(rel) else {rel: files.read_bytes(rel)}
        for name, data in found.items():
            inner = name[len(rel):].lstrip("/") if files.is_dir(rel) else PurePosixPath(name).name
            target = PurePosixPath(dest) / inner if (files.is_dir(rel) or source.endswith("/") or dest.endswith("/")) else PurePosixPath(dest)
            sandbox.write_file(str(target), data, 0o755 if name.endswith(".sh") else 0o644)
