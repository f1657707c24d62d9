"""The Orchard Env API: one set of pydantic models for Python callers, the HTTP body and disk.

Field names and status words follow the published Orchard Env API (Microsoft's `orchard_env`
SDK), so its clients work against ours unchanged: a sandbox is `pending`, `ready` or `failed`
(and `stopped` once deleted), with `ready`, `status_message`, `image`, `block_network`, `cpu`,
`memory` and `timeout` at the top level; exec takes `command`, `timeout_seconds`, `cwd`, `env`
(null meaning the default), `login_shell` and `wait`; a job is `queued`, `running`, `succeeded`
or `failed` (a command past its timeout is `failed` with exit code 124). Orchard's additions are
optional fields: `network` (none | drop | proxy | full) with `proxy_url`, `forwards`, `pids`,
`workdir`, `labels`, `heartbeat_timeout`, `mounts`; a job's `timed_out`, `oom_killed` and
`leftover_processes`.

Schema 2 of SandboxInfo and Job brought the published status words; records of schema 1
(`creating`/`error`, `completed`/`timeout`/`error`/`cancelled`) still read.
"""

from __future__ import annotations

import re
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator, model_validator

SCHEMA_VERSION = 2

NetworkMode = Literal["none", "drop", "proxy", "full"]
SandboxStatus = Literal["pending", "ready", "failed", "stopped"]
JobStatus = Literal["queued", "running", "succeeded", "failed"]
FINISHED_JOB_STATES = frozenset({"succeeded", "failed"})
TIMEOUT_EXIT_CODE = 124
"""The exit code of a command killed at its timeout, as the published API and `timeout(1)` give it."""
_OLD_SANDBOX_STATUS = {"creating": "pending", "error": "failed"}
NAMESPACE = "orchard"
SANDBOX_PROXY_PORT = 3128
"""Where a docker sandbox with network='proxy' reaches its proxy (its own loopback): no forward
may take this port in such a sandbox."""
_HOST_PORT_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")

# Default ceiling on captured stdout / stderr per job; beyond it output is cut with a marker.
DEFAULT_OUTPUT_LIMIT = 1 << 20
# The file API reads and writes whole files in memory: larger ones are refused (HTTP 413).
MAX_FILE_BYTES = 64 << 20
MAX_FILE_MODE = 0o777
CLIENT_LABEL = "orchard.client"
"""The label naming the process that asked a service for a sandbox ('host:pid:starttime'):
`gc` reaps the sandboxes of clients that are gone."""
DEFAULT_EXEC_TIMEOUT = 600.0
MAX_EXEC_TIMEOUT = 7 * 24 * 3600.0
TRUNCATION_MARKER = "\n[orchard: output truncated, {dropped} bytes dropped]\n"

CPU_MAX = 4096.0
"""Cores a sandbox may ask for: more than any machine has (docker clamps to the host's)."""
PIDS_MAX = 4_194_304
"""Processes a sandbox may ask for: the kernel's PID_MAX_LIMIT, above which pid_max never is
(the local backend also holds it to this host's /proc/sys/kernel/pid_max)."""
MEMORY_MAX = 1 << 60
"""Bytes a sandbox may ask for (1 EiB)."""

_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
          "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}


def parse_memory(value: str | int) -> int:
    """'512Mi', '2G', '1gb', 1073741824 -> bytes. Raises ValueError on anything else."""
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("memory must be positive")
        if value > MEMORY_MAX:
            raise ValueError(f"memory {value} is above the {MEMORY_MAX} bytes (1Ei) a sandbox may ask for")
        return value
    match = _MEMORY_RE.match(value)
    if not match:
        raise ValueError(f"memory {value!r} is not a size such as '512Mi' or '2G'")
    unit = (match.group(2) or "").lower().removesuffix("b")
    number = float(match.group(1)) * _UNITS[unit]
    if number < 4 * 1024**2:
        raise ValueError(f"memory {value!r} is below the 4Mi minimum")
    if number > MEMORY_MAX:
        raise ValueError(f"memory {value!r} is above the {MEMORY_MAX} bytes (1Ei) a sandbox may ask for")
    return int(number)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Mount(_Model):
    """A host path made visible inside the sandbox (local and docker backends)."""

    source: str
    """Absolute path on the host (the machine running the backend)."""
    target: str
    """Absolute path inside the sandbox."""
    read_only: bool = True


def host_port(value: str) -> tuple[str, int]:
    """'127.0.0.1:40123', 'mail.internal:1143', '[::1]:8080' -> (host, port). Raises ValueError."""
    match = _HOST_PORT_RE.match(value)
    if not match or not 1 <= int(match.group(2)) <= 65535:
        raise ValueError(f"target {value!r} is not 'host:port' (a port in 1..65535)")
    return match.group(1).strip("[]"), int(match.group(2))


class PortForward(_Model):
    """One TCP port on the sandbox's own loopback that reaches one address on the host."""

    port: int = Field(ge=1, le=65535)
    """The port inside the sandbox: a connection to 127.0.0.1:<port> there is relayed to
    `target`. Ports below 1024 need a sandbox user allowed to bind them (root in a docker image),
    so pick one above (1143 for IMAP, 1025 for SMTP, 5232 for CalDAV)."""
    target: str
    """'host:port' as seen from the machine running the backend (the orchard host), for example
    '127.0.0.1:40123'; IPv6 in brackets, '[::1]:40123'."""

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        host_port(value)
        return value

    @property
    def address(self) -> tuple[str, int]:
        """`target` as (host, port)."""
        return host_port(self.target)


class SideService(_Model):
    """A container started beside the sandbox, before it, on a network private to the sandbox
    (a docker-compose task's other services): the sandbox reaches it by `name`, and it goes when
    the sandbox goes. The docker backend runs them; the others list 'services' in `unsupported`."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")
    """Its host name on the private network (the compose service's name); not 'main'."""
    image: str
    """An image the engine has (nothing is pulled for a side service)."""
    command: list[str] | None = None
    """Replaces the image's CMD."""
    entrypoint: list[str] | None = None
    """Replaces the image's ENTRYPOINT."""
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None
    healthcheck: list[str] | None = None
    """A command in the engine's form (['CMD', ...] or ['CMD-SHELL', '...']): the sandbox is made
    only once it passes (checked every second); without one, once the container runs."""
    depends_on: dict[str, Literal["service_started", "service_healthy", "service_completed_successfully"]] = \
        Field(default_factory=dict)
    """Services listed before this one -> what it waits for before it starts (compose's conditions:
    running; healthy; exited 0)."""
    completes: bool = False
    """A one-shot job: the sandbox waits for it to exit 0 (it is not expected to stay running)."""


class SandboxSpec(_Model):
    """Body of `POST /sandboxes`: what sandbox to create."""

    image: str = "host"
    """local: 'host' (the host's tools, read-only) or a directory holding a root filesystem;
    docker / kubernetes: an image name."""
    block_network: bool = True
    """Orchard's switch: true means no network. Ignored when `network` is given."""
    network: NetworkMode | None = None
    """'none' (only loopback: a connect elsewhere fails at once), 'drop' (nothing reachable either,
    but a connect elsewhere waits for its timeout, as on a machine whose packets go unanswered:
    what test suites written for a networked machine expect; see env/netdrop.py), 'proxy' (only
    `proxy_url`, nothing else), 'full'. The first three also reach their `forwards`."""
    proxy_url: str | None = None
    """With network='proxy': the one http://host:port the sandbox may reach. Inside the sandbox
    it is reachable at the address in the sandbox's ORCHARD_PROXY_URL environment variable."""
    forwards: list[PortForward] = Field(default_factory=list)
    """TCP ports on the sandbox's own loopback, each relayed to one host:port on the orchard host
    (per-episode IMAP / SMTP / CalDAV servers on random host ports, reached inside at fixed
    ports), and nothing else becomes reachable. Only with an isolated network ('none', 'drop',
    'proxy'): with 'full' the host's ports are reachable anyway, and forwards are refused. Ports
    are unique, and with 'proxy' not SANDBOX_PROXY_PORT (3128). Backends that cannot forward list
    'forwards' in `unsupported`."""
    cpu: float = Field(1.0, gt=0, le=CPU_MAX, allow_inf_nan=False)
    """CPU cores the sandbox may use (at most CPU_MAX; docker clamps to the host's cores)."""
    memory: str = "2Gi"
    """Memory limit for everything in the sandbox ('512Mi', '2G', ...)."""
    pids: int = Field(512, ge=8, le=PIDS_MAX)
    """Most processes alive at once in the sandbox (at most the kernel's pid_max)."""
    timeout: int = Field(3600, gt=0)
    """Seconds the sandbox may live; after that it is destroyed and reaped by `env gc`."""
    heartbeat_timeout: int | None = Field(None, gt=0)
    """If set, the sandbox is destroyed when no heartbeat arrives for this many seconds."""
    workdir: str = "/workspace"
    """The writable working directory inside the sandbox (absolute)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for every command."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Free-form labels, kept on the sandbox and its backend resources."""
    mounts: list[Mount] = Field(default_factory=list)
    """Host paths bound into the sandbox (harness binaries, prepared environments); read-only
    unless said otherwise. Backends that cannot mount list 'mounts' in `unsupported`."""
    services: list[SideService] = Field(default_factory=list)
    """Containers started before the sandbox on a network of its own (a docker-compose task's
    other services), reached from it by name, removed with it. Their network reaches the internet
    only with network='full'. docker only; others list 'services' in `unsupported`."""
    writable_root: bool = False
    """The image's own files may be changed (`apt-get install`, `pip install` into the system),
    the changes dying with the sandbox, as in the published API's containers; false keeps
    everything but the workdir and /tmp read-only. docker and kubernetes; the local backend runs
    images read-only and lists 'writable_root' in `unsupported`."""

    @model_validator(mode="before")
    @classmethod
    def _published_values(cls, data: object) -> object:
        """The published API's spellings: cpu as a quantity string ('2', '2000m'), and null for
        'the default' on any optional field."""
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if v is not None or k in ("network", "proxy_url",
                                                                             "heartbeat_timeout")}
            if "cpu" in data:
                data["cpu"] = cpu_cores(data["cpu"])
        return data

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        parse_memory(value)
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/") or value == "/":
            raise ValueError("workdir must be an absolute path below / without '..'")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _network(self) -> "SandboxSpec":
        if self.network is None:
            self.network = "none" if self.block_network else "full"
        self.block_network = self.network != "full"
        if self.network == "proxy" and not self.proxy_url:
            raise ValueError("network='proxy' needs proxy_url")
        if self.proxy_url and not re.match(r"^https?://[^/\s]+(/.*)?$", self.proxy_url):
            raise ValueError(f"proxy_url {self.proxy_url!r} is not an http(s) URL")
        if self.forwards:
            self._check_forwards()
        names = [s.name for s in self.services]
        if "main" in names or len(set(names)) != len(names):
            raise ValueError("services need distinct names, none of them 'main' (the sandbox's own)")
        for i, service in enumerate(self.services):
            early = set(names[:i])
            if not set(service.depends_on) <= early:
                raise ValueError(f"service {service.name!r} depends on "
                                 f"{', '.join(sorted(set(service.depends_on) - early))}, not listed before it")
        if self.services and self.network == "drop":
            raise ValueError("services need network 'none', 'proxy' or 'full' (with 'drop' the "
                             "sandbox could not reach them)")
        return self

    def _check_forwards(self) -> None:
        if self.network == "full":
            raise ValueError("forwards need an isolated network ('none', 'drop' or 'proxy'); "
                             "with network='full' the sandbox reaches the host's ports directly")
        ports = [f.port for f in self.forwards]
        twice = sorted({p for p in ports if ports.count(p) > 1})
        if twice:
            raise ValueError(f"forwards name port {twice[0]} more than once")
        if self.network == "proxy" and SANDBOX_PROXY_PORT in ports:
            raise ValueError(f"port {SANDBOX_PROXY_PORT} is where a sandbox with network='proxy' "
                             "reaches its proxy: forward another port")

    @property
    def memory_bytes(self) -> int:
        return parse_memory(self.memory)


def cpu_cores(value: object) -> object:
    """'2', '2000m', 2 -> cores (the published API sends cpu as a Kubernetes quantity string)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
        except ValueError:
            return value  # pydantic says what is wrong with it
    return value


class CreateSandbox(SandboxSpec):
    """Body of `POST /sandboxes`: a spec, and optionally the id the client chose (the published
    SDK sends one when it has a prefix)."""

    sandbox_id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    writable_root: bool = True
    """Absent from a published-API request: writable, as the published API's containers are."""

    def spec(self) -> "SandboxSpec":
        return SandboxSpec.model_validate(self.model_dump(exclude={"sandbox_id"}))


class SandboxInfo(_Model):
    """What the service says about one sandbox (`GET /sandboxes/{id}`). The published API's
    fields (`ready`, `status_message`, `image`, `block_network`, `cpu`, `memory`, `timeout`,
    `namespace`) are derived from the rest and written beside them."""

    schema_version: int = SCHEMA_VERSION
    sandbox_id: str
    backend: str
    status: SandboxStatus
    spec: SandboxSpec
    isolation: str = "unknown"
    """How the sandbox is isolated: 'bwrap', 'none' (loudly: no isolation), 'docker', 'kubernetes'."""
    limits: str = "unknown"
    """How cpu / memory / pids limits are enforced: 'cgroup-v1', 'cgroup-v2', 'docker', 'none', ..."""
    created_at: float = Field(default_factory=time.time)
    expires_at: float = 0.0
    last_heartbeat: float = Field(default_factory=time.time)
    error: str | None = None
    details: dict[str, str] = Field(default_factory=dict)
    """Backend-specific facts (container id, pod name, workspace path on the host)."""
    heartbeats: int = 0
    """Heartbeats received so far (a sandbox that never sent one is not reaped for silence)."""

    @model_validator(mode="before")
    @classmethod
    def _published(cls, data: object) -> object:
        """Read what we write: drop the derived published fields; old status words updated."""
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in PUBLISHED_SANDBOX_FIELDS}
            if data.get("status") in _OLD_SANDBOX_STATUS:
                data["status"] = _OLD_SANDBOX_STATUS[data["status"]]
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ready(self) -> bool:
        return self.status == "ready"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status_message(self) -> str:
        return self.error or ""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def image(self) -> str:
        return self.spec.image

    @computed_field  # type: ignore[prop-decorator]
    @property
    def block_network(self) -> bool:
        return self.spec.block_network

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cpu(self) -> str:
        return f"{self.spec.cpu:g}"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def memory(self) -> str:
        return self.spec.memory

    @computed_field  # type: ignore[prop-decorator]
    @property
    def timeout(self) -> int:
        return self.spec.timeout

    @computed_field  # type: ignore[prop-decorator]
    @property
    def namespace(self) -> str:
        return NAMESPACE


PUBLISHED_SANDBOX_FIELDS = frozenset({"ready", "status_message", "image", "block_network", "cpu", "memory",
                                      "timeout", "namespace", "pod_name"})


class ExecRequest(_Model):
    """Body of `POST /sandboxes/{id}/exec`."""

    command: str | list[str]
    """A shell command line (run by `bash -c`, or `sh -c` where bash is missing) or an argv list."""
    timeout_seconds: float = Field(DEFAULT_EXEC_TIMEOUT, gt=0, le=MAX_EXEC_TIMEOUT, allow_inf_nan=False)
    """Wall-clock limit (at most 7 days; null means the default, 600); the command and all its
    children are killed when it runs out."""
    cwd: str | None = None
    """Working directory inside the sandbox; default: the sandbox's workdir."""
    env: dict[str, str] = Field(default_factory=dict)
    wait: bool = False
    """Orchard's job model: false returns {job_id, status} at once; true blocks for the result."""
    stdin: str | None = None
    login_shell: bool = False
    """Run a command line in a login shell that reads ~/.bashrc (the published API's option)."""
    keep_background: bool = False
    """Orchard's addition: let what the command starts in the background run on after it ends
    (counted in `leftover_processes`, not killed; it dies with the sandbox). By default it is
    killed when the command ends."""
    output_limit: int = Field(DEFAULT_OUTPUT_LIMIT, gt=0)
    """Bytes kept of stdout and of stderr each; the rest is dropped with an explicit marker."""

    @field_validator("timeout_seconds", mode="before")
    @classmethod
    def _default_timeout(cls, value: object) -> object:
        return DEFAULT_EXEC_TIMEOUT if value is None else value

    @field_validator("env", mode="before")
    @classmethod
    def _default_env(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | list[str]) -> str | list[str]:
        if (isinstance(value, str) and not value.strip()) or (isinstance(value, list) and not value):
            raise ValueError("command is empty")
        return value


class PtyRequest(_Model):
    """The first frame of a terminal session (the published API's `init`): what to run on a
    pseudo-terminal, in a session of its own."""

    cmd: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    rows: int = Field(24, ge=1, le=1000)
    cols: int = Field(80, ge=1, le=1000)
    login_shell: bool = False

    @field_validator("env", mode="before")
    @classmethod
    def _default_env(cls, value: object) -> object:
        return {} if value is None else value


class ExecResult(_Model):
    """What a backend returns for one finished command."""

    exit_code: int | None
    """None when the command was killed for its timeout or never started."""
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    duration_seconds: float = 0.0
    error: str | None = None
    """Set when the command could not be run at all (an infrastructure failure, not exit != 0)."""
    oom_killed: bool = False
    """The command was killed by the sandbox's memory limit (it ran out of memory)."""
    leftover_processes: int | None = None
    """Processes the command left running when it ended (they were killed); None where the
    backend cannot tell (the docker backend's engine exec, kubernetes)."""


class Job(_Model):
    """One command in a sandbox (`GET /jobs/{job_id}`): `queued`, `running`, then `succeeded`
    (exit code 0) or `failed` (any other exit code; a timeout, exit code 124 and `timed_out`; a
    command that could not run at all, no exit code and `error`)."""

    schema_version: int = SCHEMA_VERSION
    job_id: str
    sandbox_id: str
    status: JobStatus
    command: str | list[str]
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    created_at: float = Field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    duration_seconds: float | None = None
    error: str | None = None
    timed_out: bool = False
    """Killed at `timeout_seconds` (status `failed`, exit code 124)."""
    oom_killed: bool = False
    """Killed by the sandbox's memory limit (with exit code 137): it ran out of memory."""
    leftover_processes: int | None = None
    """Processes the command left running when it ended, killed then; None where unknown."""

    @model_validator(mode="before")
    @classmethod
    def _old_words(cls, data: object) -> object:
        """Jobs of schema 1: completed -> succeeded/failed by exit code, timeout and error -> failed."""
        if isinstance(data, dict) and "completed_at" in data:
            data = {k: v for k, v in data.items() if k != "completed_at"}
        if isinstance(data, dict) and data.get("status") in ("completed", "timeout", "error", "cancelled"):
            data = dict(data)
            old = data["status"]
            data["status"] = "succeeded" if old == "completed" and data.get("exit_code") == 0 else "failed"
            if old == "timeout":
                data["timed_out"], data["exit_code"] = True, data.get("exit_code") or TIMEOUT_EXIT_CODE
            if old == "cancelled" and not data.get("error"):
                data["error"] = "cancelled"
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def completed_at(self) -> float | None:
        """The published API's name for `finished_at`."""
        return self.finished_at

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_JOB_STATES

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    @property
    def did_not_run(self) -> bool:
        """The command could not be run at all (the sandbox or its runner failed): not its verdict."""
        return self.status == "failed" and self.exit_code is None and not self.timed_out


class FileWrite(_Model):
    """Body of `PUT /sandboxes/{id}/files`: content is base64 when `encoding` is 'base64'."""

    path: str
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    mode: int = Field(0o644, ge=0, le=MAX_FILE_MODE)
    """Permission bits, 0 to 0o777 (no setuid, setgid or sticky bits)."""


class FileContent(_Model):
    """Answer of `GET /sandboxes/{id}/files?path=...`."""

    path: str
    content: str
    encoding: Literal["utf-8", "base64"] = "base64"
    size: int | None = None
    """Bytes in the file."""


class PatchRequest(_Model):
    """Body of `POST /sandboxes/{id}/apply_patch`."""

    patch: str
    cwd: str | None = None
    """The repository the patch applies to; default: the sandbox's workdir."""
    timeout_seconds: float | None = Field(None, gt=0, le=MAX_EXEC_TIMEOUT, allow_inf_nan=False)
    """Per strategy; null means 120."""


class PatchResult(_Model):
    """How a patch went: orchard's `applied`/`method`/`output`, and the published API's
    `success`/`stdout`/`stderr`/`exit_code`/`error` beside them."""

    applied: bool
    method: str | None = None
    """Which strategy applied it: 'git apply', 'git apply --3way', 'patch --fuzz'."""
    output: str = ""

    @model_validator(mode="before")
    @classmethod
    def _published(cls, data: object) -> object:
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in ("success", "stdout", "stderr", "exit_code", "error")}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def success(self) -> bool:
        return self.applied

    @computed_field  # type: ignore[prop-decorator]
    @property
    def stdout(self) -> str:
        return self.output

    @computed_field  # type: ignore[prop-decorator]
    @property
    def stderr(self) -> str:
        return ""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def exit_code(self) -> int:
        return 0 if self.applied else 1

    @computed_field  # type: ignore[prop-decorator]
    @property
    def error(self) -> str | None:
        return None if self.applied else "the patch applies with none of git apply, --3way, patch --fuzz"


class FileUpload(_Model):
    """Body of `POST /sandboxes/{id}/files` (the published API): base64 content."""

    path: str
    content: str
    """The file's bytes, base64."""
    mode: int = Field(0o644, ge=0, le=MAX_FILE_MODE)


class FileEntry(_Model):
    """One entry of `GET /sandboxes/{id}/files/list?path=DIR`."""

    name: str
    type: Literal["file", "directory"]
    size: int
    modified: str | None = None
    """Modification time, ISO 8601 without a zone (the sandbox's clock, UTC)."""


class FileList(_Model):
    path: str
    files: list[FileEntry]


class Resource(_Model):
    """A backend resource orchard created (workspace, container, pod), tracked or orphaned."""

    sandbox_id: str
    owner: str = ""
    """'host:pid:starttime' of the process that created it; a dead owner means an orphan."""
    expires_at: float = 0.0
    detail: str = ""


def check_file_mode(mode: int) -> int:
    """A file's permission bits as the file API accepts them: 0 to 0o777."""
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= MAX_FILE_MODE:
        from orchard_cli.errors import UsageError

        raise UsageError(f"file mode {mode!r} is not a permission mode between 0 and 0o777")
    return mode


def check_file_size(size: int, shown: str) -> None:
    """Refuse a file the file API would hold whole in memory past MAX_FILE_BYTES."""
    if size > MAX_FILE_BYTES:
        from orchard_cli.errors import TooLargeError

        raise TooLargeError(f"{shown} is {size:,} bytes, over the file API's limit of {MAX_FILE_BYTES:,}",
                            hint="read it in parts with exec (head -c, split) or compress it first")
