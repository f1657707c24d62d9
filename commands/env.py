"""`orchard env ...`: bring up, inspect, clean up and smoke-test Orchard Env.

Results go to stdout, talk to stderr; `--format json` on each command. The service is found
through ORCHARD_ENV_URL, else through this ORCHARD_HOME's `env/service.json`.

Exit codes: 0 ok; 2 bad usage (unknown backend...); 3 infrastructure (no service running for
`status` / `ls`, a backend failure, a failed smoke test).
"""

from __future__ import annotations

import time
from typing import Annotated, Optional

import typer

from orchard_cli.commands._common import FormatOpt, OutputFormat, emit_json, stderr_console, stdout_console

app = typer.Typer(help="Orchard Env: sandboxes over local, docker and kubernetes backends.",
                  no_args_is_help=True)

BackendChoice = Annotated[Optional[str], typer.Option(
    "--backend", "-b", help="Sandbox backend: {backends} (default local).")]


def _check_backend(name: str) -> None:
    from orchard_cli.env.backends import backends

    backends.load(name)  # unknown names raise UnknownNameError listing the valid ones (exit 2)


def _probe_backend(name: str) -> None:
    """Make the backend and ask it what it holds: what it lacks (an SDK, an engine) fails now."""
    from orchard_cli.env.backends import load_backend

    backend = load_backend(name)
    try:
        backend.resources()
    finally:
        closer = getattr(backend, "close", None)
        if callable(closer):
            closer()


def _say(message: str) -> None:
    stderr_console().print(message, markup=False)


def _up_lines(state, already: bool) -> list[str]:
    what = "already running" if already else "up"
    return [f"# Orchard Env is {what} at {state.url} (backend {state.backend}, pid {state.pid})",
            f"# API key: {state.key}",
            *([f"# log: {state.log}"] if state.log else []),
            f"export ORCHARD_ENV_URL={state.url}"]


def _emit_up(state, already: bool, fmt: OutputFormat) -> None:
    if fmt == OutputFormat.json:
        emit_json({**state.model_dump(), "already_running": already})
    else:
        typer.echo("\n".join(_up_lines(state, already)))


@app.command()
def up(
    backend: BackendChoice = None,
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 exposes the service.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0 picks a free one).")] = 8765,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background; log to ORCHARD_HOME/env/service.log.")] = False,
    print_manifests: Annotated[bool, typer.Option("--print-manifests", help="kubernetes: print the service's manifests and exit.")] = False,
    namespace: Annotated[str, typer.Option(help="kubernetes namespace for --print-manifests.")] = "orchard",
    image: Annotated[Optional[str], typer.Option(help="Service image for --print-manifests.")] = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Start the Orchard Env service (foreground; --detach for the background).

    Stdout is shell code: `eval "$(orchard env up --detach)"` sets ORCHARD_ENV_URL. If a service
    already runs for this ORCHARD_HOME, `up` reports it and exits 0 (it is idempotent); asking
    for a different --backend than the running one is an error (exit 2): `orchard env down` first.

    \b
    Example:
      orchard env up --detach        # then: export ORCHARD_ENV_URL=http://127.0.0.1:8765
    """
    from orchard_cli.env import daemon
    from orchard_cli.errors import UsageError

    if print_manifests:
        if (backend or "kubernetes") != "kubernetes":
            raise UsageError("--print-manifests is for --backend kubernetes")
        from orchard_cli.env.k8s_manifests import render_manifests

        extra = {"image": image} if image else {}
        typer.echo(render_manifests(namespace=namespace, port=port, **extra))
        return
    if backend is not None:
        _check_backend(backend)
    running = daemon.running_state()
    if running is not None:
        if backend is not None and backend != running.backend:
            raise UsageError(f"an Orchard Env service with backend {running.backend!r} already runs "
                             f"at {running.url}", hint="stop it first with `orchard env down`")
        _say(f"Orchard Env already runs for this ORCHARD_HOME (pid {running.pid})")
        _emit_up(running, True, fmt)
        return
    backend = backend or daemon.DEFAULT_BACKEND
    _probe_backend(backend)  # a missing SDK or engine is one line here, not a dead service's log
    if detach:
        _say(f"starting Orchard Env (backend {backend}) in the background...")
        started = time.perf_counter()
        state = daemon.start_detached(backend, host, port)
        _say(f"ready in {time.perf_counter() - started:.1f}s")
        _emit_up(state, False, fmt)
        return

    def ready(state) -> None:
        _emit_up(state, False, fmt)
        _say(f"Orchard Env (backend {state.backend}) on {state.url}; Ctrl-C stops it and "
             "destroys its sandboxes")

    daemon.serve(backend, host, port, on_ready=ready)


@app.command()
def status(fmt: FormatOpt = OutputFormat.text) -> None:
    """Is a service up? Its URL, backend and sandbox count. Exit 3 when none is running.

    \b
    Example:
      orchard env status --format json
    """
    import os

    from orchard_cli.env import daemon
    from orchard_cli.env.auth import key_source

    state = daemon.running_state()
    url = os.environ.get("ORCHARD_ENV_URL") or (state.url if state else None)
    answer = daemon.health(url) if url else None
    result = {"running": answer is not None, "url": url, "key": key_source()}
    if answer is not None:
        result.update(backend=answer.get("backend"), version=answer.get("version"),
                      sandboxes=answer.get("sandboxes"))
        if state is not None and state.url == url:
            result.update(pid=state.pid, log=state.log)
    if fmt == OutputFormat.json:
        emit_json(result)
    elif answer is not None:
        pid = f", pid {result['pid']}" if result.get("pid") else ""
        typer.echo(f"Orchard Env is up at {url} (backend {result['backend']}{pid}): "
                   f"{result['sandboxes']} sandbox(es)")
    if answer is None:
        _say(f"no Orchard Env service answers at {url}" if url else
             "no Orchard Env service is running (start one with `orchard env up --detach`)")
        raise typer.Exit(3)


def _client():
    from orchard_cli.env import daemon
    from orchard_cli.env.client import EnvClient
    from orchard_cli.errors import InfraError

    url = daemon.service_url()
    if not url:
        raise InfraError("no Orchard Env service is running", hint="start one with `orchard env up --detach`")
    return EnvClient(url)


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


@app.command("ls")
def ls(fmt: FormatOpt = OutputFormat.text) -> None:
    """List the service's sandboxes.

    \b
    Example:
      orchard env ls --format json
    """
    client = _client()
    try:
        sandboxes = client.list_sandboxes()
    finally:
        client.close()
    if fmt == OutputFormat.json:
        emit_json([s.model_dump(mode="json") for s in sandboxes])
        return
    from rich.table import Table

    table = Table("id", "status", "image", "network", "isolation", "age", box=None)
    now = time.time()
    for s in sandboxes:
        table.add_row(s.sandbox_id, s.status, s.spec.image, s.spec.network or "", s.isolation,
                      _age(now - s.created_at))
    stdout_console().print(table)
    _say(f"{len(sandboxes)} sandbox(es)")


@app.command()
def down(
    timeout: Annotated[float, typer.Option(help="Seconds to wait after SIGTERM before SIGKILL.", min=0.0, max=3600)] = 30.0,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Stop the service (SIGTERM, then SIGKILL); its sandboxes are destroyed; then gc.

    Exits 0 when no service was running (down is idempotent).

    \b
    Example:
      orchard env down
    """
    from orchard_cli.env import daemon

    state, how = daemon.stop(timeout)
    backend = state.backend if state else daemon.DEFAULT_BACKEND
    reaped = _gc_in_process(backend)
    result = {"stopped": how in ("stopped", "killed"), "how": how, "pid": state.pid if state else None,
              "backend": backend, "reaped": reaped}
    if fmt == OutputFormat.json:
        emit_json(result)
        return
    if how == "none":
        _say("no Orchard Env service was running")
    elif how == "stale":
        _say(f"the service (pid {state.pid}) had already died; removed its record")
    else:
        _say(f"stopped Orchard Env (pid {state.pid}, backend {backend})"
             + (" with SIGKILL after SIGTERM timed out" if how == "killed" else ""))
    typer.echo(f"reaped {len(reaped)} sandbox(es)" + (": " + " ".join(reaped) if reaped else ""))


def _gc_in_process(backend: str) -> list[str]:
    from orchard_cli.env.manager import EnvManager

    manager = EnvManager(backend)
    try:
        return manager.gc()
    finally:
        manager.close()


@app.command()
def gc(backend: BackendChoice = None, fmt: FormatOpt = OutputFormat.text) -> None:
    """Reap sandboxes orchard created and no longer tracks (crashed owner, lost heartbeat, expired).

    Through the running service when there is one (for its backend); otherwise in-process for
    --backend (default: the backend of the last service, else local).

    \b
    Example:
      orchard env gc
    """
    from orchard_cli.env import daemon
    from orchard_cli.env.client import EnvClient

    last = daemon.read_state()
    running = daemon.running_state()
    url = daemon.service_url()
    if backend is not None:
        _check_backend(backend)
    via_service = url is not None and (backend is None or running is None or backend == running.backend)
    reaped: list[str] | None = None
    if via_service:
        from orchard_cli.errors import InfraError

        client = EnvClient(url)
        try:
            reaped, where = client.gc(), url
        except InfraError as exc:  # the service died: reap what it left, in-process
            _say(f"the service at {url} does not answer ({exc.message}); reaping in-process")
        finally:
            client.close()
    if reaped is None:
        name = backend or (last.backend if last else daemon.DEFAULT_BACKEND)
        reaped, where = _gc_in_process(name), f"in-process ({name})"
        if last is not None and name == last.backend:
            daemon.forget_stale()
    if fmt == OutputFormat.json:
        emit_json({"via": where, "reaped": reaped})
        return
    _say(f"gc via {where}")
    typer.echo(f"reaped {len(reaped)} sandbox(es)" + (": " + " ".join(reaped) if reaped else ""))


@app.command()
def smoke(backend: BackendChoice = None, fmt: FormatOpt = OutputFormat.text) -> None:
    """Create a sandbox, run a command, write and read a file, destroy it; print timings.

    Uses the service at ORCHARD_ENV_URL when set, otherwise an in-process manager over --backend.
    Exit 3 when a step fails.

    \b
    Example:
      orchard env smoke --backend local
    """
    import os

    from orchard_cli.env import connect
    from orchard_cli.env.smoke import run_smoke
    from orchard_cli.errors import InfraError

    url = os.environ.get("ORCHARD_ENV_URL")
    if backend is not None and not url:
        _check_backend(backend)
    env = connect(backend)
    try:
        report = run_smoke(env, via=url or "in-process")
    finally:
        env.close()
    if fmt == OutputFormat.json:
        emit_json(report.model_dump())
    else:
        head = "ok" if report.ok else "FAILED"
        typer.echo(f"orchard env smoke: {head} (backend {report.backend or backend or 'local'}, "
                   f"isolation {report.isolation or '?'}, limits {report.limits or '?'}, via {report.via})")
        for step in report.steps:
            typer.echo(f"  {step.name:<8} {step.seconds * 1000:8.1f} ms  {step.detail}")
        typer.echo(f"  {'total':<8} {report.total_seconds * 1000:8.1f} ms")
    if not report.ok:
        raise InfraError(f"smoke test failed at {report.error}", hint="see `orchard doctor`")
