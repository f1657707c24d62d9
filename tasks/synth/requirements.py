"""What a package needs to run its own tests, read from its tree (an sdist or a checkout).

`test_requirements(repo)` gathers, in order, each source once:

* the runtime requirements and those of its test extras (`test`, `tests`, `testing`, `test-*`;
  `dev` only when it has none of those): PKG-INFO's Requires-Dist, else `*.egg-info/requires.txt`,
  else pyproject.toml's `[project]`, setup.cfg's `[options]`;
* PEP 735 dependency groups of the same names in pyproject.toml;
* requirement files for tests: `requirements*test*.txt`, `test*-requirements.txt`,
  `requirements/test*.txt`, `tests/requirements*.txt` (`requirements*dev*.txt` when none);
  `-r` includes followed inside the tree;
* tox's `[testenv] deps` and nox sessions' `session.install(...)` literals;
* pytest itself when nothing above names it;
* the pytest plugins its pytest configuration names: `required_plugins`, and options that only a
  plugin knows (`--cov`: pytest-cov, `-n`: pytest-xdist, `--timeout`: pytest-timeout...).

A line that is not a plain requirement (a path, an editable, a URL, the package itself) is left
out: the package is installed from its own tree.
"""

from __future__ import annotations

import ast
import configparser
import email.parser
import re
from pathlib import Path
from typing import Iterable

TEST_EXTRAS = ("test", "tests", "testing")
DEV_EXTRAS = ("dev", "develop", "development")
PYTEST_CONFIGS = ("pytest.ini", "setup.cfg", "tox.ini", "pyproject.toml")
COV_OPTION = re.compile(r"(?m)^[^#\n]*(?:--cov\b|--no-cov|-p\s+pytest_cov)")
# An option or setting in a pytest configuration that only a plugin understands.
PLUGIN_OPTIONS = (
    (COV_OPTION, "pytest-cov"),
    (re.compile(r"(?m)^[^#\n]*(?:\s-n\s+(?:auto|\d+)|--numprocesses\b|--dist[= ])"), "pytest-xdist"),
    (re.compile(r"(?m)^[^#\n]*--timeout\b|^\s*timeout\s*="), "pytest-timeout"),
    (re.compile(r"(?m)^[^#\n]*--benchmark-"), "pytest-benchmark"),
    (re.compile(r"(?m)^\s*asyncio_mode\s*="), "pytest-asyncio"),
    (re.compile(r"(?m)^[^#\n]*--reruns\b"), "pytest-rerunfailures"),
    (re.compile(r"(?m)^[^#\n]*-p\s+(?:no:)?randomly\b|--randomly-"), "pytest-randomly"),
    (re.compile(r"(?m)^\s*mock_use_standalone_module\s*="), "pytest-mock"),
    (re.compile(r"(?m)^[^#\n]*--mypy\b"), "pytest-mypy"),
    (re.compile(r"(?m)^[^#\n]*--flake8\b"), "pytest-flake8"),
)
REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?\s*([<>=!~;].*)?$")


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0]).lower()


def _extra_kind(extra: str) -> str | None:
    name = re.sub(r"[-_.]+", "-", extra).lower()
    if name in TEST_EXTRAS or name.startswith(("test-", "tests-", "testing-")):
        return "test"
    return "dev" if name in DEV_EXTRAS else None


def _pick(extras: dict[str, list[str]]) -> list[str]:
    """The requirements of the test extras, else of the dev ones."""
    for kind in ("test", "dev"):
        found = [r for extra, reqs in extras.items() if _extra_kind(extra) == kind for r in reqs]
        if found:
            return found
    return []


def from_metadata(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """(runtime, extras) from a PKG-INFO's Requires-Dist lines."""
    message = email.parser.HeaderParser().parsestr(text)
    runtime: list[str] = []
    extras: dict[str, list[str]] = {}
    for value in message.get_all("Requires-Dist") or []:
        requirement, _, marker = value.partition(";")
        named = re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if not named:
            runtime.append(value.strip())
            continue
        rest = re.sub(r"(and\s+)?extra\s*==\s*['\"][^'\"]+['\"](\s+and)?", "", marker).strip()
        for extra in named:
            extras.setdefault(extra, []).append(requirement.strip() + (f"; {rest}" if rest else ""))
    return runtime, extras


def from_egg_info(repo: Path) -> tuple[list[str], dict[str, list[str]]]:
    runtime: list[str] = []
    extras: dict[str, list[str]] = {}
    for requires in sorted(repo.glob("*.egg-info/requires.txt")) + sorted(repo.glob("src/*.egg-info/requires.txt")):
        section = ""
        for line in requires.read_text(errors="replace").splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
            elif line and not section:
                runtime.append(line)
            elif line:
                extra, _, marker = section.partition(":")
                extras.setdefault(extra, []).append(line + (f"; {marker}" if marker else ""))
        break
    return runtime, extras


def from_pyproject(repo: Path) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    """(runtime, extras, dependency groups) of pyproject.toml's [project] and [dependency-groups]."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: PKG-INFO and setup.cfg still say it
        return [], {}, {}
    path = repo / "pyproject.toml"
    if not path.is_file():
        return [], {}, {}
    try:
        data = tomllib.loads(path.read_text(errors="replace"))
    except (tomllib.TOMLDecodeError, ValueError):
        return [], {}, {}
    project = data.get("project") or {}
    groups = {name: [r for r in reqs if isinstance(r, str)]
              for name, reqs in (data.get("dependency-groups") or {}).items() if isinstance(reqs, list)}
    extras = {name: [r for r in reqs if isinstance(r, str)]
              for name, reqs in (project.get("optional-dependencies") or {}).items() if isinstance(reqs, list)}
    return [r for r in project.get("dependencies") or [] if isinstance(r, str)], extras, groups


def from_setup_cfg(repo: Path) -> tuple[list[str], dict[str, list[str]]]:
    path = repo / "setup.cfg"
    if not path.is_file():
        return [], {}
    config = configparser.RawConfigParser()
    try:
        config.read_string(path.read_text(errors="replace"))
    except configparser.Error:
        return [], {}
    lines = lambda text: [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]  # noqa: E731
    runtime = lines(config.get("options", "install_requires", fallback=""))
    extras = {k: lines(v) for k, v in config.items("options.extras_require")} \
        if config.has_section("options.extras_require") else {}
    return runtime, extras


def from_setup_py(repo: Path) -> tuple[list[str], dict[str, list[str]]]:
    """install_requires and extras_require when setup.py gives them as literals."""
    path = repo / "setup.py"
    if not path.is_file():
        return [], {}
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except SyntaxError:
        return [], {}
    names: dict[str, ast.AST] = {}
    runtime: list[str] = []
    extras: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = node.value
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup"):
            continue
        for keyword in node.keywords:
            value = names.get(keyword.value.id, keyword.value) if isinstance(keyword.value, ast.Name) else keyword.value
            try:
                literal = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                continue
            if keyword.arg in ("install_requires", "tests_require") and isinstance(literal, (list, tuple)):
                target = runtime if keyword.arg == "install_requires" else extras.setdefault("tests_require", [])
                target += [str(r) for r in literal]
            elif keyword.arg == "extras_require" and isinstance(literal, dict):
                for extra, reqs in literal.items():
                    extras.setdefault(str(extra), []).extend([reqs] if isinstance(reqs, str) else map(str, reqs))
    if "tests_require" in extras:
        extras["test"] = extras.pop("tests_require") + extras.get("test", [])
    return runtime, extras


def requirement_file(path: Path, root: Path, seen: set[Path] | None = None) -> list[str]:
    """A requirements file's plain requirements, following `-r` inside `root`."""
    seen = seen if seen is not None else set()
    if path in seen or not path.is_file():
        return []
    seen.add(path)
    out: list[str] = []
    for raw in path.read_text(errors="replace").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ", "-r")) and not line.startswith("-r-"):
            target = (path.parent / line.split(None, 1)[-1].removeprefix("-r").strip()).resolve()
            if target.is_relative_to(root.resolve()):
                out += requirement_file(target, root, seen)
        elif line and not line.startswith("-") and REQUIREMENT.match(line):
            out.append(line)
    return out


def requirement_files(repo: Path) -> list[str]:
    def found(patterns: Iterable[str]) -> list[Path]:
        return sorted({p for pattern in patterns for p in repo.glob(pattern) if p.is_file()})

    tests = found(("requirements*test*.txt", "test*-requirements.txt", "test*_requirements.txt",
                   "requirements/test*.txt", "requirements/*test*.txt", "tests/requirements*.txt",
                   "test/requirements*.txt", "requirements/*-tests.txt"))
    files = tests or found(("requirements*dev*.txt", "dev-requirements.txt", "requirements/dev*.txt"))
    return [r for path in files for r in requirement_file(path, repo)]


def from_tox(repo: Path) -> list[str]:
    """The plain requirements of tox.ini's [testenv] deps."""
    path = repo / "tox.ini"
    if not path.is_file():
        return []
    config = configparser.RawConfigParser()
    try:
        config.read_string(path.read_text(errors="replace"))
    except configparser.Error:
        return []
    out: list[str] = []
    for line in config.get("testenv", "deps", fallback="").splitlines():
        line = re.sub(r"^\S+:\s*", "", line.strip()) if re.match(r"^[\w,{}-]+:\s", line.strip()) else line.strip()
        if line.startswith("-r"):
            out += requirement_file(repo / line[2:].strip().replace("{toxinidir}/", ""), repo)
        elif line and "{" not in line and REQUIREMENT.match(line):
            out.append(line)
    return out


def from_nox(repo: Path) -> list[str]:
    """String literals given to `session.install(...)` in noxfile.py (not '.', paths, options)."""
    path = repo / "noxfile.py"
    if not path.is_file():
        return []
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except SyntaxError:
        return []
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "install":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and REQUIREMENT.match(arg.value) \
                        and not arg.value.startswith("."):
                    out.append(arg.value)
    return out


def pytest_plugins(repo: Path) -> list[str]:
    """Plugins the pytest configuration names (required_plugins) or needs (its options)."""
    out: list[str] = []
    for name in PYTEST_CONFIGS:
        path = repo / name
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for pattern, plugin in PLUGIN_OPTIONS:
            if pattern.search(text):
                out.append(plugin)
        for match in re.finditer(r"(?m)^\s*required_plugins\s*=\s*(.+(?:\n[ \t]+.+)*)", text):
            out += [w.strip("\"',[]") for w in match.group(1).split() if w.strip("\"',[]")]
    return out


def uses_pytest_cov(repo: Path) -> bool:
    """Whether the package's pytest configuration passes pytest-cov's options (`addopts = --cov=...`):
    without the plugin pytest stops at its command line ('usage: ... unrecognized arguments')."""
    return "pytest-cov" in pytest_plugins(repo)


def test_requirements(repo: Path, project: str | None = None) -> list[str]:
    """What the package needs to run its tests (see the module docstring), each name once."""
    pkg_info = repo / "PKG-INFO"
    runtime, extras = from_metadata(pkg_info.read_text(errors="replace")) if pkg_info.is_file() else ([], {})
    if not runtime and not extras:
        runtime, extras = from_egg_info(repo)
    py_runtime, py_extras, groups = from_pyproject(repo)
    for reader in (lambda: (py_runtime, py_extras), lambda: from_setup_cfg(repo), lambda: from_setup_py(repo)):
        if runtime or extras:
            break
        runtime, extras = reader()
    wanted = [*runtime, *_pick(extras), *_pick(groups), *requirement_files(repo), *from_tox(repo),
              *from_nox(repo), "pytest", *pytest_plugins(repo)]
    own = {_name(project)} if project else set()
    out: dict[str, str] = {}
    for requirement in wanted:
        requirement = requirement.strip()
        name = _name(requirement)
        if name and name not in own and name not in out and REQUIREMENT.match(requirement.split(";")[0].strip()):
            out[name] = requirement
    return list(out.values())
