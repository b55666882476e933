"""The Kubernetes launcher: one pod per rollout, driven through the official ``kubernetes`` client.

Owns: :class:`KubernetesLauncher` (the pod itself, :class:`KubernetesSandbox`, is in ``k8s_sandbox``;
re-exported here). Manifests come from the pure
builders in ``k8s_manifests``; this module owns the client flow:

* creation is rate-limited (``creates_per_s``); each rollout gets a Secret (proxy API key + agent
  token) and a pod; one default-deny NetworkPolicy per run lets pods reach only the proxy;
* status comes from one **watch** per launcher (no polling loops), mapped by ``classify_pod``:
  ImagePullBackOff → ``env_error``; Evicted / OOMKilled / node lost → ``infra_error`` (the
  orchestrator retries those); ``activeDeadlineSeconds`` → ``timeout``. A pod lost mid-run sets
  ``sandbox.lost_status`` / ``lost_reason``, which ``run_rollout`` records;
* commands and files go to the in-pod agent through the API server's pod proxy
  (``pods/NAME:PORT/proxy``), so the driver needs no network route to pods; a task directory's
  verifier runs in the pod (``verifier_view``, ``_k8s_verify``), never on the driver, after the pod
  agent ended every process the agent left, in the same request; ``pull_workdir`` ends them too, then
  copies the pod's workdir out (tar, at most ``max_workdir_mb``) for the built-in environments'
  in-driver checks; ``logs()`` reads the container log;
* orphans — pods, Secrets and the NetworkPolicy labelled with this run id — are removed when the
  launcher starts and when it closes (and at interpreter exit); ``activeDeadlineSeconds`` bounds a
  pod whose driver was SIGKILLed;
* what the API server would refuse (422) is refused before sending (``k8s_checks``); what it answers
  is read back (``k8s_api``): the pod's resources by value, the NetworkPolicy's ports (spelled one by
  one where the server dropped ``endPort``), a missing ServiceAccount and 4xx refusals as clear,
  non-retried errors. See docs/kubernetes.md.

**Proxy exposure in-cluster**: run ``forge proxy serve --host 0.0.0.0`` (or the driver) behind a
ClusterIP Service and pass its in-cluster URL as ``proxy_url`` (e.g. ``http://openforge-proxy.ns.svc:8765``)
plus ``proxy_pod_labels`` / ``proxy_namespace`` (or ``proxy_cidr``) for the NetworkPolicy
(``allow_dns=True`` when the URL is a DNS name). See docs/kubernetes.md.

**Environment services** (``Sandbox.expose``: a task's ``[[services]]``, the claw mock services) are
published by the driver itself, on the same host as the proxy: a TCP listener per service on
``service_host`` (default: the proxy URL's host when it is an IP address, else ``0.0.0.0``) at a port
of ``service_ports`` (default ``18100-18299``), forwarding to the service's Unix socket; pods get
``http://<service_url_host>:PORT`` (default: the proxy URL's host). The NetworkPolicy lets the pods
reach that port range on the proxy's peer, nothing else. When the proxy sits behind a ClusterIP
Service, give that Service the same port range (or set ``service_url_host`` to a name that routes to
the driver).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..core.errors import ConfigError, SandboxError
from ..core.types import RolloutStatus
from ..util.extras import pip_install
from .base import Launcher, SandboxFailure, SandboxSpec
from .k8s_api import (
    apply_network_policy,
    check_resources,
    create_refused,
    delete_labelled,
    wait_service_account,
)
from .k8s_checks import check_launcher_options, ip_literal
from .k8s_manifests import (
    PodLayout,
    PodResources,
    _k8s_name,
    build_network_policy,
    build_pod_manifest,
    build_secret,
)
from .k8s_sandbox import KubernetesSandbox, _sandbox_error

__all__ = ["KubernetesLauncher", "KubernetesSandbox"]
log = logging.getLogger(__name__)


def _port_range(spec: Any) -> tuple[int, int]:
    """``"18100-18299"`` / ``(18100, 18299)`` → (first, last); a clear error otherwise."""
    try:
        first, last = (int(x) for x in (spec.split("-") if isinstance(spec, str) else spec))
    except (TypeError, ValueError):
        raise SandboxError(f"service_ports must be FIRST-LAST (e.g. 18100-18299), got {spec!r}") from None
    if not 0 < first <= last < 65536:
        raise SandboxError(f"service_ports {first}-{last} is not a port range")
    return first, last


class KubernetesLauncher(Launcher):
    """One pod per rollout. Options (all may be given as strings, e.g. ``--launcher-opt``):
    ``namespace``, ``image``, ``kubeconfig``, ``context``, ``host`` (API server URL, no auth — tests),
    ``run_id``, ``proxy_url`` (in-cluster URL of the proxy), ``proxy_cidr`` / ``proxy_pod_labels``
    (``k=v,k=v``) / ``proxy_namespace`` / ``allow_dns`` (NetworkPolicy), ``network_policy``,
    ``creates_per_s``, ``ready_timeout_s``, ``workdir`` / ``home`` (``{pod}`` is replaced by the
    pod name), ``service_account``, ``service_ports`` (``FIRST-LAST``) / ``service_host`` /
    ``service_url_host`` (where environment services are published: see the module docstring),
    ``max_workdir_mb`` (the most ``pull_workdir`` copies out of a pod, packed or unpacked; 1024),
    ``service_account_wait_s`` (how long a new namespace may take to get its ServiceAccount).
    Options the API server would refuse (names, labels, addresses, ``workdir`` == ``home``) raise
    ConfigError here, before anything is sent."""

    name = "kubernetes"

    def __init__(self, *, namespace: str = "default", image: str = "python:3.11-slim", kubeconfig: str | None = None,
                 context: str | None = None, host: str | None = None, run_id: str | None = None,
                 proxy_url: str | None = None, proxy_cidr: str | None = None, proxy_pod_labels: Any = None,
                 proxy_namespace: str | None = None, allow_dns: Any = False, network_policy: Any = True,
                 creates_per_s: Any = 5.0, ready_timeout_s: Any = 300.0, workdir: str = "/work",
                 home: str = "/home/agent", service_account: str | None = None, api_client: Any = None,
                 service_ports: Any = "18100-18299", service_host: str | None = None,
                 service_url_host: str | None = None, max_workdir_mb: Any = 1024,
                 service_account_wait_s: Any = 10.0):
        try:
            from kubernetes import client, config
        except ImportError as e:  # pragma: no cover - the k8s extra is missing
            raise SandboxError(f"the kubernetes launcher needs the `kubernetes` package: {pip_install('k8s')}") from e
        if api_client is None:
            if host:
                cfg = client.Configuration()
                cfg.host = host.rstrip("/")
                api_client = client.ApiClient(cfg)
            else:
                try:
                    try:
                        config.load_incluster_config()
                        api_client = client.ApiClient()
                    except config.ConfigException:
                        api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
                except Exception as e:
                    raise SandboxError(f"no Kubernetes cluster configured ({e}); set KUBECONFIG or pass host=") from e
        check_launcher_options(namespace=namespace, service_account=service_account, proxy_pod_labels=proxy_pod_labels,
                               proxy_namespace=proxy_namespace, proxy_cidr=proxy_cidr, proxy_url=proxy_url,
                               workdir=workdir, home=home)
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.net = client.NetworkingV1Api(api_client)
        self.namespace, self.image = namespace, image
        self.run_id = _k8s_name(run_id or f"openforge-{socket.gethostname()}")
        self.proxy_url = proxy_url
        self.proxy_cidr, self.proxy_namespace = proxy_cidr, proxy_namespace
        self.proxy_pod_labels = (dict(kv.split("=", 1) for kv in proxy_pod_labels.split(",") if kv)
                                 if isinstance(proxy_pod_labels, str) else proxy_pod_labels)
        self.allow_dns = str(allow_dns).lower() in ("1", "true", "yes")
        self.network_policy = str(network_policy).lower() not in ("0", "false", "no")
        self.service_account_wait_s = float(service_account_wait_s)
        self.creates_per_s = float(creates_per_s)
        self.ready_timeout_s = float(ready_timeout_s)
        self.workdir, self.home, self.service_account = workdir, home, service_account
        self.service_ports = _port_range(service_ports)
        self.service_host, self.service_url_host = service_host, service_url_host
        self._service_ports_used: set[int] = set()
        self.max_workdir_mb = int(max_workdir_mb)
        self._pods: dict[str, dict[str, Any]] = {}  # name -> latest pod dict (from the watch)
        self._waiters: dict[str, asyncio.Event] = {}
        self._owned: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watch_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = False
        self._policy_done = False
        self._next_create = 0.0
        self._create_lock = asyncio.Lock()
        self._policy_lock = asyncio.Lock()  # concurrent first starts: one policy, in place before any pod
        atexit.register(self._cleanup_sync)

    # -- cluster plumbing ----------------------------------------------------------------------

    def _selector(self) -> str:
        return f"app.kubernetes.io/managed-by=openforge,openforge.dev/run={self.run_id}"

    def _mine(self, obj: Any) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return labels.get("openforge.dev/run") == self.run_id and labels.get("app.kubernetes.io/managed-by") == "openforge"

    def remove_orphans(self) -> list[str]:
        """Delete this run's pods, Secrets and NetworkPolicy (label selector, re-checked client-side)."""
        removed = delete_labelled(self.core, self.net if self.network_policy else None, self.namespace,
                                  self._selector(), self._mine, self.api.sanitize_for_serialization)
        self._policy_done = False
        return removed

    def _watch_loop(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(self.core.list_namespaced_pod, self.namespace, label_selector=self._selector(),
                                   timeout_seconds=60, _request_timeout=5):
                    if self._stop.is_set():
                        w.stop()
                        break
                    obj = ev["object"]
                    pod = obj if isinstance(obj, dict) else self.api.sanitize_for_serialization(obj)
                    if not self._mine(pod):
                        continue
                    name = pod["metadata"]["name"]
                    if ev["type"] == "DELETED":
                        pod = {**pod, "status": {**(pod.get("status") or {}), "phase": "Failed", "reason": "Terminated",
                                                 "message": "the pod was deleted"}}
                    if self._loop is not None:
                        self._loop.call_soon_threadsafe(self._on_pod, name, pod)
            except Exception as e:  # a read timeout ends an idle stream; re-watch
                if not self._stop.is_set() and "timed out" not in str(e).lower():
                    log.debug("kubernetes watch restarted: %s", e)
                    time.sleep(0.2)

    def _on_pod(self, name: str, pod: dict[str, Any]) -> None:
        self._pods[name] = pod
        ev = self._waiters.get(name)
        if ev is not None:
            ev.set()

    async def _ensure_started(self) -> None:
        if self._started:
            return
        self._started = True
        self._loop = asyncio.get_running_loop()
        removed = await asyncio.to_thread(self.remove_orphans)
        await asyncio.to_thread(wait_service_account, self.core, self.namespace, self.service_account or "default",
                                self.service_account_wait_s)
        if removed:
            log.warning("kubernetes launcher: removed %d orphaned objects of run %s", len(removed), self.run_id)
        self._watch_thread = threading.Thread(target=self._watch_loop, daemon=True, name="openforge-k8s-watch")
        self._watch_thread.start()

    async def _rate_limit(self) -> None:
        async with self._create_lock:
            now = time.monotonic()
            wait = self._next_create - now
            if wait > 0:
                await asyncio.sleep(wait)
            self._next_create = max(now, self._next_create) + 1.0 / self.creates_per_s

    async def _ensure_policy(self, spec: SandboxSpec) -> None:
        async with self._policy_lock:
            await self._apply_policy(spec)

    async def _apply_policy(self, spec: SandboxSpec) -> None:
        if not self.network_policy or self._policy_done:
            return
        cidr, labels = self.proxy_cidr, self.proxy_pod_labels
        url = urlparse(self.proxy_url or spec.proxy_url)
        if not cidr and not labels:
            try:
                ip = ip_literal(url.hostname or "", "the host of the proxy URL")
            except ConfigError as e:
                raise SandboxFailure(str(e), RolloutStatus.ENV_ERROR) from None
            if ip is None:
                log.warning("kubernetes launcher: no proxy_cidr / proxy_pod_labels; NOT creating a NetworkPolicy")
                self._policy_done = True
                return
            cidr = str(ip)

        def policy(port_ranges: bool = True) -> dict[str, Any]:
            return build_network_policy(name=_k8s_name(f"{self.run_id}-egress"), namespace=self.namespace,
                                        run_id=self.run_id, proxy_port=url.port or 80, proxy_cidr=cidr,
                                        proxy_pod_labels=labels, proxy_namespace=self.proxy_namespace,
                                        allow_dns=self.allow_dns, service_ports=self.service_ports,
                                        port_ranges=port_ranges)

        await asyncio.to_thread(apply_network_policy, self.net, self.namespace, policy(), lambda: policy(False),
                                self.api.sanitize_for_serialization)
        self._policy_done = True

    # -- Launcher API --------------------------------------------------------------------------

    async def start(self, spec: SandboxSpec) -> KubernetesSandbox:
        await self._ensure_started()
        await self._ensure_policy(spec)
        await self._rate_limit()
        pod = _k8s_name(f"of-{spec.rollout_id}")
        token = secrets.token_urlsafe(24)
        task = spec.task
        deadline = int(task.timeout_s + task.setup_timeout_s + task.verify_timeout_s + 120)
        workdir, home = self.workdir.replace("{pod}", pod), self.home.replace("{pod}", pod)
        proxy_url = self.proxy_url or spec.proxy_url
        try:
            manifest = build_pod_manifest(
                name=pod, namespace=self.namespace, image=task.image or self.image, rollout_id=spec.rollout_id,
                run_id=self.run_id, task_id=task.id, secret_name=pod, proxy_url=proxy_url, env=spec.env,
                resources=PodResources(cpu=task.resources.cpu, memory_mb=task.resources.memory_mb, deadline_s=deadline,
                                       disk_mb=task.resources.disk_mb),
                layout=PodLayout(workdir=workdir, home=home), service_account=self.service_account)
        except ConfigError as e:  # the server would answer 422: not worth a pod, nor a retry
            raise SandboxFailure(f"pod {pod} for task {task.id}: {e}", RolloutStatus.ENV_ERROR) from None
        self._waiters[pod] = asyncio.Event()
        self._owned.add(pod)
        sbx = KubernetesSandbox(self, spec, pod, token, Path(workdir), Path(home), proxy_url)
        try:
            await self._create(f"Secret {pod}", self.core.create_namespaced_secret, build_secret(
                name=pod, namespace=self.namespace, run_id=self.run_id, api_key=spec.api_key, agent_token=token))
            created = await self._create(f"pod {pod}", self.core.create_namespaced_pod, manifest)
            check_resources(pod, manifest, self.api.sanitize_for_serialization(created))
            await sbx._wait_ready(self.ready_timeout_s)
        except BaseException as e:
            await sbx.close()
            if isinstance(e, SandboxError):
                raise
            if isinstance(e, Exception):
                raise _sandbox_error(f"cannot create pod {pod}: {e}", RolloutStatus.INFRA_ERROR) from e
            raise
        return sbx

    async def _create(self, what: str, create: Any, body: dict[str, Any]) -> Any:
        try:
            return await asyncio.to_thread(create, self.namespace, body)
        except Exception as e:
            raise create_refused(e, what, self.namespace, self.service_account) from e

    async def aclose(self) -> None:
        for pod in list(self._owned):
            await asyncio.to_thread(self._delete, pod)
        await asyncio.to_thread(self.remove_orphans)
        self._stop.set()

    def _delete(self, pod: str) -> None:
        for fn in (self.core.delete_namespaced_pod, self.core.delete_namespaced_secret):
            with contextlib.suppress(Exception):
                fn(pod, self.namespace, grace_period_seconds=0)
        self._owned.discard(pod)

    def _cleanup_sync(self) -> None:
        for pod in list(self._owned):
            self._delete(pod)
        if self._started and not self._stop.is_set():  # aclose() was not called: its NetworkPolicy too
            with contextlib.suppress(Exception):
                self.remove_orphans()
        self._stop.set()
