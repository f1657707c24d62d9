"""Run inside a Claw-Eval checkout's own environment (never imported by orchard).

    python helper.py load  ROOT            -> stdout: {"tasks": [...], "problems": [...], "refused": [...]}
                                              (refused: {folder, path, why}, a path the guard refuses)
    python helper.py grade ROOT < JSON     -> stdout: {"scores": {...}, "task_score": float, ...}
    python helper.py serve ROOT            -> one grade per stdin line ({"op": "grade", "payload": ...}),
                                              one answer line each (`@@ORCHARD@@` + JSON, `{"error": ...}`
                                              for a grader that raised); ends at EOF. The checkout is
                                              imported once: a warm grade takes milliseconds, not the
                                              ~0.4 s of its imports. What graders print goes to stderr.

Only the standard library and the checkout's own modules are imported here (and orchard's own
guard on task files, tasks/kit/paths.py, loaded by its path: standard library alone); orchard
talks to this script over JSON, so nothing of the checkout ever enters orchard's process. The checkout modules
used (a checkout missing one gets exit 3 and its name on stderr):

    claw_eval.models.task       TaskDefinition (task.yaml)
    claw_eval.graders.registry  get_grader (tasks/<id>/grader.py)
    claw_eval.models.trace      TraceMessage, ToolDispatch, AuditSnapshot, DimensionScores
    claw_eval.models.scoring    compute_task_score, is_pass
"""

from __future__ import annotations

import base64
import importlib
import inspect
import json
import re
import sys
from pathlib import Path

MODULES = ("claw_eval.models.task", "claw_eval.graders.registry", "claw_eval.models.trace",
           "claw_eval.models.scoring")
_JUDGE_USE = re.compile(r"\bjudge\s*\.\s*[A-Za-z_]\w*")
_PEER = re.compile(r"load_peer_grader\(\s*[\"']([^\"']+)[\"']")
_GRADER_MODULE = re.compile(r"(?:from\s+claw_eval\.graders\.(\w+)\s+import|from\s+claw_eval\.graders\s+import\s+(\w+))")
_PATHLIKE = re.compile(r"^[\w./-]+\.\w{1,5}$")


def _by_path(name: str, where: Path):
    """One of orchard's standard-library modules, loaded by its path (orchard is not importable here)."""
    import importlib.util

    found = sys.modules.get(name)
    if found is None:
        spec = importlib.util.spec_from_file_location(name, where)
        found = importlib.util.module_from_spec(spec)
        sys.modules[name] = found
        spec.loader.exec_module(found)
    return found


def _guard():
    """tasks/kit/paths.py, the rules orchard reads task files by (a path inside the task folder
    or the checkout, no special files, sizes capped), loaded by its path beside this file."""
    return _by_path("orchard_task_paths", Path(__file__).resolve().parent.parent / "kit" / "paths.py")


def _fixtures():
    """fixtures.py beside this file: where Claw-Eval's runner finds each file a task names (the
    task folder, then the checkout root, for the workspace's files), as orchard places them."""
    return _by_path("orchard_claw_eval_fixtures", Path(__file__).resolve().with_name("fixtures.py"))


def _modules(root: Path) -> dict:
    for path in (str(root / "src"), str(root)):
        if path not in sys.path:  # a warm helper grades many times
            sys.path.insert(0, path)
    found = {}
    for name in MODULES:
        try:
            found[name] = importlib.import_module(name)
        except ImportError as exc:
            print(f"{name} ({exc})", file=sys.stderr)
            sys.exit(3)
    return found


def _uses_judge(root: Path, grader: Path) -> bool:
    """Whether the grader (its peers and the shared grader modules it imports) calls a judge."""
    seen: set[Path] = set()
    todo = [grader]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        text = path.read_text(encoding="utf-8", errors="replace")
        if _JUDGE_USE.search(text):
            return True
        todo += [root / "tasks" / peer / "grader.py" for peer in _PEER.findall(text)]
        for a, b in _GRADER_MODULE.findall(text):
            name = a or b
            if name not in ("base", "registry"):
                todo.append(root / "src" / "claw_eval" / "graders" / f"{name}.py")
    return False


def _files(root: Path, folder: Path, task) -> tuple[list[str], dict | None]:
    """(files the task names that are not in the checkout (fixtures kept out of git, say), the
    first refusal of the guard: {path, why}, or None). The files the runner reads are looked up
    where it looks (fixtures.py: workspace files in the task folder, then the checkout root); a
    service's settings that name a path and its script in the checkout root (its working folder),
    then in the task folder."""
    guard, rules = _guard(), _fixtures()
    named = [(p, rules.roots(kind, folder, root)) for p, kind in rules.named(task.model_dump(mode="json"))]
    for svc in task.services:
        for value in (svc.env or {}).values():
            if _PATHLIKE.match(value) and "/" in value:
                named.append((value, (root, folder)))
        script = next((w for w in svc.command.split() if w.endswith(".py")), None)
        if script:
            named.append((script, (root,)))
    gone = []
    for name, roots in named:
        try:
            gone += guard.check_all([name], roots)
        except guard.Refused as exc:
            return gone, {"path": exc.path, "why": exc.why}
    if not (folder / "grader.py").is_file():
        gone.append("grader.py")
    return gone, None


def load(root: Path) -> dict:
    mods = _modules(root)
    guard = _guard()
    model = mods["claw_eval.models.task"].TaskDefinition
    tasks, problems, refused = [], [], []
    for folder in sorted((root / "tasks").iterdir()):
        path = folder / "task.yaml"
        if not path.is_file():
            continue
        try:  # the task folder and its task.yaml inside the checkout's tasks/, a regular file
            guard.check_file(guard.locate("task.yaml", [guard.locate(folder.name, [root / "tasks"])]), "task.yaml")
        except guard.Refused as exc:
            refused.append({"folder": folder.name, "path": f"{folder.name}/{exc.path}" if exc.path == "task.yaml"
                            else exc.path, "why": exc.why})
            continue
        try:
            task = model.from_yaml(path)
        except Exception as exc:  # noqa: BLE001 - reported, the other tasks load
            problems.append({"folder": folder.name, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"})
            continue
        missing, refusal = _files(root, folder, task)
        if refusal:
            refused.append({"folder": folder.name, **refusal})
            continue
        tasks.append({"folder": folder.name, "definition": task.model_dump(mode="json", exclude={"task_file"}),
                      "uses_judge": _uses_judge(root, folder / "grader.py"), "missing": missing})
    return {"tasks": tasks, "problems": problems, "refused": refused}


def _judge(config: dict | None):
    if not config:
        return None
    from claw_eval.graders.llm_judge import LLMJudge

    return LLMJudge(model_id=config["model"], api_key=config.get("api_key"), base_url=config["base_url"])


def grade(root: Path, request: dict) -> dict:
    mods = _modules(root)
    trace, scoring = mods["claw_eval.models.trace"], mods["claw_eval.models.scoring"]
    folder = root / "tasks" / request["folder"]
    task = mods["claw_eval.models.task"].TaskDefinition.from_yaml(folder / "task.yaml")
    trace_id = request.get("trace_id", "orchard")
    messages = [trace.TraceMessage.model_validate({"trace_id": trace_id, "message": m}) for m in request["messages"]]
    dispatches = [trace.ToolDispatch.model_validate({"trace_id": trace_id, **d}) for d in request["dispatches"]]
    snapshot = dict(request.get("env_snapshot") or {})
    guard, rules = _guard(), _fixtures()
    for rel in task.local_grader_files:  # a path that leaves its roots raises: refused at load too
        local = guard.locate(rel, rules.roots(rules.LOCAL_GRADER, folder, root))
        snapshot[f"local_file:{rel}"] = ({"encoding": "base64", "content": base64.b64encode(guard.read(local, rel)).decode()}
                                         if local.exists() else {"error": f"not found: {folder / rel}"})
    grader = mods["claw_eval.graders.registry"].get_grader(task.task_id, tasks_dir=root / "tasks", task_dir=folder)
    judge = _judge(request.get("judge"))
    params = inspect.signature(grader.grade).parameters
    kwargs = {"audit_data": request.get("audit") or {}, "judge": judge}
    if "media_events" in params:
        kwargs["media_events"] = []
    if "env_snapshot" in params:
        kwargs["env_snapshot"] = snapshot
    scores = grader.grade(messages, dispatches, task, **kwargs)
    task_score = scoring.compute_task_score(scores)
    calls = judge.get_call_log() if judge is not None and hasattr(judge, "get_call_log") else []
    return {"scores": scores.model_dump(mode="json"), "task_score": task_score,
            "passed": bool(scoring.is_pass(task_score)), "judge_calls": len(calls)}


def serve(root: Path) -> None:
    import os
    import traceback

    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # a grader's prints must not land among the answers
    sys.stdout = sys.stderr
    _modules(root)  # a missing module: exit 3 now, before the first request
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if request.get("op") != "grade":
                raise ValueError(f"unknown operation {request.get('op')!r}")
            out = grade(root, request["payload"])
        except Exception as exc:  # noqa: BLE001 - this request fails, the server goes on
            traceback.print_exc()
            out = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"}
        answers.write("@@ORCHARD@@" + json.dumps(out, ensure_ascii=False, default=str) + "\n")
        answers.flush()


def main() -> None:
    op, root = sys.argv[1], Path(sys.argv[2]).resolve()
    if op == "serve":
        serve(root)
        return
    if op == "load":
        out = load(root)
    elif op == "grade":
        out = grade(root, json.loads(sys.stdin.read()))
    else:
        raise SystemExit(f"unknown operation {op!r}")
    sys.stdout.write("\n@@ORCHARD@@" + json.dumps(out, ensure_ascii=False, default=str))


if __name__ == "__main__":
    main()
