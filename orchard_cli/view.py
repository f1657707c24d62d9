"""`orchard view FILE`: trajectories as a self-contained HTML page a person can read.

Per episode: the verdict, what it cost, the task, the conversation (assistant text, tool calls
with their arguments, tool outputs), the evidence the grader read (the patch, the final answer,
files, command outputs, tool dispatches, service state) and the test results, and the model calls
as the proxy recorded them. Verdict colours are the families' own (`categories`). No scripts, no external assets: the page opens from disk anywhere.
"""

from __future__ import annotations

import json
import os
from html import escape
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchard_cli.errors import UsageError
from orchard_cli.evidence import Evidence
from orchard_cli.outcome import CategoryInfo, category_info
from orchard_cli.trajectory import Trajectory

FOLD_CHARS = 1500  # longer texts start folded
Categories = dict[str, CategoryInfo]

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;background:#f6f8fa;color:#1f2328}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 16px} h2{font-size:18px;margin:0} h3{font-size:15px;margin:20px 0 8px}
.episode{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:20px;margin:0 0 28px}
.head{display:flex;gap:12px;align-items:center;flex-wrap:wrap}
.badge{color:#fff;border-radius:12px;padding:2px 10px;font-weight:600;font-size:13px}
.facts{color:#57606a;margin:6px 0 0;font-size:13px} .facts b{color:#1f2328;font-weight:600}
.shot{max-width:640px;width:100%;border:1px solid #d0d7de;border-radius:6px;margin:6px 0;display:block}
.msg{border-left:4px solid #d0d7de;margin:10px 0;padding:6px 12px;background:#fbfcfd;border-radius:0 6px 6px 0}
.msg .role{font-size:12px;font-weight:700;text-transform:uppercase;letter-spacing:.04em;color:#57606a}
.system{border-color:#8c959f} .user{border-color:#0969da} .assistant{border-color:#1a7f37} .tool{border-color:#bf8700}
.call{background:#f0f6ff;border:1px solid #c8dcf5;border-radius:6px;padding:6px 10px;margin:6px 0}
.call .fn{font-family:ui-monospace,Menlo,monospace;font-weight:700;color:#0550ae}
pre{white-space:pre-wrap;word-break:break-word;font:12.5px/1.4 ui-monospace,Menlo,Consolas,monospace;margin:4px 0;
background:#f6f8fa;border:1px solid #eaeef2;border-radius:6px;padding:8px}
.text{white-space:pre-wrap;word-break:break-word}
.diff .add{color:#116329;background:#dafbe1} .diff .del{color:#82071e;background:#ffebe9} .diff .hunk{color:#8250df}
.errors{background:#fff8f0;border:1px solid #f0c8a0;border-radius:6px;padding:8px 12px}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left}
th{background:#f6f8fa} details>summary{cursor:pointer;color:#0969da} .muted{color:#57606a}
a{color:#0969da}
"""


def _pre(text: str, cls: str = "") -> str:
    return f'<pre class="{cls}">{escape(text)}</pre>'


def _result(result: object) -> str:
    """A dispatch's result: a text (a web page's observation) folded under its first line, in
    full; anything else as JSON, cut."""
    if isinstance(result, str) and "\n" in result:
        return _fold(escape(result.split("\n", 1)[0][:200]), _pre(result))
    return f"<code>{escape(json.dumps(result, ensure_ascii=False, default=str)[:400])}</code>"


def _fold(summary: str, body: str, *, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{summary}</summary>{body}</details>"


def _long_text(text: str, cls: str = "text") -> str:
    body = f'<div class="{cls}">{escape(text)}</div>' if cls == "text" else _pre(text, cls)
    if len(text) <= FOLD_CHARS:
        return body
    return _fold(f"{len(text):,} characters (show)", body)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, indent=1, ensure_ascii=False)


def _image_of(part: Any) -> str | None:
    """An image content part's reference (`orchard-image:...`) or data URL, else None."""
    if not isinstance(part, dict) or part.get("type") not in ("image_url", "input_image", "image"):
        return None
    url = part.get("image_url")
    url = url.get("url") if isinstance(url, dict) else url
    if url is None and isinstance(part.get("source"), dict):
        url = part["source"].get("data")
    return url if isinstance(url, str) and url.startswith(("orchard-image:", "data:image/")) else None


def _images(content: Any) -> list[str]:
    return [ref for ref in (_image_of(p) for p in content) if ref] if isinstance(content, list) else []


def _arguments(raw: str) -> str:
    """A tool call's arguments for reading: a lone command/input shown as is, JSON pretty."""
    try:
        value = json.loads(raw)
    except (ValueError, TypeError):
        return raw or ""
    if isinstance(value, dict) and len(value) == 1:
        only = next(iter(value.values()))
        if isinstance(only, str):
            return only
        if isinstance(only, list) and all(isinstance(x, str) for x in only):
            return " ".join(only)
    return json.dumps(value, indent=2, ensure_ascii=False)


def _message(message: dict[str, Any]) -> str:
    role = str(message.get("role", ""))
    parts = [f'<div class="role">{escape(role)}'
             + (f' <span class="muted">· {escape(str(message["tool_call_id"]))}</span>' if message.get("tool_call_id") else "")
             + "</div>"]
    if message.get("reasoning_content"):
        parts.append(_fold("reasoning", _pre(str(message["reasoning_content"]))))
    content = message.get("content")
    shots = _images(content)
    text = _content_text([p for p in content if not _image_of(p)] if shots else content)
    if text:
        parts.append(_long_text(text, "text" if role != "tool" else ""))
    parts += [f"<img class='shot' src='{escape(ref)}' alt='image'>" for ref in shots]
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        parts.append(f'<div class="call"><span class="fn">{escape(str(fn.get("name", "")))}</span> '
                     f'<span class="muted">{escape(str(call.get("id", "")))}</span>'
                     f'{_pre(_arguments(fn.get("arguments") or ""))}</div>')
    body = "".join(parts)
    if role == "system":
        body = _fold(f"system prompt ({len(text):,} characters)", body)
    return f'<div class="msg {escape(role)}">{body}</div>'


def _diff(patch: str) -> str:
    if not patch.strip():
        return '<p class="muted">no patch (the working tree was unchanged)</p>'
    lines = []
    for line in patch.splitlines():
        cls = ("add" if line.startswith("+") and not line.startswith("+++") else
               "del" if line.startswith("-") and not line.startswith("---") else
               "hunk" if line.startswith("@@") else "")
        lines.append(f'<span class="{cls}">{escape(line)}</span>' if cls else escape(line))
    return f'<pre class="diff">{chr(10).join(lines)}</pre>'


def _tests(details: dict[str, Any]) -> str:
    rows = []
    for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        value = details.get(group)
        if not isinstance(value, dict):
            continue
        for status in ("success", "failure"):
            for name in value.get(status) or ():
                mark = "✔" if status == "success" else "✘"
                rows.append(f"<tr><td>{group}</td><td>{mark} {status}</td><td>{escape(str(name))}</td></tr>")
    scalars = {k: v for k, v in details.items() if isinstance(v, (str, int, float, bool)) and k != "error"}
    out = ""
    if scalars:
        out += "<p class='facts'>" + " · ".join(f"{escape(k)}: <b>{escape(str(v))}</b>" for k, v in scalars.items()) + "</p>"
    if rows:
        out += "<table><tr><th>group</th><th>result</th><th>test</th></tr>" + "".join(rows) + "</table>"
    return out or '<p class="muted">no tests ran</p>'


def _calls(t: Trajectory) -> str:
    if not t.calls:
        return '<p class="muted">no model calls were recorded</p>'
    rows = []
    for c in t.calls:
        usage = f"{c.usage.input_tokens:,} / {c.usage.output_tokens:,}" if c.usage else "–"
        error = f"{c.error.type}: {c.error.message}" if c.error else ""
        rows.append(f"<tr><td>{c.seq}</td><td>{c.endpoint}{' (stream)' if c.stream else ''}</td>"
                    f"<td>{c.status}</td><td>{usage}</td><td>{c.timing.ended_ms / 1000:.2f} s</td>"
                    f"<td>{escape(error)}</td></tr>")
    return ("<table><tr><th>#</th><th>API</th><th>status</th><th>tokens in / out</th><th>time</th>"
            "<th>error</th></tr>" + "".join(rows) + "</table>")


def _evidence(t: Trajectory) -> str:
    """What the grader read: the patch (families graded on one), and everything else there is."""
    ev = t.evidence or Evidence(patch=t.patch)
    parts = []
    if ev.patch is not None or t.patch:
        parts.append("<h3>Patch</h3>" + _diff(ev.patch if ev.patch is not None else t.patch))
    if ev.answer:
        parts.append("<h3>Final answer</h3>" + _long_text(ev.answer))
    for path, text in ev.files.items():
        parts.append(_fold(f"file {escape(path)} ({len(text):,} characters)", _pre(text)))
    for cmd in ev.commands:
        parts.append(_fold(f"$ {escape(cmd.command)}  (exit {cmd.exit_code})", _pre(cmd.stdout + cmd.stderr)))
    if ev.dispatches:
        rows = "".join(f"<tr><td>{d.seq}</td><td><code>{escape(d.tool)}</code></td>"
                       f"<td><code>{escape(json.dumps(d.arguments, ensure_ascii=False)[:400])}</code></td>"
                       f"<td>{'' if d.status is None else d.status}</td>"
                       f"<td>{_result(d.result)}</td></tr>" for d in ev.dispatches)
        parts.append(f"<h3>Tool dispatches ({len(ev.dispatches)})</h3><table><tr><th>#</th><th>tool</th>"
                     f"<th>arguments</th><th>status</th><th>result</th></tr>{rows}</table>")
    for name, state in ev.state.items():
        if name in ev.state_before:
            change = state_diff(name, ev.state_before[name], state)
            parts.append(f"<h3>Changes to {escape(name)}</h3>" + (_diff(change) if change else
                         '<p class="muted">unchanged</p>'))
        parts.append(_fold(f"state of {name}", _pre(json.dumps(state, indent=2, ensure_ascii=False, default=str))))
    for name, text in ev.logs.items():
        parts.append(_fold(f"{name} protocol log ({len(text.splitlines())} lines)", _pre(text)))
    return "".join(parts)


def state_diff(name: str, before: Any, after: Any) -> str:
    """A unified diff of a service's state, before the solver and after (JSON, one key a line)."""
    import difflib

    def lines(value: Any) -> list[str]:
        return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=str).splitlines(True)

    return "".join(difflib.unified_diff(lines(before), lines(after), f"a/{name}", f"b/{name}", n=2))


def render_episode(t: Trajectory, categories: Categories | None = None) -> str:
    category = t.outcome.category
    colour = category_info(category, categories).color
    cost = "unknown" if t.cost_usd is None else f"${t.cost_usd:.4f}"
    harness = t.harness + (f" {t.harness_version}" if t.harness_version else "")
    facts = [("task", t.task_id), ("teacher", t.model), ("harness", harness), ("attempt", t.attempt),
             ("calls", len(t.calls)), ("tokens", f"{t.tokens_in:,} in / {t.tokens_out:,} out"),
             ("cost", cost), ("time", f"{t.duration_seconds:.1f} s")]
    parts = [f'<section class="episode" id="{escape(t.episode_id)}"><div class="head">'
             f'<span class="badge" style="background:{colour}">{escape(category)}</span>'
             f"<h2>{escape(t.task_id)}</h2><span class='muted'>{escape(t.episode_id)}</span></div>",
             "<p class='facts'>" + " · ".join(f"{k}: <b>{escape(str(v))}</b>" for k, v in facts) + "</p>"]
    if t.errors:
        parts.append('<div class="errors"><b>What went wrong</b><ul>'
                     + "".join(f"<li>{escape(e)}</li>" for e in t.errors) + "</ul></div>")
    parts.append("<h3>Task</h3>" + _long_text(t.problem_statement or "(no problem statement)"))
    parts.append(f"<h3>Conversation ({len(t.messages)} messages)</h3>")
    parts.append("".join(_message(m) for m in t.messages) or '<p class="muted">no conversation</p>')
    if t.tools:
        names = ", ".join(escape(str((x.get("function") or {}).get("name", ""))) for x in t.tools)
        parts.append(_fold(f"{len(t.tools)} tool(s): {names}", _pre(json.dumps(t.tools, indent=2))))
    parts.append(_evidence(t))
    parts.append(f"<h3>Verdict: {escape(category)}</h3>" + _tests(t.outcome.details))
    if t.outcome.details.get("error"):
        parts.append(_pre(str(t.outcome.details["error"])))
    parts.append("<h3>Model calls</h3>" + _calls(t))
    parts.append("</section>")
    return "".join(parts)


def render_page(trajectories: list[Trajectory], title: str, categories: Categories | None = None) -> str:
    index = ""
    if len(trajectories) > 1:
        rows = "".join(
            f'<tr><td><a href="#{escape(t.episode_id)}">{escape(t.task_id)}</a></td><td>{escape(t.model)}</td>'
            f"<td>{t.attempt}</td><td style='color:{category_info(t.outcome.category, categories).color}'>"
            f"{escape(t.outcome.category)}</td><td>{len(t.calls)}</td><td>{t.tokens_in + t.tokens_out:,}</td></tr>"
            for t in trajectories)
        resolved = sum(t.outcome.resolved for t in trajectories)
        index = (f"<p class='facts'>{len(trajectories)} episodes, <b>{resolved}</b> resolved</p>"
                 "<table><tr><th>task</th><th>teacher</th><th>attempt</th><th>verdict</th><th>calls</th>"
                 f"<th>tokens</th></tr>{rows}</table><br>")
    body = "".join(render_episode(t, categories) for t in trajectories)
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<meta name='viewport' content='width=device-width,initial-scale=1'><style>{CSS}</style></head>"
            f"<body><main><h1>{escape(title)}</h1>{index}{body}</main></body></html>\n")


def view(path: str | Path, *, episode: str | None = None, out: str | Path | None = None,
         categories: Callable[[set[str]], Categories] | None = None) -> tuple[Path, int]:
    """Write the page for FILE (or one episode of it); returns (page path, episodes shown).
    `categories(families)` gives the verdict labels and colours of the families in the file."""
    from orchard_cli.images import images_dir
    from orchard_cli.records import write_text
    from orchard_cli.trajectory import read_trajectories

    path = Path(path)
    trajectories = read_trajectories(path)
    if episode:
        chosen = [t for t in trajectories if t.episode_id == episode or t.episode_id.startswith(episode)]
        if len(chosen) != 1:
            some = ", ".join(t.episode_id for t in trajectories[:5]) or "none"
            what = "no episode" if not chosen else f"{len(chosen)} episodes"
            raise UsageError(f"{what} in {path} matches {episode!r} (some ids: {some})",
                             hint=f"list them with `orchard view {path}`")
        trajectories = chosen
    if not trajectories:
        raise UsageError(f"{path} holds no trajectories")
    title = (f"{trajectories[0].task_id} · {trajectories[0].model}" if episode
             else f"{path.name}: {len(trajectories)} episode(s)")
    target = Path(out) if out else path.with_name(
        path.name.removesuffix(".jsonl") + (f".{trajectories[0].episode_id}" if episode else "") + ".html")
    target.parent.mkdir(parents=True, exist_ok=True)
    known = categories({t.family for t in trajectories}) if categories else None
    page = render_page(trajectories, title, known)
    # images stored beside the trajectories (orchard_cli.images), linked from where the page is
    where = os.path.relpath(images_dir(path.resolve()), target.resolve().parent)
    write_text(target, page.replace("src='orchard-image:", f"src='{escape(Path(where).as_posix())}/"))
    return target, len(trajectories)
