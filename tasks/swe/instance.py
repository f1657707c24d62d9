"""One SWE instance's environment recipe and eval script.

A recipe says how to build the environment an instance's tests run in. It comes either from the
instance itself (its optional `environment` field, see the package docstring) or from the official
swebench 4.1.0 spec of the instance's repo/version, translated here. Recipes hash to the cache key
of the built environment, so instances sharing a repo/version share one build.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchard_cli.errors import UsageError
from orchard_cli.tasks.swe import official

# Bump when the way a recipe turns into an environment changes: every cache key changes with it.
RECIPE_FORMAT = 5  # 3: the era date of environment.era_date; 4-5: era build tools (era.py)
TESTBED = "/testbed"
ENV_PREFIX = "/opt/miniconda3/envs/testbed"
ACTIVATE = "/opt/miniconda3/bin/activate"
HEREDOC = "EOF_114329324912"


class EnvironmentRecipe(BaseModel):
    """How to build an instance's environment (the `environment` field of an instance)."""

    model_config = ConfigDict(extra="forbid")

    python: str = Field(pattern=r"^\d+\.\d+$")
    """Interpreter version ('3.9'); a pyenv interpreter of that version is copied."""
    packages: list[str] = Field(default_factory=list)
    """Requirement strings installed with uv, bounded by the era date."""
    requirements_files: list[str] = Field(default_factory=list)
    """Requirements files in the repository, first one found is installed with uv."""
    conda_files: list[str] = Field(default_factory=list)
    """environment.yml files in the repository, first one found: its pip-installable entries."""
    pre_install: list[str] = Field(default_factory=list)
    """Shell lines run in /testbed before `install`, at build time and again for every instance
    (they may edit repository files; system-wide ones such as apt-get are skipped locally)."""
    install: list[str] = Field(default_factory=list)
    """Shell lines that install the repository itself (e.g. 'python -m pip install -e .'): run at
    build time, with the network; removed from the eval script."""
    eval_commands: list[str] = Field(default_factory=list)
    """Shell lines the eval script runs before the tests (exports and the like)."""
    test_cmd: str | None = None
    """The test command, used when the instance has no `eval_script`."""
    log_parser: str = "pytest"
    """An official swebench log parser: 'pytest', 'django', 'sympy', 'parse_log_pytest_v2'..."""
    exclude_newer: str | None = None
    """uv --exclude-newer date (YYYY-MM-DD or RFC 3339); default: the environment setup commit's
    date, never before the Python version came out (`environment.era_date`)."""

    def key(self, repo: str, version: str) -> str:
        """The cache key: repo, version and a hash of everything that shapes the build."""
        body = self.model_dump(exclude={"test_cmd", "log_parser", "eval_commands"})
        digest = hashlib.sha256(json.dumps([RECIPE_FORMAT, repo, version, body],
                                           sort_keys=True).encode()).hexdigest()[:12]
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{repo.replace('/', '__')}-{version or 'x'}")
        return f"{safe}-{digest}"


def recipe_for(record: dict[str, Any]) -> EnvironmentRecipe:
    """The instance's own recipe, else the official spec of its repo/version."""
    own = record.get("environment")
    if own:
        try:
            return EnvironmentRecipe.model_validate(own)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UsageError(f"{record['instance_id']}: bad 'environment' ({where}: {first['msg']})")
    return from_official(record["repo"], record.get("version", ""), record.get("log_parser"))


def from_official(repo: str, version: str, log_parser: str | None = None) -> EnvironmentRecipe:
    spec = official.repo_version_specs(repo, version)
    constants = official.modules().constants
    packages: list[str] = []
    req_files: list[str] = []
    conda_files: list[str] = []
    pkgs = spec.get("packages", "")
    if pkgs == "requirements.txt":
        req_files = list(constants.MAP_REPO_TO_REQS_PATHS.get(repo, ["requirements.txt"]))
    elif pkgs == "environment.yml":
        conda_files = list(constants.MAP_REPO_TO_ENV_YML_PATHS.get(repo, ["environment.yml"]))
    elif pkgs:
        packages = [conda_to_pip(p) for p in shlex.split(pkgs)]
    packages += list(spec.get("pip_packages", []))
    install = [spec["install"]] if spec.get("install") else []
    test_cmd = spec.get("test_cmd")
    if isinstance(test_cmd, list):
        test_cmd = " && ".join(test_cmd)
    return EnvironmentRecipe(
        python=spec["python"], packages=packages, requirements_files=req_files,
        conda_files=conda_files, pre_install=list(spec.get("pre_install", [])), install=install,
        eval_commands=list(spec.get("eval_commands", [])), test_cmd=test_cmd,
        log_parser=log_parser or official.log_parser(None, repo).__name__)


def conda_to_pip(requirement: str) -> str:
    """A conda match spec to a pip one: 'numpy=1.19' -> 'numpy==1.19.*', 'x==1' stays."""
    match = re.match(r"^([A-Za-z0-9_.\-\[\]]+)=([^=<>!].*)$", requirement)
    if match:
        name, version = match.groups()
        return f"{name}=={version}" if version.count(".") >= 2 else f"{name}=={version}.*"
    return requirement


def eval_script(record: dict[str, Any], recipe: EnvironmentRecipe, *, keep_install: bool = False) -> str:
    """The script the tests run by: the instance's `eval_script` when it has one (install lines
    removed unless `keep_install`: the environment build ran them), else one built the way
    SWE-bench builds them (activate, reset test files, apply test_patch, markers, test command)."""
    script = record.get("eval_script")
    if script:
        if keep_install:
            return script
        moved = {line.strip() for line in recipe.install}
        return "\n".join(line for line in script.splitlines() if line.strip() not in moved) + "\n"
    if not recipe.test_cmd:
        raise UsageError(f"{record['instance_id']}: no eval_script and no test command",
                         hint="give the instance an 'eval_script' or environment.test_cmd")
    start, end = official.markers()
    base = record["base_commit"]
    test_patch = record["test_patch"]
    official.modules()
    files = modified_files(test_patch)
    test_cmd = recipe.test_cmd
    if not record.get("environment"):  # the official spec: add the test directives
        test_cmd = " ".join([test_cmd, *test_directives(record)])
    reset = f"git checkout {base} {' '.join(shlex.quote(f) for f in files)}" if files else ":"
    lines = ["#!/bin/bash", "set -uxo pipefail", f"source {ACTIVATE}", "conda activate testbed",
             f"cd {TESTBED}", *recipe.eval_commands, f"cd {TESTBED}", "git status",
             f"git -c core.fileMode=false diff {base}", reset,
             f"git apply -v - <<'{HEREDOC}'\n{test_patch.rstrip(chr(10))}\n{HEREDOC}",
             f": '{start}'", test_cmd, f": '{end}'", reset]
    if keep_install:
        lines[lines.index("git status") + 2:lines.index("git status") + 2] = recipe.install
    return "\n".join(lines) + "\n"


def modified_files(patch: str) -> list[str]:
    """The files a patch changes that exist before it (official: SWE-bench resets them)."""
    from swebench.harness.utils import get_modified_files

    return get_modified_files(patch)


def test_directives(record: dict[str, Any]) -> list[str]:
    """The official test directives (the test files of the test_patch, django's dotted form)."""
    from swebench.harness.test_spec.python import get_test_directives

    return get_test_directives(record)
