"""The parts of the official `swebench` package (pinned 4.1.0) that orchard grades with.

swebench's top-level `__init__` imports its whole world (docker, modal, ghapi, datasets...). We
need three pure modules: the per-repo/version specs (`MAP_REPO_VERSION_TO_SPECS`), the log
parsers, and the constants (test-output markers, test statuses). So the package is imported
*without* running `swebench/__init__.py` and `swebench/harness/__init__.py`: empty package
objects with the right `__path__` stand in for them, and the submodules load as usual. When the
full package is already imported, it is used as is.

What this needs installed: `swebench==4.1.0` (with `--no-deps`), plus `datasets`,
`python-dotenv`, `unidiff` and `requests` (imported at module level by `swebench.harness.utils`,
which the log parsers reach through `test_spec`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from functools import cache
from typing import Any, Callable

from orchard_cli.errors import MissingDependencyError, UsageError

SWEBENCH_VERSION = "4.1.0"
INSTALL_LINE = ("pip install 'orchard-cli[swe]' && pip install --no-deps swebench==4.1.0")


def _stub_packages() -> None:
    if "swebench" in sys.modules:
        return
    spec = importlib.util.find_spec("swebench")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("SWE grading needs the official 'swebench' package (4.1.0), "
                                     "which is not installed", hint=INSTALL_LINE)
    root = list(spec.submodule_search_locations)[0]
    for name, sub in (("swebench", ""), ("swebench.harness", "/harness")):
        module = types.ModuleType(name)
        module.__path__ = [root + sub]
        module.__package__ = name
        module.__file__ = None
        sys.modules[name] = module


@cache
def modules() -> types.SimpleNamespace:
    """`constants`, `python_parsers`, `parsers` (MAP_REPO_TO_PARSER) of swebench 4.1.0."""
    _stub_packages()
    try:
        constants = importlib.import_module("swebench.harness.constants")
        python_parsers = importlib.import_module("swebench.harness.log_parsers.python")
        parsers = importlib.import_module("swebench.harness.log_parsers")
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(
            f"the official swebench package needs {exc.name!r}, which is not installed",
            hint=INSTALL_LINE) from exc
    version = _installed_version()
    if version and version != SWEBENCH_VERSION:
        raise MissingDependencyError(
            f"orchard grades with swebench {SWEBENCH_VERSION}, but {version} is installed",
            hint=INSTALL_LINE)
    return types.SimpleNamespace(constants=constants, python_parsers=python_parsers,
                                 parsers=parsers)


def _installed_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("swebench")
    except PackageNotFoundError:
        return None


def repo_version_specs(repo: str, version: str) -> dict[str, Any]:
    """The official install/test spec of one repository version."""
    specs = modules().constants.MAP_REPO_VERSION_TO_SPECS
    if repo not in specs:
        raise UsageError(f"swebench {SWEBENCH_VERSION} has no spec for repository {repo!r}",
                         hint="give the instance its own 'environment' recipe")
    if version not in specs[repo]:
        raise UsageError(f"swebench {SWEBENCH_VERSION} has no spec for {repo} version {version!r}",
                         hint="give the instance its own 'environment' recipe")
    return dict(specs[repo][version])


def log_parser(name: str | None, repo: str) -> Callable[[str, Any], dict[str, str]]:
    """An official parser by name ('parse_log_django' or 'django'), else the repository's."""
    mods = modules()
    if name:
        full = name if name.startswith("parse_log_") else f"parse_log_{name}"
        parser = getattr(mods.python_parsers, full, None)
        if parser is None:
            for module_name in ("c", "go", "java", "javascript", "php", "ruby", "rust"):
                module = importlib.import_module(f"swebench.harness.log_parsers.{module_name}")
                parser = getattr(module, full, None)
                if parser:
                    break
        if parser is None:
            raise UsageError(f"unknown log parser {name!r} (swebench {SWEBENCH_VERSION})",
                             hint="use e.g. 'pytest', 'django', 'sympy' or 'parse_log_pytest_v2'")
        return parser
    if repo not in mods.parsers.MAP_REPO_TO_PARSER:
        raise UsageError(f"no official log parser for repository {repo!r}",
                         hint="name one in the instance's 'log_parser' or 'environment'")
    return mods.parsers.MAP_REPO_TO_PARSER[repo]


def markers() -> tuple[str, str]:
    c = modules().constants
    return c.START_TEST_OUTPUT, c.END_TEST_OUTPUT


def bad_codes() -> tuple[str, ...]:
    """Strings whose presence in a log means the run produced no valid result (as 4.1.0)."""
    c = modules().constants
    return (c.APPLY_PATCH_FAIL, c.RESET_FAILED, c.TESTS_ERROR, c.TESTS_TIMEOUT)


def statuses() -> Any:
    return modules().constants.TestStatus
