"""`orchard proxy`: run the recording proxy in the foreground, one JSON line per call to --out.

Point any OpenAI-compatible client at the printed base URL. Calls to `/v1/...` are recorded in the
episode `default`; calls to `/e/<name>/v1/...` in the episode `<name>`. The upstream key comes
from the environment variable named by --upstream-key-env; it is never a flag value and never
written to disk. Stops cleanly on Ctrl-C or SIGTERM (exit 0).

Exit codes: 0 stopped cleanly; 2 bad usage (bad URL, unset key variable); 3 cannot listen.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from orchard_cli.commands._common import FormatOpt, OutputFormat, stderr_console


class UpstreamApi(str, Enum):
    chat = "chat"
    responses = "responses"
    both = "both"


def proxy(
    upstream: Annotated[str, typer.Option(
        "--upstream", help="Upstream OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1), "
                           "or the name of a model endpoint (scripted).")],
    key_env: Annotated[Optional[str], typer.Option(
        "--upstream-key-env", help="Name of the environment variable holding the upstream API key.")] = None,
    upstream_api: Annotated[UpstreamApi, typer.Option(
        "--upstream-api", help="APIs the upstream speaks; with 'chat', Responses calls are translated.")]
    = UpstreamApi.chat,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).", min=0, max=65535)] = 8787,
    out: Annotated[Optional[Path], typer.Option(help="Append one JSON line per call to this file.", dir_okay=False)] = None,
    model: Annotated[Optional[str], typer.Option(help="Send this model name upstream on every call.")] = None,
    max_calls: Annotated[Optional[int], typer.Option(help="Cap on calls per episode.", min=1)] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="Cap on total tokens per episode.", min=1)] = None,
    max_retries: Annotated[int, typer.Option(help="Retries on upstream 429/5xx.", min=0, max=10)] = 3,
    read_timeout: Annotated[float, typer.Option(help="Seconds of upstream silence before giving up.", min=0.1, max=86400)] = 600.0,
    max_request_mb: Annotated[float, typer.Option(
        help="Largest model-call request, in MiB: a larger one is refused with 413 before it is read.",
        min=0.01, max=4096)] = 32.0,
    max_record_mb: Annotated[Optional[float], typer.Option(
        help="Per episode, MiB of model calls kept in records; past it the episode is capped "
             "(default: none, since an episode here lasts as long as the proxy).",
        min=0.01, max=1 << 20)] = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Record every model call a harness makes, forwarding it to the upstream model.

    \b
    Example:
      orchard proxy --upstream https://host/v1 --out calls.jsonl   # then point a harness at the printed URL
    """
    from orchard_cli.proxy.runner import configure, serve_proxy

    dialects = ["chat", "responses"] if upstream_api == UpstreamApi.both else [upstream_api.value]
    config, key, owned = configure(upstream, key_env, dialects, {
        "host": host, "port": port, "out": out, "model": model, "max_calls": max_calls,
        "max_tokens": max_tokens, "max_retries": max_retries, "read_timeout_s": read_timeout,
        "max_request_bytes": int(max_request_mb * (1 << 20)), "max_record_bytes": int(max_record_mb * (1 << 20)) if max_record_mb else None,
        "auto_episodes": True, "keep_records": False})
    if host not in ("127.0.0.1", "localhost", "::1"):
        stderr_console().print(f"warning: listening on {host}: anyone who can reach it can spend "
                               "the upstream key", markup=False)

    def ready(url: str) -> None:
        if fmt == OutputFormat.json:
            typer.echo(json.dumps({"url": url, "base_url": f"{url}/v1", "episode_url": f"{url}/e/<name>/v1",
                                   "upstream": config.upstream_url, "out": str(out) if out else None}))
        else:
            typer.echo(f"{url}/v1")
        typer.echo(f"# recording proxy -> {config.upstream_url} ({', '.join(config.upstream_dialects)}); "
                   f"episodes at {url}/e/<name>/v1; calls to {out or 'memory only'}; Ctrl-C stops",
                   err=True)

    try:
        serve_proxy(config, key, ready)
    finally:
        if owned is not None:
            owned.stop()
