"""The kubernetes backend without a cluster, and with one when KUBECONFIG is set.

1. Pure: the Pod and NetworkPolicy bodies, field by field, and each validated by the kubernetes
   client's own (pydantic, extra='forbid') model classes.
2. Against the REAL `kubernetes` client pointed at a fake API server on 127.0.0.1 (aiohttp in a
   thread): it serves pods, network policies, label selectors and status transitions, records
   every request, and answers the exec websocket (v4.channel.k8s.io) by running the requested
   argv as a host subprocess in a temporary directory. So exec, files over tar, timeouts and
   output caps run the backend's real wrapper scripts through the real client's websocket code;
   what is not exercised is a kubelet: container isolation, cgroups and CNI enforcement.
3. `k8s`-marked tests: the same operations on a real cluster (skipped without KUBECONFIG).
4. `render_manifests`: YAML that parses, validates against the client's models, and applies
   through `kubernetes.utils.create_from_yaml` to the API paths the real client chooses.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import pytest
import yaml

from orchard_cli.env import k8s_manifests as m
from orchard_cli.env.kubernetes import KubernetesBackend, exec_argv, exit_status
from orchard_cli.env.manager import EnvManager
from orchard_cli.env.models import TRUNCATION_MARKER, ExecRequest, SandboxSpec
from orchard_cli.env.owner import _host, current_owner
from orchard_cli.errors import NotFoundError, SandboxError, UsageError

k8s_client = pytest.importorskip("kubernetes.client")

OWNER = "builder:4242:99"
TOKEN = "test-token-123"


def model_check(obj: dict) -> None:
    """Validate a manifest with the client's model for its kind (unknown fields are errors), and
    check that serializing the model gives back exactly the dict (nothing dropped or renamed)."""
    cls = getattr(k8s_client, f"V1{obj['kind']}")
    model = cls.model_validate(obj)
    assert k8s_client.ApiClient().sanitize_for_serialization(model) == obj


# ---- 1. pure manifest building ---------------------------------------------------------------

def test_pod_body_carries_limits_labels_deadline_and_lockdown():
    spec = SandboxSpec(image="python:3.12-slim", cpu=1.5, memory="512Mi", timeout=120,
                       env={"A": "1"}, labels={"task": "django-1", "suite/name": "a b"})
    pod = m.pod_body("sb-0123abcd", spec, namespace="ns1", owner=OWNER, expires_at=1700000000.5)
    model_check(pod)
    meta, pspec = pod["metadata"], pod["spec"]
    assert meta["name"] == "orchard-sb-0123abcd" and meta["namespace"] == "ns1"
    assert meta["labels"] == {"task": "django-1", "orchard.managed": "true",
                              "orchard.sandbox_id": "sb-0123abcd", "orchard.network": "none",
                              "orchard.expires_at": "1700000000"}
    assert meta["annotations"]["orchard.owner"] == OWNER
    assert float(meta["annotations"]["orchard.expires_at"]) == 1700000000.5
    assert json.loads(meta["annotations"]["orchard.labels"]) == spec.labels  # invalid one kept here
    assert pspec["restartPolicy"] == "Never" and pspec["activeDeadlineSeconds"] == 120
    assert pspec["automountServiceAccountToken"] is False
    (c,) = pspec["containers"]
    assert c["image"] == "python:3.12-slim" and c["workingDir"] == "/workspace"
    assert c["resources"]["limits"] == {"cpu": "1500m", "memory": str(512 * 1024**2)}
    assert c["resources"]["requests"] == c["resources"]["limits"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {v["mountPath"]: v["name"] for v in c["volumeMounts"]}
    assert mounts == {"/workspace": "workdir", "/tmp": "tmp"}
    assert {v["name"]: v for v in pspec["volumes"]}["workdir"] == {"name": "workdir", "emptyDir": {}}
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["A"] == "1" and env["ORCHARD_SANDBOX_ID"] == "sb-0123abcd"
    assert "ORCHARD_PROXY_URL" not in env


def test_pod_body_names_and_bad_ids():
    assert m.object_name("sb-abc") == "orchard-sb-abc"
    odd = m.object_name("Weird_ID.x")
    assert odd.startswith("orchard-weird-id-x-") and len(odd) <= 63 and odd == m.object_name("Weird_ID.x")
    with pytest.raises(UsageError, match="label value"):
        m.pod_body("bad id!", SandboxSpec(), namespace="n", owner=OWNER, expires_at=1.0)
    spec = SandboxSpec(workdir="/tmp")  # one emptyDir only: two volumes at /tmp are invalid
    pod = m.pod_body("sb-1", spec, namespace="n", owner=OWNER, expires_at=1.0, image="img")
    assert [v["mountPath"] for v in pod["spec"]["containers"][0]["volumeMounts"]] == ["/tmp"]


def test_pods_without_egress_resolve_names_nowhere_at_once():
    """network='none'/'drop': a nameserver on the pod's loopback (a lookup is refused at once,
    not dropped and retried); 'proxy' and 'full' keep the cluster's DNS."""
    for network in ("none", "drop"):
        pod = m.pod_body("sb-1", SandboxSpec(network=network), namespace="n", owner=OWNER, expires_at=1.0)
        model_check(pod)
        assert pod["spec"]["dnsPolicy"] == "None"
        assert pod["spec"]["dnsConfig"] == {"nameservers": ["127.0.0.1"]}
    for spec in (SandboxSpec(network="full"), SandboxSpec(network="proxy", proxy_url="http://10.0.0.5:8080")):
        assert "dnsPolicy" not in m.pod_body("sb-1", spec, namespace="n", owner=OWNER, expires_at=1.0)["spec"]


def test_network_policies_none_proxy_full():
    none = m.network_policy_body("sb-1", SandboxSpec(network="none"), namespace="n", owner=OWNER,
                                 expires_at=5.0)
    model_check(none)
    assert none["metadata"]["name"] == "orchard-sb-1"
    assert none["spec"] == {"podSelector": {"matchLabels": {"orchard.sandbox_id": "sb-1"}},
                            "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []}

    by_ip = SandboxSpec(network="proxy", proxy_url="http://10.1.2.3:8080/v1")
    pol = m.network_policy_body("sb-2", by_ip, namespace="n", owner=OWNER, expires_at=5.0,
                                proxy_ips=["10.1.2.3"])
    model_check(pol)
    assert pol["spec"]["egress"] == [{"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}],
                                      "ports": [{"protocol": "TCP", "port": 8080}]}]

    by_name = SandboxSpec(network="proxy", proxy_url="https://proxy.example")
    peer = {"podSelector": {"matchLabels": {"app": "orchard-proxy"}}}
    pol = m.network_policy_body("sb-3", by_name, namespace="n", owner=OWNER, expires_at=5.0,
                                proxy_ips=["fd00::7"], proxy_peer=peer)
    model_check(pol)
    to_proxy, dns = pol["spec"]["egress"]
    assert to_proxy == {"to": [{"ipBlock": {"cidr": "fd00::7/128"}}, peer],
                        "ports": [{"protocol": "TCP", "port": 443}]}
    assert dns["to"] == [m.DNS_PEER] and {p["port"] for p in dns["ports"]} == {53}
    with pytest.raises(UsageError, match="no address"):
        m.network_policy_body("sb-4", by_name, namespace="n", owner=OWNER, expires_at=5.0)
    assert m.network_policy_body("sb-5", SandboxSpec(network="full"), namespace="n",
                                 owner=OWNER, expires_at=5.0) is None


def test_exec_argv_and_exit_status():
    argv = exec_argv(ExecRequest(command="echo hi", env={"X": "a b'c"}, stdin="héllo",
                                 timeout_seconds=2.5), "/workspace")
    assert argv[0:2] == ["sh", "-c"] and argv[2].startswith("export X='a b'\"'\"'c'\n")
    assert argv[3:] == ["orchard-exec", "/workspace", "3", "6", "shell", "echo hi"]
    assert exec_argv(ExecRequest(command=["ls", "-l"], cwd="/w"), "/x")[3:] == \
        ["orchard-exec", "/w", "600", "0", "argv", "ls", "-l"]
    with pytest.raises(UsageError):
        exec_argv(ExecRequest(command="true", env={"BAD-NAME": "1"}), "/w")
    assert exit_status(b'{"metadata":{},"status":"Success"}') == (0, None)
    failure = {"status": "Failure", "reason": "NonZeroExitCode", "message": "exit code 3",
               "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}
    assert exit_status(json.dumps(failure).encode()) == (3, None)
    assert exit_status(b'{"status":"Failure","message":"container not found"}') == \
        (None, "container not found")
    assert exit_status(b"")[0] is None


def _pod(status: dict):
    return k8s_client.V1Pod.from_dict({"metadata": {"name": "p"}, "status": status})


def test_pod_state_reasons():
    assert m.pod_state(_pod({"phase": "Pending"})) == ("pending", "phase Pending")
    waiting = {"name": "sandbox", "image": "x", "imageID": "", "ready": False, "restartCount": 0}
    pulling = _pod({"phase": "Pending", "containerStatuses": [dict(waiting, state={"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}})]})
    assert m.pod_state(pulling) == ("failed", 'ImagePullBackOff: Back-off pulling image "x"')
    unsched = _pod({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                   "reason": "Unschedulable", "message": "0/3 nodes: Insufficient cpu"}]})
    assert m.pod_state(unsched)[0] == "failed"
    assert m.pod_state(unsched, fail_unschedulable=False)[0] == "pending"
    assert m.pod_state(_pod({"phase": "Failed", "reason": "DeadlineExceeded"})) == \
        ("failed", "pod Failed: DeadlineExceeded")


# ---- 2. the real client against a fake API server --------------------------------------------

SCENARIOS = {  # image -> what the fake kubelet does with it
    "fake/ok": "run", "fake/pull-fails": "pull", "fake/unschedulable": "unsched",
    "fake/never": "pending", "fake/crash": "crash",
}


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class FakeKube:
    """Just the API the backend uses; pods run after `pending_reads` reads of their status."""

    def __init__(self, token: str | None = None, pending_reads: int = 2) -> None:
        self.token, self.pending_reads = token, pending_reads
        self.pods: dict[str, dict] = {}
        self.policies: dict[str, dict] = {}
        self.created: list[dict] = []  # objects POSTed through the generic route
        self.requests: list[dict] = []
        self.reads: dict[str, int] = {}

    # -- bookkeeping
    def _record(self, request, body=None) -> None:
        self.requests.append({"method": request.method, "path": request.path,
                              "query": dict(request.query), "body": body,
                              "auth": request.headers.get("Authorization")})

    def calls(self, method: str, fragment: str) -> list[dict]:
        return [r for r in self.requests if r["method"] == method and fragment in r["path"]]

    def _denied(self, request):
        from aiohttp import web
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response(_status(401, "Unauthorized", "Unauthorized"), status=401)
        return None

    @staticmethod
    def _select(objs: dict, selector: str) -> list[dict]:
        wanted = dict(part.split("=", 1) for part in selector.split(",")) if selector else {}
        return [o for o in objs.values()
                if all(o["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())]

    def _advance(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        self.reads[name] = self.reads.get(name, 0) + 1
        scenario = SCENARIOS.get(pod["spec"]["containers"][0]["image"], "run")
        base = {"name": "sandbox", "image": pod["spec"]["containers"][0]["image"], "imageID": "",
                "ready": False, "restartCount": 0}
        if scenario == "run" and self.reads[name] > self.pending_reads:
            pod["spec"]["nodeName"] = "fake-node"
            pod["status"] = {"phase": "Running", "podIP": "10.0.0.7", "containerStatuses": [
                dict(base, ready=True, state={"running": {"startedAt": "2026-01-01T00:00:00Z"}})]}
        elif scenario in ("run", "pending"):
            pod["status"] = {"phase": "Pending", "containerStatuses": [
                dict(base, state={"waiting": {"reason": "ContainerCreating"}})]}
        elif scenario == "pull":
            pod["status"] = {"phase": "Pending", "containerStatuses": [dict(base, state={"waiting": {
                "reason": "ImagePullBackOff",
                "message": 'Back-off pulling image "fake/pull-fails"'}})]}
        elif scenario == "unsched":
            pod["status"] = {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient cpu."}]}
        elif scenario == "crash":
            pod["status"] = {"phase": "Failed", "containerStatuses": [dict(base, state={
                "terminated": {"exitCode": 127, "reason": "Error"}})]}

    # -- handlers
    async def create(self, request):
        from aiohttp import web
        body = await request.json()
        self._record(request, body)
        if denied := self._denied(request):
            return denied
        store = self.pods if request.match_info["kind"] == "pods" else self.policies
        name = body["metadata"]["name"]
        if name in store:
            return web.json_response(_status(409, "AlreadyExists", f'"{name}" already exists'), status=409)
        body["metadata"].update(uid=f"uid-{name}", resourceVersion="1",
                                creationTimestamp="2026-01-01T00:00:00Z")
        if store is self.pods:
            body["status"] = {"phase": "Pending"}
        store[name] = body
        return web.json_response(body, status=201)

    async def read(self, request):
        from aiohttp import web
        self._record(request)
        if denied := self._denied(request):
            return denied
        pod = self.pods.get(request.match_info["name"])
        if pod is None:
            return web.json_response(_status(404, "NotFound", "pods not found"), status=404)
        self._advance(pod)
        return web.json_response(pod)

    async def list(self, request):
        from aiohttp import web
        self._record(request)
        if denied := self._denied(request):
            return denied
        kind = request.match_info["kind"]
        store = self.pods if kind == "pods" else self.policies
        items = self._select(store, request.query.get("labelSelector", ""))
        return web.json_response({"apiVersion": "v1", "kind": "List",
                                  "metadata": {"resourceVersion": "1"}, "items": items})

    async def delete(self, request):
        from aiohttp import web
        self._record(request)
        if denied := self._denied(request):
            return denied
        store = self.pods if request.match_info["kind"] == "pods" else self.policies
        obj = store.pop(request.match_info["name"], None)
        if obj is None:
            return web.json_response(_status(404, "NotFound", "not found"), status=404)
        if store is self.pods:
            return web.json_response(obj)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                  "status": "Success"})

    async def log(self, request):
        from aiohttp import web
        self._record(request)
        return web.Response(text="sh: 1: exec: not found\n", content_type="text/plain")

    async def create_any(self, request):
        from aiohttp import web
        body = await request.json()
        self._record(request, body)
        self.created.append(body)
        return web.json_response(body, status=201)

    async def exec(self, request):
        """The exec websocket: runs the argv on this host, channels 1/2 out, 3 the status."""
        from aiohttp import WSMsgType, web
        self._record(request)
        if denied := self._denied(request):
            return denied
        pod = self.pods.get(request.match_info["name"])
        if pod is None or pod.get("status", {}).get("phase") != "Running":
            return web.json_response(_status(404, "NotFound", "pod not running"), status=404)
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        argv = request.query.getall("command")
        with_stdin = request.query.get("stdin") == "true"
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if with_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

        async def pump(stream, channel):
            while chunk := await stream.read(65536):
                await ws.send_bytes(bytes([channel]) + chunk)

        async def feed():
            async for msg in ws:
                if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT) and proc.stdin:
                    data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                    if data[:1] == b"\x00":
                        try:
                            proc.stdin.write(data[1:])
                            await proc.stdin.drain()
                        except (BrokenPipeError, ConnectionResetError):
                            pass

        feeder = asyncio.ensure_future(feed())
        await asyncio.gather(pump(proc.stdout, 1), pump(proc.stderr, 2))
        code = await proc.wait()
        code = 128 - code if code < 0 else code  # killed by a signal: the runtime reports 128+n
        status = {"metadata": {}, "status": "Success"} if code == 0 else {
            "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": f"command terminated with non-zero exit code: exit code {code}",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        feeder.cancel()
        await ws.close()
        return ws

    # -- the server
    def start(self) -> str:
        from aiohttp import web
        app = web.Application(client_max_size=64 << 20)
        core, net = "/api/v1/namespaces/{ns}", "/apis/networking.k8s.io/v1/namespaces/{ns}"
        app.add_routes([
            web.get(core + "/pods/{name}/exec", self.exec),
            web.get(core + "/pods/{name}/log", self.log),
            web.post(core + "/{kind:pods}", self.create), web.post(net + "/{kind:networkpolicies}", self.create),
            web.get(core + "/{kind:pods}", self.list), web.get(net + "/{kind:networkpolicies}", self.list),
            web.get(core + "/pods/{name}", self.read),
            web.delete(core + "/{kind:pods}/{name}", self.delete),
            web.delete(net + "/{kind:networkpolicies}/{name}", self.delete),
            web.post("/{tail:.*}", self.create_any),
        ])
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve():
            asyncio.set_event_loop(self.loop)
            self.runner = web.AppRunner(app)
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            self.loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert ready.wait(10)
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def fake_kube():
    fake = FakeKube(token=TOKEN)
    url = fake.start()
    cfg = k8s_client.Configuration(host=url)
    cfg.api_key = {"authorization": TOKEN}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    fake.api_client = k8s_client.ApiClient(cfg)
    yield fake
    fake.api_client.close()
    fake.stop()


def backend_for(fake: FakeKube, **options) -> KubernetesBackend:
    return KubernetesBackend(namespace="orch-test", api_client=fake.api_client, poll_interval=0.01,
                             **options)


def test_create_sends_policy_then_pod_and_waits_for_running(fake_kube):
    backend = backend_for(fake_kube)
    spec = SandboxSpec(image="fake/ok", network="none", cpu=0.5, labels={"task": "t1"})
    sandbox = backend.create("sb-aaa", spec, OWNER, 1800000000.0)
    posts = [r for r in fake_kube.requests if r["method"] == "POST"]
    assert [r["path"] for r in posts] == [
        "/apis/networking.k8s.io/v1/namespaces/orch-test/networkpolicies",
        "/api/v1/namespaces/orch-test/pods"]
    policy, pod = posts[0]["body"], posts[1]["body"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {"orchard.sandbox_id": "sb-aaa"}}
    assert policy["spec"]["egress"] == [] and policy["spec"]["ingress"] == []
    assert pod["metadata"]["labels"]["orchard.managed"] == "true"
    assert pod["metadata"]["labels"]["task"] == "t1"
    assert pod["metadata"]["annotations"]["orchard.owner"] == OWNER
    assert pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "500m"
    assert pod["spec"]["automountServiceAccountToken"] is False
    reads = fake_kube.calls("GET", "/pods/orchard-sb-aaa")
    assert len(reads) == 3  # Pending, Pending, Running: it waited
    assert all(r["auth"] == f"Bearer {TOKEN}" for r in fake_kube.requests)
    info = sandbox.info
    assert (info.backend, info.isolation, info.limits) == ("kubernetes", "kubernetes", "kubernetes")
    assert info.details == {"pod": "orchard-sb-aaa", "namespace": "orch-test", "image": "fake/ok",
                            "node": "fake-node", "pod_ip": "10.0.0.7"}


@pytest.mark.parametrize("image, reason", [
    ("fake/pull-fails", "ImagePullBackOff"), ("fake/unschedulable", "Unschedulable"),
    ("fake/crash", "exited with 127"), ("fake/never", "not running after"),
])
def test_failed_start_is_reported_and_cleaned_up(fake_kube, image, reason):
    backend = backend_for(fake_kube, create_timeout=0.3)
    with pytest.raises(SandboxError, match=reason) as caught:
        backend.create("sb-bad", SandboxSpec(image=image), OWNER, time.time() + 60)
    if image == "fake/crash":
        assert "exec: not found" in str(caught.value)  # the tail of the pod's log
    deletes = fake_kube.calls("DELETE", "orchard-sb-bad")
    assert [d["path"].split("/")[-2] for d in deletes] == ["pods", "networkpolicies"]
    assert deletes[0]["query"]["gracePeriodSeconds"] == "0"
    assert fake_kube.pods == {} and fake_kube.policies == {}


def test_full_network_has_no_policy_and_proxy_allows_only_the_proxy(fake_kube):
    backend = backend_for(fake_kube)
    backend.create("sb-full", SandboxSpec(image="fake/ok", network="full"), OWNER, 2e9)
    assert fake_kube.policies == {}
    proxied = SandboxSpec(image="fake/ok", network="proxy", proxy_url="http://10.9.8.7:3128")
    backend.create("sb-prx", proxied, OWNER, 2e9)
    egress = fake_kube.policies["orchard-sb-prx"]["spec"]["egress"]
    assert egress == [{"to": [{"ipBlock": {"cidr": "10.9.8.7/32"}}],
                       "ports": [{"protocol": "TCP", "port": 3128}]}]
    env = {e["name"]: e["value"] for e in fake_kube.pods["orchard-sb-prx"]["spec"]["containers"][0]["env"]}
    assert env["ORCHARD_PROXY_URL"] == "http://10.9.8.7:3128"


def test_resources_lists_and_destroy_is_idempotent(fake_kube):
    backend = backend_for(fake_kube)
    backend.create("sb-one", SandboxSpec(image="fake/ok"), OWNER, 1900000000.25)
    backend.create("sb-two", SandboxSpec(image="fake/ok", network="full"), "other:1:2", 1.0)
    found = {r.sandbox_id: r for r in backend.resources()}
    assert set(found) == {"sb-one", "sb-two"}
    assert found["sb-one"].owner == OWNER and found["sb-one"].expires_at == 1900000000.25
    assert found["sb-one"].detail == "pod/orchard-sb-one Running"
    lists = fake_kube.calls("GET", "/pods") + fake_kube.calls("GET", "/networkpolicies")
    assert {r["query"].get("labelSelector") for r in lists if r["path"].endswith("s")} == \
        {"orchard.managed=true"}
    # a policy whose pod never got made is still found (and so reaped)
    del fake_kube.pods["orchard-sb-one"]
    assert [r.detail for r in backend.resources() if r.sandbox_id == "sb-one"] == \
        ["networkpolicy/orchard-sb-one (no pod)"]
    backend.destroy("sb-one")
    backend.destroy("sb-one")  # both objects now answer 404: fine
    backend.destroy("sb-never-existed")
    assert [r.sandbox_id for r in backend.resources()] == ["sb-two"]


def test_env_manager_gc_reaps_orphans_of_dead_owners(fake_kube):
    backend = backend_for(fake_kube)
    dead = f"{_host()}:999999999:1"  # this host, a pid that does not exist
    alive = current_owner()
    backend.create("sb-orphan", SandboxSpec(image="fake/ok"), dead, time.time() + 3600)
    backend.create("sb-expired", SandboxSpec(image="fake/ok"), "elsewhere:1:1", time.time() - 5)
    backend.create("sb-live", SandboxSpec(image="fake/ok"), "elsewhere:1:1", time.time() + 3600)
    manager = EnvManager(backend=backend, reap_interval=3600)
    try:
        mine = manager.create_sandbox(SandboxSpec(image="fake/ok"))
        assert manager.owner == alive
        reaped = manager.gc()
    finally:
        manager.close()
    assert sorted(reaped) == ["sb-expired", "sb-orphan"]
    assert set(fake_kube.pods) == {"orchard-sb-live"}  # close() removed the manager's own
    assert fake_kube.calls("DELETE", f"orchard-{mine.sandbox_id}")


def test_exec_and_files_through_the_exec_websocket(fake_kube, tmp_path):
    backend = backend_for(fake_kube)
    sandbox = backend.create("sb-exec", SandboxSpec(image="fake/ok", workdir=str(tmp_path)),
                             OWNER, 2e9)
    res = sandbox.exec(ExecRequest(command="echo out; echo err >&2; pwd; echo $GREETING; exit 3",
                                   env={"GREETING": "hi there"}))
    assert (res.exit_code, res.stdout, res.stderr) == (3, f"out\n{tmp_path}\nhi there\n", "err\n")
    assert not res.timed_out and res.error is None
    (tmp_path / "sub").mkdir()
    res = sandbox.exec(ExecRequest(command=["cat"], cwd=str(tmp_path / "sub"), stdin="línea\n"))
    assert (res.exit_code, res.stdout) == (0, "línea\n")
    exec_calls = fake_kube.calls("GET", "/exec")
    assert all(c["query"]["container"] == "sandbox" and c["auth"] == f"Bearer {TOKEN}"
               for c in exec_calls)
    assert exec_calls[-1]["query"]["stdin"] == "true" and exec_calls[0]["query"]["stdin"] == "false"

    res = sandbox.exec(ExecRequest(command="head -c 5000 /dev/zero | tr '\\0' a; echo e >&2",
                                   output_limit=100))
    assert res.stdout == "a" * 100 + TRUNCATION_MARKER.format(dropped=4900)
    assert res.stdout_truncated and not res.stderr_truncated and res.stderr == "e\n"

    pidfile = tmp_path / "bg.pid"
    res = sandbox.exec(ExecRequest(command=f"sleep 30 & echo $! > {pidfile}; sleep 30",
                                   timeout_seconds=1))
    assert res.timed_out and res.exit_code is None and res.duration_seconds < 10
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{int(pidfile.read_text())}/cmdline") or \
        "Z" in open(f"/proc/{int(pidfile.read_text())}/stat").read().split()[2]

    payload = bytes(range(256)) * 40
    target = tmp_path / "deep" / "dir" / "blob.bin"
    sandbox.write_file(str(target), payload, 0o600)
    assert target.read_bytes() == payload and (target.stat().st_mode & 0o777) == 0o600
    assert sandbox.read_file(str(target)) == payload
    with pytest.raises(NotFoundError):
        sandbox.read_file(str(tmp_path / "missing.txt"))
    with pytest.raises(UsageError, match="directory"):
        sandbox.read_file(str(tmp_path / "deep"))


def test_concurrent_execs_and_rest_calls_do_not_mix(fake_kube, tmp_path):
    """stream() swaps its ApiClient's transport while connecting: REST calls made meanwhile on a
    shared client would go out as websockets. Each exec has its own client, so this holds."""
    from concurrent.futures import ThreadPoolExecutor
    backend = backend_for(fake_kube)
    sandbox = backend.create("sb-par", SandboxSpec(image="fake/ok", workdir=str(tmp_path)), OWNER, 2e9)
    with ThreadPoolExecutor(8) as pool:
        jobs = [pool.submit(sandbox.exec, ExecRequest(command=f"echo {i}")) for i in range(24)]
        listings = [pool.submit(backend.resources) for _ in range(24)]
        assert [j.result().stdout for j in jobs] == [f"{i}\n" for i in range(24)]
        assert all([r.sandbox_id for r in f.result()] == ["sb-par"] for f in listings)


def test_env_manager_over_the_backend(fake_kube, tmp_path):
    with EnvManager(backend=backend_for(fake_kube), reap_interval=3600) as env:
        info = env.create_sandbox(SandboxSpec(image="fake/ok", workdir=str(tmp_path)))
        assert info.status == "ready" and info.details["pod"] == f"orchard-{info.sandbox_id}"
        env.write_file(info.sandbox_id, "notes/a.txt", b"hello\n")
        job = env.exec(info.sandbox_id, ExecRequest(command="cat notes/a.txt | wc -c", wait=True))
        assert job.ok and job.stdout.strip() == "6"
        assert env.read_file(info.sandbox_id, "notes/a.txt") == b"hello\n"
    assert fake_kube.pods == {}


def test_unreachable_api_is_an_infra_error():
    from orchard_cli.errors import InfraError
    cfg = k8s_client.Configuration(host="http://127.0.0.1:9")  # nothing listens on port 9
    backend = KubernetesBackend(api_client=k8s_client.ApiClient(cfg), request_timeout=2)
    with pytest.raises(InfraError, match="cannot reach the Kubernetes API"):
        backend.resources()


def test_missing_configuration_is_an_infra_error(tmp_path, monkeypatch):
    from orchard_cli.errors import InfraError
    monkeypatch.setenv("ORCHARD_K8S_NAMESPACE", "from-env")
    backend = KubernetesBackend(kubeconfig=str(tmp_path / "no-such-kubeconfig"))
    assert backend.namespace == "from-env"
    with pytest.raises(InfraError, match="cannot load the Kubernetes configuration"):
        backend.resources()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(InfraError, match="cannot load the Kubernetes configuration"):
        KubernetesBackend(in_cluster=True).resources()


def test_mounts_are_refused(fake_kube):
    spec = SandboxSpec(image="fake/ok", mounts=[{"source": "/opt", "target": "/opt"}])
    with pytest.raises(UsageError, match="cannot mount"):
        backend_for(fake_kube).create("sb-m", spec, OWNER, 2e9)
    assert fake_kube.requests == []


# ---- 3. a real cluster (KUBECONFIG) -----------------------------------------------------------

def _real_backend() -> KubernetesBackend:
    return KubernetesBackend(namespace=os.environ.get("ORCHARD_K8S_NAMESPACE", "orchard"),
                             default_image=os.environ.get("ORCHARD_K8S_IMAGE", m.DEFAULT_IMAGE))


@pytest.mark.k8s
def test_real_cluster_sandbox_round_trip():
    backend = _real_backend()
    with EnvManager(backend=backend, reap_interval=3600) as env:
        info = env.create_sandbox(SandboxSpec(network="none", memory="256Mi", timeout=600))
        sid = info.sandbox_id
        job = env.exec(sid, ExecRequest(command="echo hi; echo oops >&2; exit 4", wait=True))
        assert (job.exit_code, job.stdout, job.stderr) == (4, "hi\n", "oops\n")
        job = env.exec(sid, ExecRequest(command=["cat"], stdin="piped\n", wait=True))
        assert (job.exit_code, job.stdout) == (0, "piped\n")
        env.write_file(sid, "a/b.txt", b"\x00bytes\xff")
        assert env.read_file(sid, "a/b.txt") == b"\x00bytes\xff"
        with pytest.raises(NotFoundError):
            env.read_file(sid, "nope.txt")
        job = env.exec(sid, ExecRequest(command="touch /etc/x", wait=True))
        assert job.exit_code not in (0, None)  # read-only root filesystem
        job = env.exec(sid, ExecRequest(command="sleep 61 & sleep 61", timeout_seconds=2, wait=True))
        assert job.status == "failed" and job.timed_out and job.exit_code == 124
        count = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep 6[1]' || true"
        job = env.exec(sid, ExecRequest(command=count, wait=True))
        assert job.stdout.strip() == "0"  # the timed-out process tree is gone
        assert sid in {r.sandbox_id for r in backend.resources()}
    assert sid not in {r.sandbox_id for r in backend.resources()}


@pytest.mark.k8s
def test_real_cluster_network_none_blocks_what_full_reaches():
    probe = ("timeout 5 bash -c 'echo > /dev/tcp/$KUBERNETES_SERVICE_HOST/$KUBERNETES_SERVICE_PORT'"
             " 2>/dev/null && echo open || echo closed")
    with EnvManager(backend=_real_backend(), reap_interval=3600) as env:
        seen = {}
        for network in ("full", "none"):
            sid = env.create_sandbox(SandboxSpec(network=network, timeout=300)).sandbox_id
            seen[network] = env.exec(sid, ExecRequest(command=probe, wait=True)).stdout.strip()
    assert seen == {"full": "open", "none": "closed"}  # 'none' open: the CNI ignores policies


# ---- 4. the service manifests -----------------------------------------------------------------

def test_render_manifests_is_valid_yaml_of_valid_objects():
    text = m.render_manifests(namespace="orch", image="registry.local/orchard-cli:1", port=9000)
    assert "kubectl -n orch create secret generic orchard-env-key" in text
    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs] == ["Namespace", "ServiceAccount", "Role", "RoleBinding",
                                         "Deployment", "Service"]
    for doc in docs:
        assert doc["apiVersion"] and doc["metadata"]["name"]
        assert doc["kind"] == "Namespace" or doc["metadata"]["namespace"] == "orch"
        model_check(doc)
    by_kind = {d["kind"]: d for d in docs}
    assert by_kind["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    rules = {r["resources"][0]: set(r["verbs"]) for r in by_kind["Role"]["rules"]}
    assert rules == {"pods": {"create", "get", "list", "delete"}, "pods/exec": {"create", "get"},
                     "pods/log": {"get"}, "networkpolicies": {"create", "get", "list", "delete"}}
    assert by_kind["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "orchard-env", "namespace": "orch"}]
    pod = by_kind["Deployment"]["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    assert c["command"] == ["orchard", "env", "up", "--backend", "kubernetes",
                            "--host", "0.0.0.0", "--port", "9000"]
    assert c["image"] == "registry.local/orchard-cli:1"
    env = {e["name"]: e for e in c["env"]}
    assert env["ORCHARD_ENV_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "orchard-env-key", "key": "ORCHARD_ENV_KEY"}
    assert pod["spec"]["serviceAccountName"] == "orchard-env"
    selector = by_kind["Deployment"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    svc = by_kind["Service"]["spec"]
    assert svc["type"] == "ClusterIP" and svc["selector"] == selector
    assert svc["ports"][0]["targetPort"] in {p["name"] for p in c["ports"]}
    for bad in ({"namespace": "Bad_NS"}, {"port": 0}, {"image": "a b"}):
        with pytest.raises(UsageError):
            m.render_manifests(**bad)


def test_render_manifests_apply_through_the_client(fake_kube):
    """kubernetes.utils maps each kind to its API the way kubectl does; the fake records paths."""
    from kubernetes import utils
    docs = list(yaml.safe_load_all(m.render_manifests()))
    utils.create_from_yaml(fake_kube.api_client, yaml_objects=docs)
    assert [r["path"] for r in fake_kube.requests] == [
        "/api/v1/namespaces", "/api/v1/namespaces/orchard/serviceaccounts",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/orchard/roles",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/orchard/rolebindings",
        "/apis/apps/v1/namespaces/orchard/deployments", "/api/v1/namespaces/orchard/services"]
    assert fake_kube.created == docs  # what went over the wire is what was rendered
