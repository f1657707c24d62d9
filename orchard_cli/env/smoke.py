"""`orchard env smoke`: one sandbox end to end (create, exec, write, read, destroy), timed.

It runs against any `Env` (the service through `EnvClient`, or an in-process `EnvManager`), so
it checks exactly the path that evaluation and distillation will use.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict

from orchard_cli.env import Env
from orchard_cli.env.models import ExecRequest, SandboxSpec
from orchard_cli.errors import OrchardError, SandboxError

SMOKE_TEXT = "hello from orchard env smoke\n"


class SmokeStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    seconds: float
    detail: str = ""


class SmokeReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    ok: bool
    via: str
    """'in-process' or the service URL."""
    backend: str = ""
    isolation: str = ""
    limits: str = ""
    sandbox_id: str = ""
    steps: list[SmokeStep] = []
    total_seconds: float = 0.0
    error: str | None = None
    """The step that failed and why (then `ok` is false)."""


class _Timer:
    def __init__(self, report: SmokeReport, name: str) -> None:
        self.report, self.name, self.detail = report, name, ""

    def __enter__(self) -> "_Timer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        seconds = time.perf_counter() - self.start
        if exc is not None and not self.detail:
            self.detail = f"failed: {exc}"
        self.report.steps.append(SmokeStep(name=self.name, seconds=round(seconds, 4), detail=self.detail))


def run_smoke(env: Env, via: str, spec: SandboxSpec | None = None) -> SmokeReport:
    """Create a sandbox, run a command, write and read a file, destroy it. Never leaves the
    sandbox behind; a failed step is reported in `error` (and `ok` is false)."""
    spec = spec or SandboxSpec(memory="512Mi", timeout=300, labels={"orchard": "smoke"})
    report = SmokeReport(ok=False, via=via)
    started = time.perf_counter()
    sandbox_id = None
    try:
        with _Timer(report, "create") as step:
            info = env.create_sandbox(spec, wait=True)
            sandbox_id = info.sandbox_id
            report.sandbox_id, report.backend = sandbox_id, info.backend
            report.isolation, report.limits = info.isolation, info.limits
            step.detail = sandbox_id
        with _Timer(report, "exec") as step:
            job = env.exec(sandbox_id, ExecRequest(command="echo $((6 * 7))", wait=True,
                                                   timeout_seconds=60))
            step.detail = f"echo $((6 * 7)) -> {job.stdout.strip()!r}, exit {job.exit_code}"
            if not (job.ok and job.stdout.strip() == "42"):
                raise SandboxError(f"expected '42' and exit 0, got {job.stdout.strip()!r} exit "
                                   f"{job.exit_code} ({job.status}{': ' + job.error if job.error else ''}"
                                   f"{'; ' + job.stderr.strip()[:200] if job.stderr.strip() else ''})")
        with _Timer(report, "write") as step:
            path = env.write_file(sandbox_id, "smoke/hello.txt", SMOKE_TEXT.encode())
            step.detail = f"{path} ({len(SMOKE_TEXT)} bytes)"
        with _Timer(report, "read") as step:
            back = env.read_file(sandbox_id, "smoke/hello.txt")
            seen = env.exec(sandbox_id, ExecRequest(command="cat smoke/hello.txt", wait=True,
                                                    timeout_seconds=60))
            if back != SMOKE_TEXT.encode() or seen.stdout != SMOKE_TEXT:
                raise SandboxError(f"read back {back[:80]!r}, a command saw {seen.stdout[:80]!r}")
            step.detail = "same bytes through the file API and through cat"
        with _Timer(report, "destroy"):
            env.delete_sandbox(sandbox_id)
            sandbox_id = None
        report.ok = True
    except OrchardError as exc:
        report.error = f"{report.steps[-1].name if report.steps else 'start'}: {exc.message}"
    finally:
        if sandbox_id is not None:
            try:
                env.delete_sandbox(sandbox_id)
            except OrchardError:
                pass
        report.total_seconds = round(time.perf_counter() - started, 4)
    return report
