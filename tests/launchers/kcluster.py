"""An emulated cluster for the Kubernetes launcher tests: kmock's API server (driven by the real
``kubernetes`` client) plus a small fake kubelet that really runs each pod's command — the in-pod
agent — as a local process (the first of a pid namespace of its own, in the container's
``workingDir``), and the API server's pod-proxy route forwarding to it.

Not a test module. The kubelet can also fail pods the way real nodes do (ImagePullBackOff for images
under ``missing/``, eviction, deadline) by patching their status through the API.

The API server is kmock's emulator made stricter where a real server (seen against v1.20.2) differs
and it is cheap to mimic (:class:`StrictEmulator`): quantities are stored canonical (``1000m`` → ``1``),
invalid object names / env names / label values / duplicate mount paths / IP blocks are answered with 422, pods
are refused (403) in a namespace without the ServiceAccount they run as, and ``drop_end_port``
makes it store NetworkPolicies without ``endPort`` the way servers before v1.21 do. These checks are
its own (not openforge's), so they catch what openforge's checks miss."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import kmock

#: Each pod's command runs as the first process of a pid namespace of its own, with its own /proc, as in
#: a real pod (the pod agent's verifier step relies on it); a non-root user maps itself to root for it.
POD_NAMESPACE = ["unshare", *(["--user", "--map-root-user"] if os.geteuid() else []), "--pid", "--fork",
                 "--kill-child", "--mount-proc"]
PROXY_RE = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/:]+):(\d+)/proxy/(.*)")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _canonical(kind: str, q: str) -> str:
    from kubernetes.utils import parse_quantity

    v = parse_quantity(q)
    if kind == "cpu":
        return str(int(v)) if v == int(v) else f"{int(v * 1000)}m"
    for suffix, scale in (("Gi", 2 ** 30), ("Mi", 2 ** 20), ("Ki", 2 ** 10)):
        if v % scale == 0:
            return f"{int(v // scale)}{suffix}"
    return str(q)


def _invalid(obj: dict[str, Any]) -> list[str]:
    """What a real API server answers 422 for (the subset openforge's objects can hit)."""
    bad: list[str] = []
    name = (obj.get("metadata") or {}).get("name") or ""
    if not (len(name) <= 253 and DNS_SUBDOMAIN.fullmatch(name)):
        bad.append(f"metadata.name: Invalid value: {name!r}")
    labels = dict((obj.get("metadata") or {}).get("labels") or {})
    spec = obj.get("spec") or {}
    labels.update((spec.get("podSelector") or {}).get("matchLabels") or {})
    bad += [f"metadata.labels: Invalid value: {v!r}" for v in labels.values()
            if not (len(v) <= 63 and LABEL_VALUE.fullmatch(v))]
    for c in spec.get("containers") or []:
        bad += [f"env[].name: Invalid value: {e['name']!r}" for e in c.get("env") or [] if not ENV_NAME.fullmatch(e["name"])]
        paths = [m["mountPath"] for m in c.get("volumeMounts") or []]
        bad += [f"volumeMounts.mountPath: Invalid value: {p!r}: must be unique" for p in set(paths) if paths.count(p) > 1]
    for rule in spec.get("egress") or []:
        for peer in rule.get("to") or []:
            cidr = (peer.get("ipBlock") or {}).get("cidr")
            try:
                if cidr is not None:
                    ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                bad.append(f"ipBlock.cidr: Invalid value: {cidr!r}")
    return bad


class StrictEmulator(kmock.KubernetesEmulator):
    """kmock's emulator, refusing and rewriting like a real API server (see the module docstring)."""

    drop_end_port = False
    rewrite_limits: dict[str, str] | None = None  # like a mutating webhook / LimitRange

    async def _handle(self, request: kmock.Request) -> Any:
        data = request.data
        if (request.resource is not None and request.action in (kmock.action.CREATE, kmock.action.UPDATE)
                and isinstance(data, dict) and data.get("kind")):
            bad = _invalid(data)
            if bad:
                return await self._render_error(kmock.KubernetesError(
                    status=422, reason="Invalid", message=f"{data['kind']} is invalid: {'; '.join(bad)}"))
            if data["kind"] == "Pod" and request.action == kmock.action.CREATE:
                sa = data["spec"].get("serviceAccountName") or "default"
                ns = request.namespace or data["metadata"].get("namespace")
                if not [o for o in self.objects.values() if o.get("kind") == "ServiceAccount" and not o.deleted
                        and o["metadata"]["name"] == sa and o["metadata"].get("namespace") == ns]:
                    return await self._render_error(kmock.KubernetesError(
                        status=403, reason="Forbidden", message=f'pods "{data["metadata"]["name"]}" is forbidden: error '
                        f'looking up service account {ns}/{sa}: serviceaccount "{sa}" not found'))
            for c in (data.get("spec") or {}).get("containers") or []:
                for q in ((c.get("resources") or {}).get("limits"), (c.get("resources") or {}).get("requests")):
                    for k in q or {}:
                        q[k] = _canonical(k, q[k])
                if self.rewrite_limits and (c.get("resources") or {}).get("limits"):
                    c["resources"]["limits"].update(self.rewrite_limits)
            if self.drop_end_port:
                for rule in (data.get("spec") or {}).get("egress") or []:
                    for port in rule.get("ports") or []:
                        port.pop("endPort", None)
        return await super()._handle(request)


class Cluster:
    def __init__(self) -> None:
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.ports: dict[str, int] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.seen: set[str] = set()
        self.evict_after: dict[str, float] = {}  # task label -> seconds after ready (first pod of that task only)
        self._evicted_tasks: set[str] = set()
        self.stopping = threading.Event()

    # -- the API server ------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        import httpx

        self.stop = asyncio.Event()
        async with StrictEmulator() as h, kmock.Server(h) as srv, httpx.AsyncClient() as http:
            h.resources.load_bundled()

            async def pod_proxy(req: kmock.Request) -> Any:
                m = PROXY_RE.match(req.url.path)
                port = self.ports.get(m.group(2)) if m else None
                if port is None:
                    return kmock.Response(status=503, payload={"kind": "Status", "message": "no endpoints"})
                r = await http.request(str(req.method.value if hasattr(req.method, "value") else req.method).upper(),
                                       f"http://127.0.0.1:{port}/{m.group(4)}", params=dict(req.params),
                                       content=req.body, headers={k: v for k, v in req.headers.items()
                                                                  if k.lower() in ("x-openforge-token", "content-type")},
                                       timeout=600)
                return kmock.Response(status=r.status_code, payload=r.content)

            h[PROXY_RE] << pod_proxy
            h[re.compile(r"/api/v1/namespaces/[^/]+/pods/[^/]+/log")] << (lambda req: kmock.Response(
                status=200, headers={"Content-Type": "text/plain"},
                payload=f"agent of {req.url.path.split('/')[-2]} listening\n".encode()))
            self.handler, self.url = h, str(srv.url).rstrip("/")
            self.ready.set()
            await self.stop.wait()

    def __enter__(self) -> Cluster:
        threading.Thread(target=self._run, daemon=True).start()
        assert self.ready.wait(20), "kmock did not start"
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.core.create_namespaced_service_account("default", {  # what a controller manager would do
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "default"}})
        threading.Thread(target=self._kubelet, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for name in list(self.procs):
            self._kill(name)
        self.loop.call_soon_threadsafe(self.stop.set)

    # -- the kubelet ---------------------------------------------------------------------------
    def _kubelet(self) -> None:
        from kubernetes import watch

        while not self.stopping.is_set():
            try:
                for ev in watch.Watch().stream(self.core.list_namespaced_pod, "default", _request_timeout=2):
                    pod = self.api.sanitize_for_serialization(ev["object"])
                    name = pod["metadata"]["name"]
                    if ev["type"] == "DELETED":
                        self._kill(name)
                    elif name not in self.seen:
                        self.seen.add(name)
                        threading.Thread(target=self._start_pod, args=(pod,), daemon=True).start()
            except Exception:
                time.sleep(0.05)

    def _status(self, name: str, status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(name, "default", {"status": status})

    def _start_pod(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        c = pod["spec"]["containers"][0]
        if c["image"].startswith("missing/"):
            self._status(name, {"phase": "Pending", "containerStatuses": [{
                "name": "rollout", "image": c["image"], "ready": False, "restartCount": 0, "imageID": "",
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{c["image"]}"'}}}]})
            return
        env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            else:
                ref = e["valueFrom"]["secretKeyRef"]
                try:
                    sec = self.api.sanitize_for_serialization(self.core.read_namespaced_secret(ref["name"], "default"))
                except Exception:  # like a kubelet: CreateContainerConfigError, the pod stays pending
                    return
                if "stringData" in sec:
                    env[e["name"]] = sec["stringData"][ref["key"]]
                else:
                    import base64

                    env[e["name"]] = base64.b64decode(sec["data"][ref["key"]]).decode()
        argv = [sys.executable if a == "python3" else a for a in c["command"]] + ["--port", "0", "--host", "127.0.0.1"]
        if c.get("workingDir"):  # a kubelet creates it
            os.makedirs(c["workingDir"], exist_ok=True)
        proc = subprocess.Popen([*POD_NAMESPACE, *argv], env=env, stdout=subprocess.PIPE, start_new_session=True,
                                text=True, cwd=c.get("workingDir"))
        self.procs[name] = proc
        line = proc.stdout.readline() if proc.stdout else ""
        self.ports[name] = int(line.split()[1])
        self._status(name, {"phase": "Running", "podIP": "127.0.0.1",
                            "conditions": [{"type": "Ready", "status": "True"}]})
        task = pod["metadata"]["labels"].get("openforge.dev/task", "")
        if task in self.evict_after and task not in self._evicted_tasks:
            self._evicted_tasks.add(task)
            threading.Timer(self.evict_after[task], self.evict, args=(name,)).start()

    def _kill(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        self.ports.pop(name, None)
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()

    def evict(self, name: str) -> None:
        self._kill(name)
        self._status(name, {"phase": "Failed", "reason": "Evicted",
                            "message": "The node was low on resource: memory."})

    def deadline(self, name: str) -> None:
        self._kill(name)
        self._status(name, {"phase": "Failed", "reason": "DeadlineExceeded",
                            "message": "Pod was active on the node longer than the specified deadline"})

    def pods(self) -> list[str]:
        return [p.metadata.name for p in self.core.list_namespaced_pod("default").items]
