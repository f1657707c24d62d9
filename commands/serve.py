"""`orchard serve`: an OpenAI-compatible server for a local checkpoint on the CPU.

Serves /v1/chat/completions (streamed or not; tool calls parsed from orchard's tool-call format),
/v1/responses (so the Codex CLI can drive the model), /v1/models and /health, with token ids and
logprobs when a request asks (`return_token_ids`, `logprobs`); a vision-language checkpoint also takes
`image_url` parts as data URLs (docs/vision.md). With `--enable-lora` / `--enable-weight-updates` it
takes weights an RL trainer pushes: `POST /v1/load_lora_adapter` (vLLM's API) and `POST
/update_weights_from_disk` (SGLang's), as `orchard rl --base-url ... --sync` calls them (docs/rl.md). Prints the base URL on stdout; stops
cleanly on Ctrl-C or SIGTERM. On GPU machines vLLM or SGLang serve the same checkpoint folder much
faster, and every orchard command takes their URL unchanged.

Exit codes: 0 stopped cleanly; 2 bad usage (no such model folder); 3 cannot load or cannot listen.
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from orchard_cli.commands._common import FormatOpt, OutputFormat, old_option, old_spelling

def say(line: str) -> None:
    """Talk goes to stderr, one unwrapped line each (data goes to stdout)."""
    typer.echo(line, err=True)


GPU_NOTE = ("on a GPU machine, prefer vLLM or SGLang (`vllm serve DIR`, `python -m sglang.launch_server "
            "--model-path DIR`): every orchard command accepts their URL unchanged")


def serve(
    model: Annotated[str, typer.Option(
        "--model", "-m", help="'smollm2' (the embedded SmolLM2-135M-Instruct) or a checkpoint folder "
                              "written by save_pretrained (e.g. from `orchard train`; a vision-language one "
                              "also takes image_url parts).")] = "smollm2",
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).", min=0, max=65535)] = 8000,
    threads: Annotated[int, typer.Option(help="Torch CPU threads (1 is fastest on a busy 2-core machine).",
                                         min=1, max=256)] = 1,
    api_key_env: Annotated[Optional[str], typer.Option(
        "--api-key-env", help="Require 'Authorization: Bearer $VAR' (the name of the variable, not the key).")]
    = None,
    temperature: Annotated[float, typer.Option(
        help="Temperature for requests that do not set one (0 = greedy).", min=0.0, max=2.0)] = 0.0,
    max_new_tokens: Annotated[Optional[int], typer.Option(
        "--max-new-tokens", help="Cap on a reply for requests that do not set max_tokens (default 512).",
        min=1)] = None,
    prefix_cache: Annotated[bool, typer.Option(
        "--prefix-cache/--no-prefix-cache", help="Keep finished conversations' KV caches (least recently used "
                                                 "dropped first) so a conversation's next turn only processes "
                                                 "its new tokens.")] = True,
    max_batch: Annotated[int, typer.Option(
        "--max-batch", min=1, max=256, help="Requests decoded together (continuous batching); 1 serves one "
                                            "request at a time, as before.")] = 8,
    max_queue: Annotated[int, typer.Option(
        "--max-queue", min=0, help="Requests waiting to join the batch; past it the server answers 429 "
                                   "with Retry-After.")] = 256,
    device: Annotated[str, typer.Option(
        "--device", help="Torch device for the weights: cpu, or cuda / cuda:N on a GPU machine (fp32; for "
                         "measuring orchard's batching there; vLLM or SGLang serve faster).")] = "cpu",
    enable_lora: Annotated[bool, typer.Option(
        "--enable-lora", help="Take LoRA adapters at runtime: POST /v1/load_lora_adapter and /v1/unload_lora_adapter "
                              "(vLLM's API; what orchard rl --sync lora calls).")] = False,
    max_loras: Annotated[int, typer.Option("--max-loras", min=1, help="Adapters held at once (each is a merged copy of the model).")] = 2,
    enable_weight_updates: Annotated[bool, typer.Option(
        "--enable-weight-updates", help="Reload weights from a checkpoint folder: POST /update_weights_from_disk "
                                        "(SGLang's API; what orchard rl --sync checkpoint calls).")] = False,
    fmt: FormatOpt = OutputFormat.text,
    max_tokens: old_option("--max-tokens", "--max-new-tokens", Optional[int], min=1) = None,
) -> None:
    """Serve a local model (CPU) behind an OpenAI-compatible API. On GPU machines prefer vLLM or SGLang.

    \b
    Example:
      orchard serve --model smollm2          # prints http://127.0.0.1:8000/v1
    """
    from orchard_cli.models.base import read_key
    from orchard_cli.models.local_model import resolve_checkpoint
    from orchard_cli.models.local_server import LocalEndpoint
    from orchard_cli.models.serving import run_foreground

    max_new_tokens = old_spelling("--max-tokens", "--max-new-tokens", max_tokens, max_new_tokens) or 512
    resolve_checkpoint(model)  # fail before the slow load on a bad folder or a missing package
    read_key(api_key_env)  # ... or when the named key variable is unset
    endpoint = LocalEndpoint(model, host=host, port=port, threads=threads, key_env=api_key_env,
                             default_temperature=temperature, default_max_tokens=max_new_tokens,
                             prefix_cache=prefix_cache, max_batch=max_batch, max_queue=max_queue, device=device,
                             enable_lora=enable_lora, max_loras=max_loras, enable_weight_updates=enable_weight_updates)
    where = "the CPU" if device == "cpu" else device
    say(f"# loading {model} on {where} ({threads} CPU thread{'s' if threads > 1 else ''})...")
    loaded = endpoint.load()
    if host not in ("127.0.0.1", "localhost", "::1") and not api_key_env:
        say(f"warning: listening on {host} with no --api-key-env: anyone who can reach it can use it"
            + (" (and load weights from any path this machine reads)" if enable_lora or enable_weight_updates else ""))

    def ready(url: str) -> None:
        if fmt == OutputFormat.json:
            typer.echo(json.dumps({"url": url, "base_url": f"{url}/v1", "model": loaded.name,
                                   "source": str(loaded.source), "context": loaded.context}))
        else:
            typer.echo(f"{url}/v1")
        images = ", images as data URLs" if loaded.vision is not None else ""
        say(f"# serving {loaded.name} at {url}/v1 (chat completions, responses, models{images}); Ctrl-C stops")
        say(f"# batching: {endpoint.batching}")
        say(f"# {GPU_NOTE}")

    run_foreground(endpoint.app, host=host, port=port, on_ready=ready)
