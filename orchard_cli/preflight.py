"""Model endpoints checked once before a run, so that a wrong URL, key or model name is one line
and exit 2 instead of every episode retrying its way to `infra_error`.

Each endpoint a run will use (the agent's `--base-url`, a judge, a simulated user, policy URLs) is
asked once, with its key:

    GET  {base}/models                      reachable, the key accepted; the model listed?
    POST {base}/chat/completions (1 token)  when /models is missing (404/405), or the model is
                                            not listed (a proxy that lists aliases still serves it)

A connection refused, a name that does not resolve, a timeout, a refused key, a 5xx, a model the
server says it does not serve: `PreflightError` (a `UsageError`: exit 2) naming the flag, the URL
and the cause. In-package endpoints (`smollm2`, `scripted`) run here and are not asked. Commands
take `--no-preflight` for the rare server that cannot answer either request.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from orchard_cli.errors import UsageError

PROBE_TIMEOUT_SECONDS = 15.0
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
NO_PREFLIGHT_HINT = "check the URL, the key and that the server is up; --no-preflight skips this check"


class PreflightError(UsageError):
    """A model endpoint the run needs does not answer as one should (exit 2)."""


@dataclass(frozen=True)
class Endpoint:
    """One model endpoint a run will use."""

    flag: str
    """The option that named it (`--base-url`, `--judge-base-url`, ...): what the user fixes."""
    url: str
    model: str | None = None
    key_env: str | None = None
    """The variable holding its key; None: OPENAI_API_KEY when set, else no key."""

    @property
    def remote(self) -> bool:
        return self.url.startswith(("http://", "https://"))


def _key(endpoint: Endpoint) -> str | None:
    from orchard_cli.models import read_key

    if endpoint.key_env:
        return read_key(endpoint.key_env)
    return os.environ.get(DEFAULT_KEY_ENV) or None


def _first_line(text: str, limit: int = 200) -> str:
    try:  # an OpenAI-style error body: {"error": {"message": ...}}
        data = json.loads(text)
        err = data.get("error") if isinstance(data, dict) else None
        message = err.get("message") if isinstance(err, dict) else (err if isinstance(err, str) else data.get("detail"))
        if isinstance(message, str) and message.strip():
            text = message
    except (ValueError, AttributeError):
        pass
    line = " ".join(text.split())
    return line[:limit] + ("…" if len(line) > limit else "")


def _transport_cause(exc: Exception) -> str:
    """A connection failure in a person's words: refused, unknown host, timeout, TLS."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {PROBE_TIMEOUT_SECONDS:g} s"
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", str(exc).strip()) or type(exc).__name__
    low = text.lower()
    if "connection refused" in low:
        return "connection refused (is the server running on that port?)"
    if "name or service not known" in low or "nodename nor servname" in low or "temporary failure in name" in low \
            or "name does not resolve" in low:
        return "the host name does not resolve"
    return text


def _models(data: object) -> list[str] | None:
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None
    return [str(r.get("id")) for r in rows if isinstance(r, dict) and r.get("id") is not None]


def _fail(endpoint: Endpoint, cause: str, hint: str = NO_PREFLIGHT_HINT) -> PreflightError:
    from orchard_cli.models.base import safe_url

    return PreflightError(f"model endpoint {endpoint.flag} {safe_url(endpoint.url)}: {cause}", hint=hint)


def _key_hint(endpoint: Endpoint) -> str:
    where = endpoint.key_env or DEFAULT_KEY_ENV
    return f"check the key in ${where}" + ("" if endpoint.key_env else " (or name another variable with the command's --*key-env option)")


def probe(endpoint: Endpoint, *, timeout: float = PROBE_TIMEOUT_SECONDS) -> str:
    """Ask `endpoint` once; what it said when it answers well ('models listed', '1-token call'),
    else `PreflightError`."""
    import httpx

    from orchard_cli.models import normalize_base_url

    base = normalize_base_url(endpoint.url)
    key = _key(endpoint)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(timeout=timeout, headers=headers, trust_env=False, follow_redirects=True) as client:
        try:
            listed = client.get(f"{base}/models")
        except httpx.HTTPError as exc:
            raise _fail(endpoint, _transport_cause(exc)) from None
        if listed.status_code in (401, 403):
            raise _fail(endpoint, f"the key was refused (HTTP {listed.status_code}: {_first_line(listed.text)})",
                        _key_hint(endpoint))
        if listed.status_code >= 500:
            raise _fail(endpoint, f"the server answered HTTP {listed.status_code}: {_first_line(listed.text)}")
        names = None
        if listed.status_code == 200:
            try:
                names = _models(listed.json())
            except ValueError:
                names = None
            if names is None:
                raise _fail(endpoint, f"{base}/models answered, but not with an OpenAI-style model list "
                                      f"({_first_line(listed.text, 80)!r})",
                            hint="an OpenAI-compatible base URL usually ends in /v1; --no-preflight skips this check")
            if endpoint.model is None or endpoint.model in names:
                return "models listed"
        elif listed.status_code not in (404, 405):
            raise _fail(endpoint, f"GET /models answered HTTP {listed.status_code}: {_first_line(listed.text)}")
        if endpoint.model is None:  # nothing to call with: a server without /models but reachable
            return "reachable"
        body = {"model": endpoint.model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
        try:  # the header lets orchard's scripted endpoint (a test fake) tell a ping from a turn
            called = client.post(f"{base}/chat/completions", json=body, headers={"X-Orchard-Preflight": "1"})
        except httpx.HTTPError as exc:
            raise _fail(endpoint, _transport_cause(exc)) from None
    if called.status_code == 200:
        return "1-token call"
    if called.status_code in (401, 403):
        raise _fail(endpoint, f"the key was refused (HTTP {called.status_code}: {_first_line(called.text)})",
                    _key_hint(endpoint))
    if names is not None:
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        raise _fail(endpoint, f"model {endpoint.model!r} is not served here (it lists: {shown or 'nothing'}; "
                              f"a 1-token call answered HTTP {called.status_code}: {_first_line(called.text)})",
                    hint="check --model (the name the server serves)")
    if called.status_code in (404, 405):
        raise _fail(endpoint, f"no OpenAI-compatible API here (HTTP {listed.status_code} on /models, "
                              f"{called.status_code} on /chat/completions)",
                    hint="an OpenAI-compatible base URL usually ends in /v1; --no-preflight skips this check")
    raise _fail(endpoint, f"a 1-token call answered HTTP {called.status_code}: {_first_line(called.text)}")


def check_endpoints(endpoints: Iterable[Endpoint], *, enabled: bool = True) -> list[str]:
    """Probe every remote endpoint once (in parallel, each URL once); the first failure is raised.
    Returns one 'FLAG URL: how' line per endpoint checked."""
    from orchard_cli.models.base import safe_url

    unique: dict[tuple[str, str | None, str | None], Endpoint] = {}
    for endpoint in endpoints:
        if endpoint.url and endpoint.remote:
            unique.setdefault((endpoint.url, endpoint.model, endpoint.key_env), endpoint)
    if not enabled or not unique:
        return []
    todo: Sequence[Endpoint] = list(unique.values())
    with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
        futures = [pool.submit(probe, e) for e in todo]
        said = []
        for endpoint, future in zip(todo, futures):
            said.append(f"{endpoint.flag} {safe_url(endpoint.url)}: {future.result()}")
    return said


__all__ = ["Endpoint", "PreflightError", "check_endpoints", "probe"]
