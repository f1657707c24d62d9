"""The `kubernetes` backend: one Pod per sandbox, commands and files through the exec API.

Lifecycle: `create` makes the sandbox's NetworkPolicy first (so the pod is never unfiltered, as
far as the CNI has caught up) and then its Pod (`k8s_manifests.pod_body`), and polls the Pod until
it runs; a failed, unschedulable or image-less Pod is deleted and reported as a SandboxError with
Kubernetes' reason. `resources` lists what carries `orchard.managed=true`; `destroy` deletes the
Pod (grace 0) and the policy, and a 404 is success.

Operations: `exec` runs `sh -c` inside the container (a small wrapper picks bash when present,
changes directory, exports env, feeds exactly len(stdin) bytes through `head -c` so no stdin
close is needed, and wraps the command in `timeout -s KILL`, which kills the command's process
group); the exit code comes from the exec error channel. Files travel as tar over exec, like
`kubectl cp`. The image therefore needs `sh`, `head` and `tar` (coreutils or busybox); without
`timeout` a command past its limit is abandoned by the client but keeps running in the pod.

Network enforcement depends on the cluster's CNI plugin (see `k8s_manifests`). Not supported:
'pids_limit' (no Pod field; the kubelet's podPidsLimit is node-wide), 'mounts' (host paths of
the machine running orchard do not exist on the cluster's nodes) and 'forwards' (no runner in the
pod to relay a port to the orchard host).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shlex
import socket
import tarfile
import threading
import time
from typing import Any, ClassVar

from orchard_cli.env import k8s_manifests as m
from orchard_cli.env.models import (
    MAX_FILE_BYTES,
    TRUNCATION_MARKER,
    ExecRequest,
    ExecResult,
    Resource,
    SandboxInfo,
    SandboxSpec,
    check_file_mode,
    check_file_size,
)
from orchard_cli.errors import (
    InfraError,
    MissingDependencyError,
    NotFoundError,
    SandboxError,
    UsageError,
)

INSTALL_HINT = "pip install 'orchard-cli[kubernetes]'"
EXEC_GRACE_SECONDS = 10.0    # beyond the command's timeout before the client gives up
NOT_FOUND_EXIT = 44          # read_file's wrapper: no such file
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_EXEC_SCRIPT = r"""cd "$1" 2>/dev/null || { echo "orchard: cannot cd to $1" >&2; exit 126; }
t=$2; n=$3; mode=$4; shift 4
if [ "$mode" = shell ]; then
  if command -v bash >/dev/null 2>&1; then set -- bash -c "$1"; else set -- sh -c "$1"; fi
fi
if command -v timeout >/dev/null 2>&1; then set -- timeout -s KILL "$t" "$@"; fi
if [ "$n" -gt 0 ]; then head -c "$n" | "$@"; else "$@" </dev/null; fi
"""
_WRITE_SCRIPT = 'head -c "$1" | tar -x -f - -C /'
_READ_SCRIPT = (f'[ -e "$1" ] || {{ echo "orchard: no such file: $1" >&2; exit {NOT_FOUND_EXIT}; }}\n'
                '[ -d "$1" ] && { echo "orchard: is a directory: $1" >&2; exit 45; }\n'
                'cd "$(dirname "$1")" && tar -c -h -f - "./$(basename "$1")"')


def exec_argv(request: ExecRequest, workdir: str) -> list[str]:
    """The argv the exec API runs for `request` (pure: tested without a cluster)."""
    exports = []
    for key, value in request.env.items():
        if not _ENV_NAME.match(key):
            raise UsageError(f"environment variable name {key!r} is not valid")
        exports.append(f"export {key}={shlex.quote(value)}\n")
    if isinstance(request.command, str):
        mode, args = "shell", [request.command]
    else:
        mode, args = "argv", list(request.command)
    stdin_len = len(request.stdin.encode()) if request.stdin else 0
    limit = str(max(1, math.ceil(request.timeout_seconds)))
    return ["sh", "-c", "".join(exports) + _EXEC_SCRIPT, "orchard-exec",
            request.cwd or workdir, limit, str(stdin_len), mode, *args]


def exit_status(raw: bytes | str) -> tuple[int | None, str | None]:
    """Parse the exec error channel (a metav1.Status): (exit code, error)."""
    if not raw:
        return None, "the exec stream closed without an exit status"
    try:
        status = json.loads(raw)
    except ValueError:
        return None, f"unreadable exec status: {raw[:200]!r}"
    if status.get("status") == "Success":
        return 0, None
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
            return int(cause["message"]), None
    return None, status.get("message") or "exec failed"


class _Capped:
    """Keeps the first `limit` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit, self.data, self.dropped = limit, bytearray(), 0

    def add(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        self.data += chunk[:max(room, 0)]
        self.dropped += max(len(chunk) - max(room, 0), 0)

    def text(self) -> str:
        text = self.data.decode("utf-8", errors="replace")
        return text + TRUNCATION_MARKER.format(dropped=self.dropped) if self.dropped else text


class _Discard:
    def write(self, _data: Any) -> None:
        pass

    def getvalue(self) -> bytes:
        return b""


def _api_message(exc: Any) -> str:
    try:
        return json.loads(exc.body).get("message") or exc.reason
    except Exception:
        return str(getattr(exc, "reason", exc))


class KubernetesSandbox:
    def __init__(self, backend: "KubernetesBackend", info: SandboxInfo) -> None:
        self.backend = backend
        self.info = info
        self.pod = info.details["pod"]

    def exec(self, request: ExecRequest) -> ExecResult:
        argv = exec_argv(request, self.info.spec.workdir)
        stdin = request.stdin.encode() if request.stdin else None
        started = time.monotonic()
        code, out, err, timed_out, error = self.backend.run(
            self.pod, argv, stdin, request.timeout_seconds + EXEC_GRACE_SECONDS,
            request.output_limit)
        duration = time.monotonic() - started
        if code in (124, 137) and duration >= request.timeout_seconds:
            timed_out = True
        return ExecResult(exit_code=None if timed_out else code, stdout=out.text(),
                          stderr=err.text(), stdout_truncated=out.dropped > 0,
                          stderr_truncated=err.dropped > 0, timed_out=timed_out,
                          duration_seconds=duration, error=error)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        check_file_mode(mode)
        check_file_size(len(data), path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            member = tarfile.TarInfo(path.lstrip("/"))
            member.size, member.mode, member.mtime = len(data), mode, int(time.time())
            tar.addfile(member, io.BytesIO(data))
        archive = buf.getvalue()
        code, _, err, _, error = self.backend.run(
            self.pod, ["sh", "-c", _WRITE_SCRIPT, "orchard-write", str(len(archive))],
            archive, 300.0, 64 << 10)
        if error or code != 0:
            raise SandboxError(f"could not write {path} in pod {self.pod}: "
                               f"{error or err.text().strip() or f'tar exited {code}'}")

    def read_file(self, path: str) -> bytes:
        code, out, err, _, error = self.backend.run(
            self.pod, ["sh", "-c", _READ_SCRIPT, "orchard-read", path], None, 300.0,
            MAX_FILE_BYTES + (1 << 20))
        if code == NOT_FOUND_EXIT:
            raise NotFoundError(f"no file {path} in sandbox {self.info.sandbox_id}")
        if code == 45:
            raise UsageError(f"{path} is a directory, not a file")
        if out.dropped:
            check_file_size(MAX_FILE_BYTES + out.dropped, path)
        if error or code != 0:
            reason = error or err.text().strip() or f"tar exited {code}"
            raise SandboxError(f"could not read {path} in pod {self.pod}: {reason}")
        with tarfile.open(fileobj=io.BytesIO(bytes(out.data)), mode="r:") as tar:
            for member in tar:
                if member.isfile():
                    check_file_size(member.size, path)
                    handle = tar.extractfile(member)
                    return handle.read() if handle else b""
        raise SandboxError(f"could not read {path} in pod {self.pod}: not a regular file")

    def open_pty(self, request: Any) -> Any:
        raise UsageError("the kubernetes backend has no terminal sessions yet",
                         hint="use exec, or the local or docker backend")

    def destroy(self) -> None:
        self.backend.destroy(self.info.sandbox_id)


class KubernetesBackend:
    """Sandboxes as Pods in one namespace (default: ORCHARD_K8S_NAMESPACE, else 'orchard').

    spec.image 'host' (the local backend's default) means `default_image` here. NetworkPolicy
    enforcement depends on the cluster's CNI plugin.
    """

    name: ClassVar[str] = "kubernetes"
    unsupported: ClassVar[frozenset[str]] = frozenset({"pids_limit", "mounts", "pty", "forwards",
                                                               "services"})

    def __init__(self, namespace: str | None = None, *, kubeconfig: str | None = None,
                 context: str | None = None, in_cluster: bool | None = None,
                 api_client: Any = None, default_image: str = m.DEFAULT_IMAGE,
                 image_pull_policy: str | None = None, create_timeout: float = 300.0,
                 poll_interval: float = 0.5, proxy_peer: dict | None = None,
                 fail_unschedulable: bool = True, request_timeout: float = 30.0) -> None:
        """`api_client`: a ready `kubernetes.client.ApiClient` (tests); otherwise the in-cluster
        config when running in a pod (or in_cluster=True), else `kubeconfig`/`context`."""
        self.namespace = namespace or os.environ.get("ORCHARD_K8S_NAMESPACE") or "orchard"
        self.kubeconfig, self.context, self.in_cluster = kubeconfig, context, in_cluster
        self.default_image = default_image
        self.image_pull_policy = image_pull_policy
        self.create_timeout, self.poll_interval = create_timeout, poll_interval
        self.proxy_peer = proxy_peer
        self.fail_unschedulable = fail_unschedulable
        self.request_timeout = request_timeout
        self._api = api_client
        self._own_client = api_client is None
        self._lock = threading.Lock()

    # ---- the client ----------------------------------------------------------------------------

    def _client(self) -> Any:
        with self._lock:
            if self._api is None:
                self._api = self._load_client()
        return self._api

    def _load_client(self) -> Any:
        try:
            from kubernetes import client, config
        except ImportError as exc:
            raise MissingDependencyError("the kubernetes backend needs the kubernetes client",
                                         hint=INSTALL_HINT) from exc
        in_cluster = self.in_cluster
        if in_cluster is None:
            in_cluster = not (self.kubeconfig or os.environ.get("KUBECONFIG")) and bool(
                os.environ.get("KUBERNETES_SERVICE_HOST"))
        try:
            if in_cluster:
                cfg = client.Configuration()
                config.load_incluster_config(client_configuration=cfg)
                return client.ApiClient(cfg)
            return config.new_client_from_config(config_file=self.kubeconfig, context=self.context)
        except Exception as exc:
            raise InfraError(f"cannot load the Kubernetes configuration: {exc}",
                             hint="set KUBECONFIG, or pass kubeconfig=/context=") from exc

    def _core(self) -> Any:
        from kubernetes import client
        return client.CoreV1Api(self._client())

    def _net(self) -> Any:
        from kubernetes import client
        return client.NetworkingV1Api(self._client())

    def _call(self, what: str, fn: Any, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        """Call the API; map its failures to OrchardErrors. With missing_ok a 404 returns None."""
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error
        try:
            return fn(*args, _request_timeout=self.request_timeout, **kwargs)
        except ApiException as exc:
            if exc.status == 404 and missing_ok:
                return None
            msg = _api_message(exc)
            if exc.status in (401, 403):
                raise InfraError(f"Kubernetes refused to {what}: {msg}", hint=(
                    "the service account needs the Role printed by "
                    "`orchard env up --backend kubernetes --print-manifests`")) from exc
            if exc.status == 404 and "namespace" in msg:
                raise SandboxError(f"cannot {what}: {msg}",
                                   hint=f"kubectl create namespace {self.namespace}") from exc
            if exc.status == 0:
                raise InfraError(f"cannot reach the Kubernetes API to {what}: {msg}") from exc
            raise SandboxError(f"Kubernetes could not {what}: {exc.status} {msg}") from exc
        except (Urllib3Error, OSError) as exc:  # connection refused, DNS, TLS, timeouts
            host = getattr(getattr(self._api, "configuration", None), "host", "?")
            raise InfraError(f"cannot reach the Kubernetes API at {host} to {what}: {exc}") from exc

    # ---- lifecycle -----------------------------------------------------------------------------

    def create(self, sandbox_id: str, spec: SandboxSpec, owner: str, expires_at: float) -> KubernetesSandbox:
        if spec.mounts:
            raise UsageError("the kubernetes backend cannot mount host paths (spec.mounts)",
                             hint="bake the files into the image, or write them with write_file")
        if spec.forwards:
            raise UsageError("the kubernetes backend cannot forward ports to the orchard host "
                             "(spec.forwards)", hint="use the local or docker backend")
        if spec.services:
            raise UsageError("the kubernetes backend cannot start side services (spec.services: a "
                             "docker-compose task's other containers)", hint="use the docker backend")
        image = self.default_image if spec.image == "host" else spec.image
        pod = m.pod_body(sandbox_id, spec, namespace=self.namespace, owner=owner,
                         expires_at=expires_at, image=image,
                         image_pull_policy=self.image_pull_policy)
        policy = m.network_policy_body(sandbox_id, spec, namespace=self.namespace, owner=owner,
                                       expires_at=expires_at, proxy_ips=self._proxy_ips(spec),
                                       proxy_peer=self.proxy_peer)
        name = pod["metadata"]["name"]
        try:
            if policy is not None:
                self._call("create a NetworkPolicy", self._net().create_namespaced_network_policy,
                           self.namespace, policy)
            self._call("create a pod", self._core().create_namespaced_pod, self.namespace, pod)
            running = self._wait_running(name)
        except BaseException:
            try:
                self.destroy(sandbox_id)
            except Exception:
                pass
            raise
        details = {"pod": name, "namespace": self.namespace, "image": image}
        if running.spec and running.spec.node_name:
            details["node"] = running.spec.node_name
        if running.status and running.status.pod_ip:
            details["pod_ip"] = running.status.pod_ip
        info = SandboxInfo(sandbox_id=sandbox_id, backend=self.name, status="ready", spec=spec,
                           isolation="kubernetes", limits="kubernetes", expires_at=expires_at,
                           details=details)
        return KubernetesSandbox(self, info)

    def _proxy_ips(self, spec: SandboxSpec) -> list[str]:
        if spec.network != "proxy" or not spec.proxy_url:
            return []
        host, port = m.proxy_address(spec.proxy_url)
        if m.is_ip(host):
            return [host]
        try:
            infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
        except OSError:
            if self.proxy_peer:
                return []
            raise UsageError(f"cannot resolve the proxy host {host!r} to allow it",
                             hint="give proxy_url with an IP, or set the backend's proxy_peer")
        return sorted({info[4][0] for info in infos})

    def _wait_running(self, name: str) -> Any:
        deadline, delay = time.monotonic() + self.create_timeout, self.poll_interval
        core = self._core()
        while True:
            pod = self._call("read a pod", core.read_namespaced_pod, name, self.namespace)
            state, reason = m.pod_state(pod, fail_unschedulable=self.fail_unschedulable)
            if state == "running":
                return pod
            if state == "failed":
                logs = self._tail_logs(core, name) if "exited" in reason else ""
                raise SandboxError(f"pod {name} failed to start: {reason}{logs}")
            if time.monotonic() >= deadline:
                raise SandboxError(f"pod {name} not running after {self.create_timeout:g}s: {reason}",
                                   hint="look at `kubectl describe pod` for its events")
            time.sleep(delay)
            delay = min(delay * 1.5, max(self.poll_interval, 2.0))  # spare the API server

    def _tail_logs(self, core: Any, name: str) -> str:
        try:
            text = core.read_namespaced_pod_log(name, self.namespace, tail_lines=10,
                                                _request_timeout=self.request_timeout)
        except Exception:
            return ""
        return f"; last log lines: {text.strip()[-500:]}" if text and text.strip() else ""

    def resources(self) -> list[Resource]:
        selector = f"{m.MANAGED}=true"
        found: dict[str, Resource] = {}
        pods = self._call("list pods", self._core().list_namespaced_pod, self.namespace,
                          label_selector=selector)
        for pod in pods.items:
            res = m.resource_of(pod.metadata, f"pod/{pod.metadata.name} "
                                          f"{(pod.status.phase if pod.status else None) or '?'}")
            if res:
                found[res.sandbox_id] = res
        policies = self._call("list NetworkPolicies", self._net().list_namespaced_network_policy,
                              self.namespace, label_selector=selector)
        for policy in policies.items:
            res = m.resource_of(policy.metadata, f"networkpolicy/{policy.metadata.name} (no pod)")
            if res and res.sandbox_id not in found:
                found[res.sandbox_id] = res
        return list(found.values())

    def destroy(self, sandbox_id: str) -> None:
        name = m.object_name(sandbox_id)
        self._call("delete a pod", self._core().delete_namespaced_pod, name, self.namespace,
                   grace_period_seconds=0, missing_ok=True)
        self._call("delete a NetworkPolicy", self._net().delete_namespaced_network_policy, name,
                   self.namespace, missing_ok=True)

    def close(self) -> None:
        if self._own_client and self._api is not None:
            self._api.close()
            self._api = None

    # ---- exec ----------------------------------------------------------------------------------

    def run(self, pod: str, argv: list[str], stdin: bytes | None, deadline_s: float,
            limit: int) -> tuple[int | None, _Capped, _Capped, bool, str | None]:
        """Run argv in the pod: (exit code, stdout, stderr, client gave up, error)."""
        from kubernetes import client
        from kubernetes.stream import stream
        from kubernetes.stream.ws_client import ERROR_CHANNEL, STDERR_CHANNEL, STDOUT_CHANNEL
        from websocket import WebSocketConnectionClosedException

        out, err = _Capped(limit), _Capped(limit)
        # stream() swaps the ApiClient's transport while it runs: a private client per exec keeps
        # concurrent REST calls on the shared one safe.
        with client.ApiClient(self._client().configuration) as api_client:
            try:
                ws = stream(client.CoreV1Api(api_client).connect_get_namespaced_pod_exec, pod,
                            self.namespace, command=argv, container=m.CONTAINER,
                            stdin=stdin is not None, stdout=True, stderr=True, tty=False,
                            _preload_content=False, binary=True)
            except Exception as exc:
                return None, out, err, False, f"exec in pod {pod} failed: {_api_message(exc)}"
            if hasattr(ws, "_all"):
                ws._all = _Discard()  # the client would otherwise keep a copy of all output
            status, gave_up = b"", False
            deadline = time.monotonic() + deadline_s
            try:
                for start in range(0, len(stdin or b""), 1 << 18):
                    ws.write_stdin(stdin[start:start + (1 << 18)])
                while ws.is_open():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        gave_up = True
                        break
                    try:
                        ws.update(timeout=min(remaining, 1.0))
                    except WebSocketConnectionClosedException:
                        break  # closed without a close frame: what arrived is all there is
                    out.add(ws.read_channel(STDOUT_CHANNEL))
                    err.add(ws.read_channel(STDERR_CHANNEL))
                    status += ws.read_channel(ERROR_CHANNEL)
                out.add(ws.read_channel(STDOUT_CHANNEL))
                err.add(ws.read_channel(STDERR_CHANNEL))
                status += ws.read_channel(ERROR_CHANNEL)
            except Exception as exc:
                return None, out, err, False, f"exec stream to pod {pod} broke: {exc}"
            finally:
                ws.close()
        if gave_up:
            return None, out, err, True, None
        code, error = exit_status(status)
        return code, out, err, False, error
