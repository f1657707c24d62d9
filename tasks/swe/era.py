"""Holding an environment build to its instance's era, where uv's date alone does not.

`--exclude-newer DATE` bounds what uv resolves, build dependencies of the sdists it builds
included. Three things fall outside it, each handled here and recorded in env.json:

* Exact pins install with their dependencies as of the build (as the official images resolved
  them: tox 4.16 needs a newer cachetools), so an sdist among them would be built with today's
  setuptools (`from setuptools import Feature` fails since setuptools 46). `tool_limits` holds
  the build tools to the era date for that install (`--exclude-newer-package`), unless a pin
  names the tool itself.
* The project's own install (`pip install -e .`) builds it in an isolated environment of today's
  tools: a C extension compiled against today's numpy then fails to import at the era's numpy.
  `BUILD_REQUIRES` installs the project's build requirements (pyproject.toml's
  [build-system] requires, else setuptools and wheel) and what its backend's hooks ask for besides
  (`BUILD_HOOKS`: hatchling's editables) into the environment as of the era, and the install
  runs without isolation, as the official conda environments build.
* A pin of the era with no wheel for the environment's interpreter (numpy 1.16 on Python 3.9)
  would be compiled from source, and fail: `adjust` moves it to the nearest release that has one.
  A requirement the package index does not have at all (a conda package of an environment.yml)
  is left out. Both are named in the environment's record (`moved`, `left_out`), never silently;
  a test that then fails for want of a left-out package is `missing_dependency` (envcheck.py).

The index is asked through its PEP 691 JSON pages (PyPI's, or UV_DEFAULT_INDEX / UV_INDEX /
PIP_INDEX_URL...); when it cannot be asked, nothing is changed and the record says why.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from functools import lru_cache
from typing import Any

# Build backends and what builds link against: held to the era date for sdists the build makes.
BUILD_TOOLS = ("setuptools", "wheel", "setuptools-scm", "cython", "numpy", "extension-helpers", "cffi",
               "pybind11", "flit-core", "hatchling", "hatch-vcs", "poetry-core", "setuptools-rust",
               "scikit-build", "versioneer", "pbr")
PYPI = "https://pypi.org/simple"
JSON_PAGE = "application/vnd.pypi.simple.v1+json"
TIMEOUT = 30
PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^,;\s]+)\s*(;.*)?$")
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")

# The project's build requirements, as of the era, into the environment; the install line then
# runs without build isolation. Written for the interpreters of every era (pip's vendored TOML
# reader when there is one, else a plain reading of the [build-system] table). `wheel` always: an
# isolated build gets it from setuptools' backend hooks, which a build without isolation skips
# (pytest 7.2: "invalid command 'bdist_wheel'").
BUILD_REQUIRES = r"""python - > /tmp/orchard-build-requires.txt <<'EOF_ORCHARD'
import os, re
text = open("pyproject.toml").read() if os.path.exists("pyproject.toml") else ""
requires = None
for name in ("tomllib", "pip._vendor.tomli", "pip._vendor.toml", "pip._vendor.pytoml"):
    try:
        module = __import__(name, fromlist=["loads"])
        requires = module.loads(text).get("build-system", {}).get("requires")
        break
    except Exception:
        continue
if requires is None and text:
    section = re.search(r"(?ms)^\[build-system\](.*?)(^\[|\Z)", text)
    found = section and re.search(r"(?s)requires\s*=\s*\[(.*?)\]", section.group(1))
    requires = re.findall(r"[\"']([^\"']+)[\"']", found.group(1)) if found else None
requires = list(requires if requires is not None else ["setuptools>=40.8.0"])
# what setuptools' backend asks for besides (its get_requires_for_build_*), before setuptools 70.1
if not any(re.match(r"wheel\b", r.strip(), re.I) for r in requires):
    requires.append("wheel")
for line in requires:
    print(line)
EOF_ORCHARD"""


# What the project's build backend asks for besides, once its static requirements are in:
# `get_requires_for_build_editable` (else `_wheel`), as pip calls it in an isolated build
# (hatchling: editables; setuptools before 70.1: wheel). The hooks' own output goes to stderr.
BUILD_HOOKS = r"""python - > /tmp/orchard-build-hooks.txt <<'EOF_ORCHARD'
import contextlib, importlib, os, re, sys
text = open("pyproject.toml").read() if os.path.exists("pyproject.toml") else ""
table = {}
for name in ("tomllib", "pip._vendor.tomli", "pip._vendor.toml", "pip._vendor.pytoml"):
    try:
        table = __import__(name, fromlist=["loads"]).loads(text).get("build-system", {})
        break
    except Exception:
        continue
backend = table.get("build-backend") or "setuptools.build_meta:__legacy__"
sys.path[:0] = [os.path.abspath(p) for p in table.get("backend-path") or []]
wanted = []
try:
    with contextlib.redirect_stdout(sys.stderr):
        module, _, attribute = backend.partition(":")
        hooks = importlib.import_module(module)
        for part in filter(None, attribute.split(".")):
            hooks = getattr(hooks, part)
        for name in ("get_requires_for_build_editable", "get_requires_for_build_wheel"):
            if hasattr(hooks, name):
                wanted = list(getattr(hooks, name)({}) or [])
                break
except Exception as exc:
    print("orchard: the build backend's own requirements are unknown: %r" % (exc,), file=sys.stderr)
for line in wanted:
    print(line)
EOF_ORCHARD"""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def name_of(requirement: str) -> str | None:
    if "@" in requirement.split(";")[0] or requirement.strip().startswith((".", "/", "-")):
        return None  # a URL or a path: not the index's to say
    match = NAME.match(requirement)
    return canonical(match.group(1)) if match else None


def tool_limits(pinned: list[str], date: str) -> str:
    """uv options holding the build tools to `date`, but those a pin names."""
    named = {name_of(p) for p in pinned}
    return "".join(f" --exclude-newer-package {tool}={date}" for tool in BUILD_TOOLS if tool not in named)


# ---- the index ------------------------------------------------------------------------------

def index_urls(settings: dict[str, str]) -> list[str]:
    """The indexes a build uses, first asked first: UV_INDEX and the extra ones, then the default."""
    first: list[str] = []
    for key in ("UV_INDEX", "UV_EXTRA_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        for word in (settings.get(key) or "").split():
            first.append(word.split("=", 1)[1] if re.match(r"^[\w-]+=", word) else word)
    default = next((settings[k] for k in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL") if settings.get(k)), PYPI)
    return [u.rstrip("/") for u in [*first, default] if u.startswith(("http://", "https://"))]


@lru_cache(maxsize=512)
def _page(index: str, name: str) -> tuple[dict[str, Any], ...] | None:
    """The files of project `name` on `index` (None: the index has no such project)."""
    request = urllib.request.Request(f"{index}/{name}/", headers={"Accept": JSON_PAGE})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
            data = json.load(reply)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return tuple(f for f in data.get("files") or [] if not f.get("yanked"))


def files_of(name: str, indexes: list[str]) -> list[dict[str, Any]] | None:
    """Every file of `name` on the indexes; None when none of them has the project."""
    found: list[dict[str, Any]] | None = None
    for index in indexes:
        page = _page(index, name)
        if page is not None:
            found = (found or []) + list(page)
    return found


# ---- wheels for an interpreter ------------------------------------------------------------

def compatible_tags(python: str) -> set[str]:
    """The wheel tags CPython `python` ('3.9') accepts on this host."""
    from packaging import tags

    version = tuple(int(x) for x in python.split(".")[:2])
    platforms = list(tags.platform_tags())
    interpreter = f"cp{version[0]}{version[1]}"
    return {str(t) for t in [*tags.cpython_tags(python_version=version, platforms=platforms),
                             *tags.compatible_tags(python_version=version, interpreter=interpreter,
                                                   platforms=platforms)]}


def releases(files: list[dict[str, Any]], accepted: set[str]) -> dict[str, tuple[bool, bool]]:
    """version -> (has any wheel, has a wheel `accepted` takes)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    out: dict[str, tuple[bool, bool]] = {}
    for f in files:
        filename = f.get("filename") or ""
        if not filename.endswith(".whl"):
            continue
        try:
            _, version, _, wheel_tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        key = str(version)
        fits = any(str(t) in accepted for t in wheel_tags)
        seen = out.get(key, (False, False))
        out[key] = (True, seen[1] or fits)
    return out


def nearest(pin: str, versions: dict[str, tuple[bool, bool]]) -> str | None:
    """The release nearest to `pin` (a version or a `1.16.*` prefix) that has a fitting wheel:
    the lowest one above it, else the highest below."""
    from packaging.version import InvalidVersion, Version

    def parse(text: str) -> Version | None:
        try:
            return Version(text)
        except InvalidVersion:
            return None

    fitting = sorted((v, text) for text, (_, fits) in versions.items() if fits and (v := parse(text)) and not v.is_prerelease)
    prefix = pin.removesuffix(".*")
    low = parse(prefix)
    if low is None:
        return None
    above = [text for v, text in fitting if v > low and not str(v).startswith(prefix + ".")]
    below = [text for v, text in fitting if v < low]
    return above[0] if above else (below[-1] if below else None)


def _matches(version: str, pin: str) -> bool:
    return version == pin or (pin.endswith(".*") and version.startswith(pin[:-1]))


def adjust(deps: list[str], python: str, settings: dict[str, str]) -> tuple[list[str], dict[str, Any]]:
    """The requirements as the build installs them, and what changed: {"moved": {old: new},
    "left_out": [names], "index_error": str} (empty when nothing did)."""
    indexes = index_urls(settings)
    record: dict[str, Any] = {}
    out: list[str] = []
    try:
        accepted = compatible_tags(python)
    except Exception as exc:  # no `packaging` here: the pins stay as they are
        accepted, record["index_error"] = set(), f"cannot tell wheel tags apart: {exc}"
    for requirement in deps:
        name = name_of(requirement)
        if not name or not indexes or "index_error" in record:
            out.append(requirement)
            continue
        try:
            files = files_of(name, indexes)
        except (OSError, ValueError, urllib.error.URLError) as exc:
            record["index_error"] = f"{type(exc).__name__}: {exc}"[:300]
            out.append(requirement)
            continue
        if files is None:
            record.setdefault("left_out", []).append(requirement.strip())
            continue
        pin = PIN.match(requirement)
        if pin and accepted:
            versions = releases(files, accepted)
            mine = [text for text in versions if _matches(text, pin.group(3))]
            if mine and not any(versions[text][1] for text in mine):  # wheels, none for this Python
                moved = nearest(pin.group(3), versions)
                if moved:
                    new = f"{pin.group(1)}{pin.group(2) or ''}=={moved}{pin.group(4) or ''}"
                    record.setdefault("moved", {})[requirement.strip()] = new
                    out.append(new)
                    continue
        out.append(requirement)
    return out, record


# ---- what a commit declares ---------------------------------------------------------------

SETUP_KEYWORDS = ("install_requires", "extras_require", "setup_requires", "python_requires", "tests_require",
                  "entry_points")
# entry_points too: an install writes the console scripts (bin/pytest) from them, so two commits
# that name other entry points (pytest's `pytest:main`, later `pytest:console_main`) cannot share a
# build: the older commit's script would call a function its checkout lacks.


def declared(name: str, text: str | None) -> str:
    """What a dependency file declares about the install (dependencies and entry points), in a
    canonical form: the same for two commits whose setup.py differ only elsewhere (sympy's adds a
    module to `packages` at nearly every commit; its dependencies stay). The whole text when it
    cannot be read that way."""
    if text is None:
        return "\0none"
    base = name.rsplit("/", 1)[-1]
    try:
        if base == "setup.py":
            return _setup_py(text)
        if base == "setup.cfg":
            return _setup_cfg(text)
        if base == "pyproject.toml":
            return _pyproject(text)
    except Exception:  # noqa: BLE001 - unreadable as declarations: compare the text itself
        return text
    return text


def _setup_py(text: str) -> str:
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:  # Python 2 syntax (sympy's of 2016): the lines that name the keywords
        keywords = "|".join(SETUP_KEYWORDS)
        return "\n".join(sorted(" ".join(line.split()) for line in
                                re.findall(rf"(?m)^.*\b(?:{keywords})\b.*$", text)))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup":
            for keyword in node.keywords:
                if keyword.arg is None:  # setup(**options): anything may be in there
                    return text
                if keyword.arg in SETUP_KEYWORDS:
                    value = keyword.value
                    if isinstance(value, ast.Name):  # install_requires=REQUIRES: the assignment
                        value = next((n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                                      and any(getattr(t, "id", None) == value.id for t in n.targets)), value)
                    found.append(f"{keyword.arg}={ast.dump(value)}")
            return "\n".join(sorted(found))
    return text


def _setup_cfg(text: str) -> str:
    import configparser

    config = configparser.RawConfigParser()
    config.read_string(text)
    keep = [f"{k}={' '.join(config.get('options', k).split())}" for k in SETUP_KEYWORDS
            if config.has_option("options", k)]
    for section in ("options.extras_require", "options.entry_points", "build_system"):
        if config.has_section(section):
            keep += [f"{section}.{k}={' '.join(v.split())}" for k, v in sorted(config.items(section))]
    return "\n".join(keep)


def _pyproject(text: str) -> str:
    import tomllib

    data = tomllib.loads(text)
    project = data.get("project") or {}
    poetry = (data.get("tool") or {}).get("poetry") or {}
    keep = {"build-system": data.get("build-system"), "dependencies": project.get("dependencies"),
            "optional-dependencies": project.get("optional-dependencies"),
            "requires-python": project.get("requires-python"), "dynamic": project.get("dynamic"),
            "dependency-groups": data.get("dependency-groups"),
            "poetry": poetry.get("dependencies")}
    scripts = {"scripts": project.get("scripts"), "gui-scripts": project.get("gui-scripts"),
               "entry-points": project.get("entry-points"), "poetry-scripts": poetry.get("scripts")}
    keep.update({k: v for k, v in scripts.items() if v is not None})  # absent: the keys of before
    return json.dumps(keep, sort_keys=True)
