"""Pure builders of the Kubernetes objects one rollout needs, and the pod-state → status mapping.

Owns: :func:`build_pod_manifest`, :func:`build_network_policy`, :func:`build_secret`,
:func:`classify_pod`, :data:`LABELS`. No client, no I/O: everything here is data in, data out, and
tested as such.

Each rollout is one pod: the in-pod agent (``_podagent.py``, shipped in the command, so any image
with ``python3`` works; run with ``-I``, so it imports nothing from the agent's workdir, its working
directory) serves exec and files and is the pod's first process, which the verifier's step relies on;
``restartPolicy: Never``; ``activeDeadlineSeconds``; ``automountServiceAccountToken: false``; non-root, no privilege escalation, all capabilities dropped;
requests = limits (default 2 CPU / 2 Gi). A default-deny NetworkPolicy lets the pods' egress reach
only the proxy (and DNS when the proxy is addressed by name) and their ingress only the agent port.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.types import RolloutStatus
from .k8s_checks import (
    canonical_cpu,
    canonical_memory,
    check_dns_label,
    check_dns_subdomain,
    check_env_names,
    check_labels,
    check_mount_paths,
    host_cidr,
)

__all__ = ["AGENT_PORT", "LABELS", "PodLayout", "PodResources", "build_network_policy", "build_pod_manifest", "build_secret", "classify_pod",
           "egress_ports"]

AGENT_PORT = 8790
LABELS = {"app.kubernetes.io/managed-by": "openforge", "openforge.dev/role": "rollout"}
def agent_source() -> str:
    """The pod agent's source as shipped in the pod's command: ``_podagent.py`` with its import of
    ``_hostile_read`` (between the ``# >>>`` and ``# <<<`` lines) replaced by that module's source (the
    pod has no openforge), so the pod reads the agent's files with the driver's own checks."""
    here = Path(__file__).parent
    reader = (here / "_hostile_read.py").read_text().split("from __future__ import annotations\n", 1)[1]
    agent = (here / "_podagent.py").read_text()
    head, rest = agent.split("# >>> _hostile_read", 1)
    return head + reader + rest.split("# <<< _hostile_read\n", 1)[1]


AGENT_SOURCE = agent_source()

IMAGE_ERRORS = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull",
                "CreateContainerConfigError", "CreateContainerError"}


def _k8s_name(s: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in s.lower()).strip("-")
    return out[:63].rstrip("-") or "x"


@dataclass(frozen=True)
class PodResources:
    """What a rollout's pod may use: ``cpu`` cores, ``memory_mb`` and ``disk_mb`` (requests = limits;
    ``disk_mb`` is the pod's ``ephemeral-storage``: its workdir, home, ``/tmp`` and writable layer
    together), and ``deadline_s`` (``activeDeadlineSeconds``: a pod whose driver died is stopped by then)."""

    cpu: float = 2.0
    memory_mb: int = 2048
    deadline_s: int = 3600
    disk_mb: int = 4096


@dataclass(frozen=True)
class PodLayout:
    """Where the agent works inside the pod (``workdir``, ``home``: emptyDir volumes), as which uid, and
    the in-pod agent's port."""

    workdir: str = "/work"
    home: str = "/home/agent"
    run_as_user: int = 1000
    agent_port: int = AGENT_PORT


#: the flat keywords build_pod_manifest took before the value objects → (object, field)
_POD_FLAT = {"cpu": "resources", "memory_mb": "resources", "deadline_s": "resources", "disk_mb": "resources",
             "workdir": "layout",
             "home": "layout", "run_as_user": "layout", "agent_port": "layout"}


def build_pod_manifest(
    *,
    name: str,
    namespace: str,
    image: str,
    rollout_id: str,
    run_id: str,
    task_id: str,
    secret_name: str,
    proxy_url: str,
    env: dict[str, str] | None = None,
    resources: PodResources | None = None,
    layout: PodLayout | None = None,
    service_account: str | None = None,
    node_selector: dict[str, str] | None = None,
    extra_labels: dict[str, str] | None = None,
    **flat: Any,
) -> dict[str, Any]:
    """The rollout's pod. The per-rollout secret (API key + agent token) comes from ``secret_name``.
    Raises ConfigError for what the API server would refuse (422): a bad env name, label or name,
    ``workdir`` == ``home``. Quantities are written as the server stores them (``1``, not ``1000m``).
    The old flat keywords (``cpu=``, ``workdir=``, ...) still work and override ``resources`` / ``layout``."""
    unknown = sorted(set(flat) - set(_POD_FLAT))
    if unknown:
        raise TypeError(f"build_pod_manifest() got an unexpected keyword argument {unknown[0]!r}")
    resources = replace(resources or PodResources(), **{k: v for k, v in flat.items() if _POD_FLAT[k] == "resources"})
    layout = replace(layout or PodLayout(), **{k: v for k, v in flat.items() if _POD_FLAT[k] == "layout"})
    cpu, memory_mb, deadline_s = resources.cpu, resources.memory_mb, resources.deadline_s
    workdir, home, run_as_user, agent_port = layout.workdir, layout.home, layout.run_as_user, layout.agent_port
    labels = {**LABELS, "openforge.dev/run": _k8s_name(run_id), "openforge.dev/rollout": _k8s_name(rollout_id),
              "openforge.dev/task": _k8s_name(task_id), **check_labels(extra_labels or {}, "extra_labels")}
    check_labels(node_selector or {}, "node_selector")
    check_env_names(sorted(env or {}), f"the environment of rollout {rollout_id}")
    check_mount_paths({"workdir": workdir, "home": home, "the pod's /tmp volume": "/tmp"})
    if service_account:
        check_dns_subdomain(service_account, "service_account")
    quantity = {"cpu": canonical_cpu(cpu), "memory": canonical_memory(memory_mb),
                "ephemeral-storage": canonical_memory(resources.disk_mb, "disk_mb")}
    env_list: list[dict[str, Any]] = [
        {"name": "HOME", "value": home},
        {"name": "OPENFORGE_PROXY_URL", "value": proxy_url},
        {"name": "OPENFORGE_ROLLOUT_ID", "value": rollout_id},
        {"name": "OPENFORGE_API_KEY", "valueFrom": {"secretKeyRef": {"name": secret_name, "key": "api-key"}}},
        {"name": "OPENFORGE_AGENT_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret_name, "key": "agent-token"}}},
    ]
    env_list += [{"name": k, "value": v} for k, v in sorted((env or {}).items())]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": int(deadline_s),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "securityContext": {"runAsNonRoot": True, "runAsUser": run_as_user, "runAsGroup": run_as_user,
                            "fsGroup": run_as_user, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "rollout",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-I", "-c", AGENT_SOURCE, "--port", str(agent_port), "--mkdir", workdir, "--mkdir", home],
            "workingDir": workdir,
            "env": env_list,
            "ports": [{"name": "agent", "containerPort": agent_port}],
            "resources": {"requests": dict(quantity), "limits": dict(quantity)},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": agent_port}, "periodSeconds": 1},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                "readOnlyRootFilesystem": False},
            "volumeMounts": [{"name": "work", "mountPath": workdir}, {"name": "home", "mountPath": home},
                             {"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [{"name": "work", "emptyDir": {}}, {"name": "home", "emptyDir": {}},
                    {"name": "tmp", "emptyDir": {}}],
    }
    if service_account:
        spec["serviceAccountName"] = service_account
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "annotations": {"openforge.dev/rollout-id": rollout_id, "openforge.dev/task-id": task_id}},
            "spec": spec}


def build_secret(*, name: str, namespace: str, run_id: str, api_key: str, agent_token: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {**LABELS, "openforge.dev/run": _k8s_name(run_id)}},
            "stringData": {"api-key": api_key, "agent-token": agent_token}}


def build_network_policy(
    *,
    name: str,
    namespace: str,
    run_id: str,
    proxy_port: int,
    proxy_cidr: str | None = None,
    proxy_pod_labels: dict[str, str] | None = None,
    proxy_namespace: str | None = None,
    allow_dns: bool = False,
    agent_port: int = AGENT_PORT,
    service_ports: tuple[int, int] | None = None,
    port_ranges: bool = True,
) -> dict[str, Any]:
    """Default-deny for the run's rollout pods: egress only to the proxy (an IP block, or pods by
    label in a namespace) on its port, and on ``service_ports`` (first, last: where the driver
    publishes environment services) (+ DNS to kube-dns if asked); ingress only to the agent port.
    ``port_ranges=False`` spells the service range port by port, for servers that drop ``endPort``."""
    if not proxy_cidr and not proxy_pod_labels:
        raise ValueError("the proxy must be given as proxy_cidr or proxy_pod_labels")
    peer: dict[str, Any]
    if proxy_cidr:
        peer = {"ipBlock": {"cidr": host_cidr(proxy_cidr, "proxy_cidr")}}
    else:
        peer = {"podSelector": {"matchLabels": check_labels(proxy_pod_labels or {}, "proxy_pod_labels")}}
        if proxy_namespace:
            check_dns_label(proxy_namespace, "proxy_namespace")
            peer["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": proxy_namespace}}
    ports: list[dict[str, Any]] = [{"protocol": "TCP", "port": proxy_port}]
    if service_ports and port_ranges:
        ports.append({"protocol": "TCP", "port": service_ports[0], "endPort": service_ports[1]})
    elif service_ports:  # a server without ``endPort`` (< v1.21 or the feature off): one entry per port
        ports += [{"protocol": "TCP", "port": p} for p in range(service_ports[0], service_ports[1] + 1)]
    egress: list[dict[str, Any]] = [{"to": [peer], "ports": ports}]
    if allow_dns:
        egress.append({"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                               "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                       "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace, "labels": {**LABELS, "openforge.dev/run": _k8s_name(run_id)}},
            "spec": {"podSelector": {"matchLabels": {**LABELS, "openforge.dev/run": _k8s_name(run_id)}},
                     "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{"ports": [{"protocol": "TCP", "port": agent_port}]}],
                     "egress": egress}}


def egress_ports(policy: dict[str, Any]) -> set[int]:
    """Every TCP/UDP port a NetworkPolicy's egress rules open, ranges (``endPort``) expanded. Read
    back from the server, this is what the policy really allows: a server that dropped ``endPort``
    opens the first port of the range only."""
    out: set[int] = set()
    for rule in (policy.get("spec") or {}).get("egress") or []:
        for p in rule.get("ports") or []:
            if not isinstance(p.get("port"), int):  # a named port (not one openforge writes)
                continue
            last = p.get("endPort") or p.get("end_port") or p["port"]
            out.update(range(p["port"], int(last) + 1))
    return out


#: The kubelet's words for a pod evicted for its own storage limit (not for the node's)
_OWN_STORAGE = re.compile(r"ephemeral local storage usage exceeds|exceeded its local ephemeral storage limit|"
                          r"Usage of EmptyDir volume .* exceeds the limit", re.IGNORECASE)
_NODE_PRESSURE = re.compile(r"The node (was|had been) low on resource", re.IGNORECASE)


def classify_pod(pod: dict[str, Any]) -> tuple[str, RolloutStatus | None, str]:
    """``(state, status, reason)`` of a pod dict: state ``pending`` / ``ready`` / ``running`` /
    ``done`` / ``failed``; for ``failed`` the rollout status it implies. ImagePullBackOff →
    env_error; evicted for going past its own ``ephemeral-storage`` (the rollout's ``disk_mb``: what
    the agent wrote) → policy_failure; other evictions / OOMKilled / node lost / preempted →
    infra_error; deadline → timeout."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    reason = status.get("reason") or ""
    message = status.get("message") or ""
    cstats = status.get("containerStatuses") or []
    for cs in cstats:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_ERRORS:
            return "failed", RolloutStatus.ENV_ERROR, (f"image {cs.get('image') or ''} cannot be used: "
                                                       f"{waiting['reason']}: {waiting.get('message', '')}").strip()
        term = (cs.get("state") or {}).get("terminated") or {}
        if term.get("reason") == "OOMKilled":
            return "failed", RolloutStatus.INFRA_ERROR, "the rollout pod was OOMKilled (memory limit)"
    if reason == "DeadlineExceeded":
        return "failed", RolloutStatus.TIMEOUT, f"the pod's activeDeadlineSeconds ran out: {message}".strip()
    if reason == "Evicted" and _OWN_STORAGE.search(message) and not _NODE_PRESSURE.search(message):
        return "failed", RolloutStatus.POLICY_FAILURE, f"the rollout's files went past its disk_mb: {message}".strip()
    if reason in ("Evicted", "Preempting", "NodeLost", "Shutdown", "NodeShutdown", "Terminated", "UnexpectedAdmissionError"):
        return "failed", RolloutStatus.INFRA_ERROR, f"the rollout pod was lost: {reason}: {message}".strip()
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return "failed", RolloutStatus.INFRA_ERROR, f"the rollout pod is being disrupted: {cond.get('reason', '')}"
    if phase == "Unknown":
        return "failed", RolloutStatus.INFRA_ERROR, "the node of the rollout pod was lost (phase Unknown)"
    if phase == "Failed":
        return "failed", RolloutStatus.INFRA_ERROR, f"the rollout pod failed: {reason or 'container exited'} {message}".strip()
    if phase == "Succeeded":
        return "done", RolloutStatus.INFRA_ERROR, "the pod's agent exited before the rollout ended"
    if phase == "Running":
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        return ("ready" if ready else "running"), None, ""
    return "pending", None, reason
