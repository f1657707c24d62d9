"""Kubernetes objects as plain dicts: a sandbox's Pod and NetworkPolicy, and the service manifests.

Nothing here imports the `kubernetes` client: these are pure functions of a `SandboxSpec`, so they
are tested field by field without a cluster, and the backend (`kubernetes.py`) only sends them.
`pod_state` and `resource_of` read the client's answers back (a Pod's phase and reason, a
resource's id, owner and expiry).

Network policies are created per sandbox (named like the pod, selecting its `orchard.sandbox_id`
label), not once per namespace: a 'proxy' policy names that sandbox's own proxy address, each
policy is deleted with its sandbox, and no shared object is left that nobody owns. Enforcement is
the CNI plugin's job: on a cluster whose network plugin ignores NetworkPolicy (flannel alone,
older kindnet) network='none' and network='proxy' are NOT enforced.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from typing import Any

import yaml

from orchard_cli.env.models import Resource, SandboxSpec
from orchard_cli.errors import UsageError

MANAGED = "orchard.managed"
SANDBOX_ID = "orchard.sandbox_id"
NETWORK = "orchard.network"
EXPIRES = "orchard.expires_at"
OWNER = "orchard.owner"          # an annotation: 'host:pid:start' has ':' which labels refuse
USER_LABELS = "orchard.labels"   # an annotation: every spec.labels entry, as JSON
CONTAINER = "sandbox"
DEFAULT_IMAGE = "debian:bookworm-slim"
SERVICE_IMAGE = "orchard-cli:0.1.0"
# Where a sandbox resolves names in network='proxy' mode: the cluster DNS pods.
DNS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
# The container's main process only waits: commands arrive through the exec API. With
# shareProcessNamespace the pod's pause process is PID 1 and reaps orphans of those commands.
IDLE_COMMAND = ["sh", "-c", "while :; do sleep 3600; done"]

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def valid_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def object_name(sandbox_id: str) -> str:
    """The Pod's and NetworkPolicy's name: 'orchard-<id>', made a DNS label when the id is not."""
    name = f"orchard-{sandbox_id}"
    if len(name) <= 63 and _DNS_LABEL.match(name):
        return name
    digest = hashlib.sha256(sandbox_id.encode()).hexdigest()[:10]
    stem = re.sub(r"[^a-z0-9-]+", "-", sandbox_id.lower()).strip("-")[:40].strip("-")
    return f"orchard-{stem}-{digest}" if stem else f"orchard-{digest}"


def cpu_quantity(cpu: float) -> str:
    return f"{max(1, round(cpu * 1000))}m"


def _metadata(sandbox_id: str, namespace: str, owner: str, expires_at: float,
              network: str, extra_labels: dict[str, str] | None = None) -> dict:
    labels = dict(extra_labels or {})
    labels.update({MANAGED: "true", SANDBOX_ID: sandbox_id, NETWORK: network,
                   EXPIRES: str(int(expires_at))})
    return {"name": object_name(sandbox_id), "namespace": namespace, "labels": labels,
            "annotations": {OWNER: owner, EXPIRES: repr(float(expires_at))}}


def pod_body(sandbox_id: str, spec: SandboxSpec, *, namespace: str, owner: str,
             expires_at: float, image: str | None = None,
             image_pull_policy: str | None = None) -> dict:
    """The Pod of one sandbox. `image` overrides spec.image (the backend maps 'host' to a default).

    Not expressible on a Pod: spec.pids (the kubelet's node-wide `podPidsLimit` caps processes)
    and spec.mounts (host paths of the machine running orchard are not on the cluster's nodes).
    """
    if not valid_label_value(sandbox_id):
        raise UsageError(f"sandbox id {sandbox_id!r} cannot be a Kubernetes label value",
                         hint="use letters, digits, '-', '_' and '.', at most 63 characters")
    user_labels = {k: v for k, v in spec.labels.items()
                   if valid_label_key(k) and valid_label_value(v) and not k.startswith("orchard.")}
    meta = _metadata(sandbox_id, namespace, owner, expires_at, spec.network or "none", user_labels)
    if spec.labels:
        meta["annotations"][USER_LABELS] = json.dumps(spec.labels, sort_keys=True)
    env = {"HOME": "/tmp", "ORCHARD_SANDBOX_ID": sandbox_id}
    if spec.network == "proxy" and spec.proxy_url:
        env["ORCHARD_PROXY_URL"] = spec.proxy_url
    env.update(spec.env)
    resources = {"cpu": cpu_quantity(spec.cpu), "memory": str(spec.memory_bytes)}
    mounts = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes = [{"name": "tmp", "emptyDir": {}}]
    if spec.workdir != "/tmp":
        mounts.insert(0, {"name": "workdir", "mountPath": spec.workdir})
        volumes.insert(0, {"name": "workdir", "emptyDir": {}})
    container = {
        "name": CONTAINER,
        "image": image or spec.image,
        "command": list(IDLE_COMMAND),
        "workingDir": spec.workdir,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        # requests == limits: the Guaranteed QoS class, so a busy node evicts sandboxes last.
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": {
            "readOnlyRootFilesystem": not spec.writable_root,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["NET_RAW"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": mounts,
    }
    if image_pull_policy:
        container["imagePullPolicy"] = image_pull_policy
    pod_spec: dict[str, Any] = {}
    if spec.network in ("none", "drop"):
        # No egress: a lookup sent to the cluster DNS would be dropped and retried for seconds;
        # a nameserver on the pod's own loopback refuses it at once (see netdrop.py).
        pod_spec = {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["127.0.0.1"]}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": spec.timeout,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "shareProcessNamespace": True,
            "terminationGracePeriodSeconds": 0,
            "containers": [container],
            "volumes": volumes,
            **pod_spec,
        },
    }


def proxy_address(proxy_url: str) -> tuple[str, int]:
    """'http://10.0.0.5:8080/v1' -> ('10.0.0.5', 8080); the port defaults by scheme."""
    match = re.match(r"^(https?)://(?:[^@/]*@)?(\[[^\]]+\]|[^:/]+)(?::(\d+))?", proxy_url)
    if not match:
        raise UsageError(f"proxy_url {proxy_url!r} is not an http(s) URL")
    scheme, host, port = match.groups()
    return host.strip("[]"), int(port) if port else (443 if scheme == "https" else 80)


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def network_policy_body(sandbox_id: str, spec: SandboxSpec, *, namespace: str, owner: str,
                        expires_at: float, proxy_ips: list[str] | None = None,
                        proxy_peer: dict | None = None) -> dict | None:
    """The sandbox's NetworkPolicy, or None for network='full'.

    'none': ingress and egress both denied (policy types listed, no rules). 'proxy': egress only
    to the proxy's port on `proxy_ips` (/32 or /128 blocks) and/or `proxy_peer` (a
    NetworkPolicyPeer, for a proxy running in the cluster: many CNIs match policies after a
    Service's ClusterIP is translated to pod IPs, so an ipBlock of a ClusterIP does not match),
    plus DNS to the cluster DNS pods only when the proxy is named by a host name.
    """
    if spec.network == "full":
        return None
    egress: list[dict] = []
    if spec.network == "proxy":
        host, port = proxy_address(spec.proxy_url or "")
        peers = [{"ipBlock": {"cidr": f"{ip}/{32 if ipaddress.ip_address(ip).version == 4 else 128}"}}
                 for ip in (proxy_ips or [])]
        if proxy_peer:
            peers.append(proxy_peer)
        if not peers:
            raise UsageError(f"no address to allow for the proxy {spec.proxy_url!r}",
                             hint="give the proxy as an IP, or set the backend's proxy_peer")
        egress.append({"to": peers, "ports": [{"protocol": "TCP", "port": port}]})
        if not is_ip(host):
            egress.append({"to": [DNS_PEER], "ports": [{"protocol": "UDP", "port": 53},
                                                       {"protocol": "TCP", "port": 53}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(sandbox_id, namespace, owner, expires_at, spec.network or "none"),
        "spec": {
            "podSelector": {"matchLabels": {SANDBOX_ID: sandbox_id}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    }


# ---- reading objects back (V1Pod / V1ObjectMeta models from the client) ---------------------

# Waiting reasons that will not resolve by waiting.
FATAL_WAITING = frozenset({"ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
                           "CreateContainerConfigError", "CreateContainerError",
                           "RunContainerError", "CrashLoopBackOff"})

def pod_state(pod: Any, *, fail_unschedulable: bool = True) -> tuple[str, str]:
    """('running' | 'pending' | 'failed', reason) from a V1Pod's status."""
    status = pod.status
    phase = (status.phase if status else None) or "Pending"
    statuses = (status.container_statuses or []) if status else []
    running, waiting = False, []
    for cs in statuses:
        state = cs.state
        if state and state.terminated:
            t = state.terminated
            why = " ".join(x for x in (t.reason, t.message) if x)
            return "failed", f"container exited with {t.exit_code}" + (f" ({why})" if why else "")
        if state and state.waiting and state.waiting.reason:
            if state.waiting.reason in FATAL_WAITING:
                return "failed", f"{state.waiting.reason}: {state.waiting.message or cs.image}"
            waiting.append(state.waiting.reason)
        running = running or bool(state and state.running)
    if phase in ("Failed", "Succeeded"):
        detail = " ".join(x for x in (status.reason, status.message) if x)
        return "failed", f"pod {phase}" + (f": {detail}" if detail else "")
    if phase == "Running" and running:
        return "running", ""
    for cond in (status.conditions or []) if status else []:
        if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
            reason = f"Unschedulable: {cond.message or ''}".strip()
            return ("failed" if fail_unschedulable else "pending"), reason
    return "pending", f"phase {phase}" + (f" ({', '.join(waiting)})" if waiting else "")


def resource_of(meta: Any, detail: str) -> Resource | None:
    labels, notes = meta.labels or {}, meta.annotations or {}
    sandbox_id = labels.get(SANDBOX_ID)
    if not sandbox_id:
        return None
    try:
        expires = float(notes.get(EXPIRES) or labels.get(EXPIRES) or 0)
    except ValueError:
        expires = 0.0
    return Resource(sandbox_id=sandbox_id, owner=notes.get(OWNER, ""), expires_at=expires,
                    detail=detail)


# ---- the service itself, for `orchard env up --backend kubernetes --print-manifests` ----------

_SECRET_NOTE = """\
# Orchard Env in a cluster. Before applying, create the API key Secret (never commit a key):
#   kubectl create namespace {ns}
#   kubectl -n {ns} create secret generic orchard-env-key \\
#     --from-literal=ORCHARD_ENV_KEY="$(openssl rand -hex 32)"
# The image must contain orchard-cli with its kubernetes extra (pip install 'orchard-cli[kubernetes]').
# Sandboxes are Pods in namespace {ns}; network='none'/'proxy' need a CNI that enforces NetworkPolicy.
"""


def service_objects(namespace: str = "orchard", image: str = SERVICE_IMAGE,
                    port: int = 8765) -> list[dict]:
    """The objects that run the Orchard Env service in `namespace` with least privilege."""
    app = {"app.kubernetes.io/name": "orchard-env"}
    meta = lambda name: {"name": name, "namespace": namespace, "labels": dict(app)}  # noqa: E731
    role_rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete"]},
        # Websocket exec is authorized as 'get' before Kubernetes 1.30 and 'create' since.
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
         "verbs": ["create", "get", "list", "delete"]},
    ]
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10}
    container = {
        "name": "orchard-env",
        "image": image,
        "command": ["orchard", "env", "up", "--backend", "kubernetes",
                    "--host", "0.0.0.0", "--port", str(port)],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "env": [
            {"name": "ORCHARD_ENV_KEY", "valueFrom": {"secretKeyRef": {
                "name": "orchard-env-key", "key": "ORCHARD_ENV_KEY"}}},
            {"name": "ORCHARD_K8S_NAMESPACE", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.namespace"}}},
            {"name": "ORCHARD_HOME", "value": "/var/lib/orchard"},
        ],
        "readinessProbe": dict(probe),
        "livenessProbe": dict(probe, initialDelaySeconds=10),
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                      "limits": {"cpu": "2", "memory": "1Gi"}},
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "state", "mountPath": "/var/lib/orchard"},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    return [
        # Pod Security 'baseline': whoever holds the service account can create pods here, but
        # no privileged, hostPath or host-namespace ones (sandbox pods pass 'baseline').
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": namespace, "labels": dict(app, **{
             "pod-security.kubernetes.io/enforce": "baseline",
             "pod-security.kubernetes.io/enforce-version": "latest"})}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("orchard-env")},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": meta("orchard-env"), "rules": role_rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": meta("orchard-env"),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "orchard-env"},
         "subjects": [{"kind": "ServiceAccount", "name": "orchard-env", "namespace": namespace}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("orchard-env"),
         "spec": {
             "replicas": 1,  # one service: the sandbox table and job model live in its memory
             "selector": {"matchLabels": dict(app)},
             "template": {"metadata": {"labels": dict(app)}, "spec": {
                 "serviceAccountName": "orchard-env",
                 "containers": [container],
                 "volumes": [{"name": "state", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
             }},
         }},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta("orchard-env"),
         "spec": {"type": "ClusterIP", "selector": dict(app),
                  "ports": [{"name": "http", "port": port, "targetPort": "http",
                             "protocol": "TCP"}]}},
    ]


def render_manifests(namespace: str = "orchard", image: str = SERVICE_IMAGE,
                     port: int = 8765) -> str:
    """Multi-document YAML for `kubectl apply -f -`: Namespace, ServiceAccount, Role,
    RoleBinding, Deployment and Service, headed by how to create the key Secret."""
    if not _DNS_LABEL.match(namespace) or len(namespace) > 63:
        raise UsageError(f"namespace {namespace!r} is not a valid Kubernetes name",
                         hint="lower-case letters, digits and '-', at most 63 characters")
    if not 0 < port < 65536:
        raise UsageError(f"port {port} is out of range 1-65535")
    if not image or any(c.isspace() for c in image):
        raise UsageError(f"image {image!r} is not an image reference")
    docs = [yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)
            for obj in service_objects(namespace, image, port)]
    return _SECRET_NOTE.format(ns=namespace) + "---\n" + "---\n".join(docs)
