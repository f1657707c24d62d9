"""A patch that declares new dependencies gets them before its tests run, as SWE-bench grades.

SWE-bench's eval script installs the project again (`pip install -e .`) after applying the patch,
with the network on, so a fix that adds a requirement to setup.cfg (pylint-4661 adds appdirs)
is graded with it installed. orchard builds the environment once and grades offline; so, for a
patch that changes the project's dependency declarations only, the install runs once more in a
helper sandbox of the same environment with the package index reachable (as an environment build
reaches it), into a user site under /tmp (`pip install --user`: the environment stays as built),
and that user site is copied into the grading sandbox, which stays offline. A patch that touches
no dependency file costs nothing.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

USER_BASE = "/tmp/orchard-user"
ARCHIVE = "/tmp/orchard-user.tar"
DECLARATIONS = ("setup.py", "setup.cfg", "pyproject.toml")
INSTALL_TIMEOUT = 1800.0


def touched(patch: str, recipe: Any) -> list[str]:
    """The dependency files `patch` changes: the project's own declarations and the recipe's
    requirement files."""
    files = re.findall(r"^diff --git a/(\S+) b/", patch, re.MULTILINE)
    wanted = {*DECLARATIONS, *recipe.requirements_files, *recipe.conda_files}
    return [f for f in files if f in wanted]


def install_lines(recipe: Any) -> list[str]:
    """The recipe's install lines, into the user site, built against the environment."""
    from orchard_cli.tasks.swe.environment import editable

    return [f"{editable(line)} --user --no-build-isolation" for line in recipe.install
            if re.search(r"\bpip install\b", editable(line))]


def install(family: Any, task: Any, sandbox: Any, patch: str) -> str | None:
    """Install what the patched project declares into `sandbox`'s user site (USER_BASE), through a
    helper sandbox with the network; None when done (or nothing to do), else what went wrong."""
    from orchard_cli.env import SandboxHandle
    from orchard_cli.tasks.swe.environment import index_settings
    from orchard_cli.tasks.swe.instance import TESTBED

    recipe = family.recipe(task)
    lines = install_lines(recipe)
    if not lines:
        return None
    spec = sandbox.info.spec.model_copy(deep=True)
    spec.network, spec.forwards = "full", []
    spec.env.update({**index_settings(), "PYTHONUSERBASE": USER_BASE})
    spec.labels = {**spec.labels, "orchard.swe": "patch-dependencies"}
    with SandboxHandle.create(sandbox.env, spec) as helper:
        family.prepare(task, helper)
        applied = helper.apply_patch(patch, cwd=TESTBED)
        if not applied.applied:
            return None  # the grading sandbox says so (patch_apply_failed)
        script = " && ".join([f"cd {TESTBED}", *lines, f"tar -cf {ARCHIVE} -C /tmp {USER_BASE.rsplit('/', 1)[1]}"])
        job = helper.exec(f"bash -c {shlex.quote(script)} > /tmp/orchard-deps.log 2>&1", timeout=INSTALL_TIMEOUT)
        if not job.ok:
            log = helper.read_file("/tmp/orchard-deps.log").decode(errors="replace")
            last = next((l for l in reversed(log.splitlines()) if l.strip()), job.error or job.status)
            return f"installing what the patch declares failed: {last.strip()[:300]}"
        data = helper.read_file(ARCHIVE)
    sandbox.write_file(ARCHIVE, data)
    done = sandbox.exec(f"tar -xf {ARCHIVE} -C /tmp", timeout=300)
    return None if done.ok else f"unpacking what the patch declares failed: {done.stderr.strip()[:300]}"


def with_user_site(script: str) -> str:
    """The eval script with the user site the patch's dependencies went to."""
    head, _, rest = script.partition("\n")
    export = f"export PYTHONUSERBASE={USER_BASE}"
    return f"{head}\n{export}\n{rest}" if head.startswith("#!") else f"{export}\n{script}"
