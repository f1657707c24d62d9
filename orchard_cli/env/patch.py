"""apply_patch on any sandbox, with SWE-bench's fallbacks: git apply, --3way, then patch --fuzz.

One deliberate difference from the official harness: `patch` gets `--forward`. With `--batch`
alone, patch silently *reverses* a patch that looks already applied ("Assuming -R") and reports
success, which would grade the undoing of a change as the model's fix.
"""

from __future__ import annotations

import shlex
import uuid

from orchard_cli.env.base import Sandbox
from orchard_cli.env.models import ExecRequest, PatchResult

STRATEGIES = (
    ("git apply", "git apply --verbose {file}"),
    ("git apply --3way", "git apply --verbose --3way {file}"),
    ("patch --fuzz", "patch --batch --forward --fuzz=5 -p1 -i {file}"),
)


def apply_patch(sandbox: Sandbox, patch: str, cwd: str, timeout: float | None = None) -> PatchResult:
    """Apply a unified diff in `cwd`; the first strategy that succeeds wins."""
    if not patch.strip():
        return PatchResult(applied=False, output="empty patch")
    if not patch.endswith("\n"):
        patch += "\n"
    timeout = timeout or 120.0
    path = f"/tmp/orchard-patch-{uuid.uuid4().hex[:8]}.diff"
    sandbox.write_file(path, patch.encode())
    outputs = []
    for name, template in STRATEGIES:
        result = sandbox.exec(ExecRequest(command=template.format(file=shlex.quote(path)),
                                          cwd=cwd, timeout_seconds=timeout, wait=True))
        outputs.append(f"$ {name}\n{result.stdout}{result.stderr}")
        if result.exit_code == 0:
            return PatchResult(applied=True, method=name, output="\n".join(outputs))
    return PatchResult(applied=False, output="\n".join(outputs))
