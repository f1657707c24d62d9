"""Imports point one way: no cycle anywhere under orchard_cli (lazy imports inside functions
count; annotation-only imports under TYPE_CHECKING do not), and the core never imports commands,
tasks or harnesses."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"orchard_cli": "orchard_cli", "orchard_cli.commands": "commands", "orchard_cli.tasks": "tasks",
           "orchard_cli.harnesses": "harnesses"}
# The core (STYLE.md): these never import tasks, harnesses, commands or the rollout core.
LEAVES = ("orchard_cli.env", "orchard_cli.proxy", "orchard_cli.records", "orchard_cli.trajectory",
          "orchard_cli.outcome", "orchard_cli.evidence", "orchard_cli.scoring")
UPPER = ("orchard_cli.tasks", "orchard_cli.harnesses", "orchard_cli.commands", "orchard_cli.rollout")


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, (ast.Name, ast.Attribute)) and "TYPE_CHECKING" in ast.unparse(test)


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of orchard_cli that `name` imports anywhere in its body (the deepest module named)."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking(node):
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    out.add(target)
                elif base in known:
                    out.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    out.discard(name)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_the_finder_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_core_imports_nothing_above_it():
    wrong = {name: sorted(t for t in targets if t.startswith(UPPER))
             for name, targets in graph().items() if name.startswith(LEAVES)}
    assert {k: v for k, v in wrong.items() if v} == {}


SHARED_NAMES = {"records": "records", "episode": "episode", "episodes": "episode", "judge": "judge"}


def test_a_module_name_means_one_thing():
    """At most one module named records, episode(s) or judge in orchard (the `orchard judge`
    command's module aside: commands are named after the command line)."""
    seen: dict[str, list[str]] = {}
    for name in modules():
        if name.startswith("orchard_cli.commands."):
            continue
        key = SHARED_NAMES.get(name.rsplit(".", 1)[-1])
        if key:
            seen.setdefault(key, []).append(name)
    assert all(len(found) == 1 for found in seen.values()), {k: v for k, v in seen.items() if len(v) > 1}


def _family(module: str) -> str | None:
    """The family package a module of orchard_cli.tasks belongs to (claw, web, ...), or None for
    the shared modules (the kit, base, registry, ...)."""
    parts = module.split(".")
    if len(parts) < 4 or parts[:2] != ["orchard_cli", "tasks"]:
        return None
    folder = ROOT / "tasks" / parts[2]
    return parts[2] if folder.is_dir() and parts[2] != "kit" else None


KIT_PEERS = ("claw", "web", "miniwob", "live_web", "claw_eval")
"""Families on the version-2 seam over the kit (web read claw's guard, mail store, fixture and
checks before; miniwob and live-web read web's browser stack; Claw-Eval leases its services)."""


def test_the_leased_families_share_machinery_through_the_kit_only():
    """STYLE.md: what two families need goes to tasks/kit, never from one family into the other."""
    wrong = {}
    for name, targets in graph().items():
        own = _family(name)
        if own not in KIT_PEERS:
            continue
        other = sorted(t for t in targets if _family(t) not in (None, own))
        if other:
            wrong[name] = other
    assert wrong == {}
