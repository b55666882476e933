"""A rollout's pod, as a :class:`~openforge.launchers.base.Sandbox`: readiness from the launcher's watch,
commands and files through the in-pod agent (the API server's pod proxy), the workdir copied out,
environment services published by the driver. Built by
:meth:`~openforge.launchers.kubernetes.KubernetesLauncher.start`; the flow is described in
:mod:`openforge.launchers.kubernetes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlparse

from ..core.errors import ConfigError, SandboxError, SandboxFileNotFound, SandboxFileRefused
from ..core.types import RolloutStatus
from ._hostile_read import DEFAULT_MAX_BYTES
from ._k8s_verify import extract_capped, pod_verifier_view, read_capped
from ._verifier import WorkdirTooLarge
from .base import ExecResult, Sandbox, SandboxFailure, SandboxSpec, VerifierView
from .k8s_checks import ip_literal
from .k8s_manifests import (
    AGENT_PORT,
    classify_pod,
)

__all__ = ["KubernetesSandbox", "PodHost"]
log = logging.getLogger("openforge.launchers.kubernetes")


def _sandbox_error(msg: str, status: RolloutStatus) -> SandboxFailure:
    return SandboxFailure(msg, status)  # its status is read by run_rollout


def _error_of(data: bytes) -> str:
    try:
        return str(json.loads(data)["error"])
    except (ValueError, KeyError, TypeError):
        return repr(data[:300])


class PodHost(Protocol):
    """What a rollout pod's sandbox uses of the launcher that made it (the typed seam:
    :class:`~openforge.launchers.kubernetes.KubernetesLauncher` satisfies it; this module does not import
    it, so the launcher → sandbox dependency stays one way)."""

    namespace: str
    api: Any  # kubernetes.client.ApiClient (an optional dependency, imported lazily)
    core: Any  # kubernetes.client.CoreV1Api
    service_host: str | None
    service_url_host: str | None
    service_ports: tuple[int, int]
    max_workdir_mb: int
    _pods: dict[str, dict[str, Any]]  # pod name -> the latest pod the watch saw
    _waiters: dict[str, asyncio.Event]  # pod name -> set on each watch event for it
    _service_ports_used: set[int]

    def _delete(self, pod: str) -> None: ...


class KubernetesSandbox(Sandbox):
    """A rollout pod. ``workdir`` / ``home`` are paths *inside the pod*; ``pull_workdir`` gives a
    local copy for file-based verifiers."""

    isolation = "pod"

    def __init__(self, launcher: PodHost, spec: SandboxSpec, pod: str, token: str, workdir: Path,
                 home: Path, proxy_url: str):
        self.launcher, self.spec, self.pod, self.token = launcher, spec, pod, token
        self.workdir, self.home, self.proxy_url = workdir, home, proxy_url.rstrip("/")
        self.lost_status: RolloutStatus | None = None
        self.lost_reason: str | None = None
        self._local: Path | None = None
        self._closed = False
        self._published: list[tuple[int, asyncio.AbstractServer]] = []

    async def _wait_ready(self, timeout_s: float) -> None:
        la = self.launcher
        deadline = time.monotonic() + timeout_s
        while True:
            ev = la._waiters[self.pod]
            pod = la._pods.get(self.pod)
            if pod is not None:
                state, status, reason = classify_pod(pod)
                if state == "ready":
                    return
                if status is not None:
                    raise _sandbox_error(f"pod {self.pod}: {reason}", status)
            left = deadline - time.monotonic()
            if left <= 0:
                raise _sandbox_error(f"pod {self.pod} was not ready within {timeout_s:.0f}s "
                                     f"({classify_pod(pod or {})[2] or 'Pending'})", RolloutStatus.INFRA_ERROR)
            ev.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ev.wait(), left)

    def _check_lost(self) -> bool:
        pod = self.launcher._pods.get(self.pod)
        if pod is not None and self.lost_status is None:
            state, status, reason = classify_pod(pod)
            if state in ("failed", "done"):
                self.lost_status, self.lost_reason = status or RolloutStatus.INFRA_ERROR, reason
        return self.lost_status is not None

    async def _await_loss(self, within_s: float) -> bool:
        """Wait up to ``within_s`` for the watch to report the pod failed; True if it did."""
        deadline = time.monotonic() + within_s
        ev = self.launcher._waiters.get(self.pod)
        while not self._check_lost() and ev is not None and (left := deadline - time.monotonic()) > 0:
            ev.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ev.wait(), left)
        return self.lost_status is not None

    def _call(self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None,
              timeout: float = 60.0, max_bytes: int | None = None, what: str = "a reply",
              agents: bool = False) -> tuple[int, bytes]:
        la = self.launcher
        q = ("?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in query.items())) if query else ""
        headers = {"X-Openforge-Token": self.token}
        if body is not None:  # the client serialises JSON bodies only
            headers["Content-Type"] = "application/json"
        m, url, hdrs, ser_body, _ = la.api.param_serialize(
            method, "/api/v1/namespaces/{namespace}/pods/{name}/proxy/{path}",
            path_params={"namespace": la.namespace, "name": f"{self.pod}:{AGENT_PORT}", "path": path},
            header_params=headers, body=body, auth_settings=["BearerToken"])
        resp = la.api.call_api(m, url + q, header_params=hdrs, body=ser_body, _request_timeout=timeout)
        if max_bytes is not None:  # streamed, never more than max_bytes in memory
            return resp.status, read_capped(resp.response, max_bytes, what, agents=agents)
        resp.read()
        return resp.status, resp.data

    async def _agent(self, method: str, path: str, **kw: Any) -> tuple[int, bytes]:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        call = asyncio.ensure_future(asyncio.to_thread(self._call, method, path, **kw))
        ev = self.launcher._waiters.get(self.pod)
        while not call.done():
            if self._check_lost():
                call.cancel()
                raise _sandbox_error(f"pod {self.pod} lost: {self.lost_reason}", self.lost_status or RolloutStatus.INFRA_ERROR)
            if ev is None:
                await call
                break
            ev.clear()
            waiter = asyncio.ensure_future(ev.wait())
            await asyncio.wait({call, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        try:
            return call.result()
        except (SandboxFailure, WorkdirTooLarge):  # a reply over its size limit: it says what it means
            raise
        except Exception as e:
            if await self._await_loss(5.0):
                raise _sandbox_error(f"pod {self.pod} lost: {self.lost_reason}", self.lost_status or RolloutStatus.INFRA_ERROR) from e
            raise SandboxError(f"pod {self.pod}: agent call {path} failed: {e}") from e

    async def exec(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                   timeout_s: float | None = None, stdin: bytes | None = None) -> ExecResult:
        budget = timeout_s if timeout_s is not None else self.spec.task.timeout_s
        req = self._exec_request(argv, {"HOME": str(self.home), **self.spec.env, **(env or {})}, cwd, budget, stdin)
        return await self._run("exec", req, budget + 30)

    async def verify_exec(self, argv: Sequence[str], *, base: str, packed: bytes | None, digest: str,
                          env: Mapping[str, str], cwd: str | Path, timeout_s: float | None,
                          stdin: bytes | None = None) -> ExecResult:
        """Run a verifier's command as the pod agent's one verifier step (``POST /verify``): end every
        process of the agent, unpack ``packed`` (a gzip tar; the first command only) into ``base``, check
        that tree against ``digest``, run ``argv`` with exactly ``env``. A refused step (a process that
        would not die, files that differ) is a :class:`SandboxFailure` with ``env_error``."""
        import base64

        budget = timeout_s if timeout_s is not None else self.spec.task.timeout_s
        req = {**self._exec_request(argv, dict(env), cwd, budget, stdin), "base": base, "digest": digest,
               "tar_b64": base64.b64encode(packed).decode() if packed is not None else None}
        return await self._run("verify", req, budget + 150)

    def _exec_request(self, argv: Sequence[str], env: dict[str, str], cwd: str | Path | None, budget: float,
                      stdin: bytes | None) -> dict[str, Any]:
        import base64

        return {"argv": list(argv), "env": env, "cwd": str(cwd or self.workdir), "timeout_s": budget, "grace_s": 2.0,
                "stdin_b64": base64.b64encode(stdin).decode() if stdin is not None else None}

    async def _run(self, route: str, req: dict[str, Any], timeout: float) -> ExecResult:
        t0 = time.monotonic()
        try:
            code, data = await self._agent("POST", route, body=req, timeout=timeout)
        except SandboxError as e:
            if self.lost_status is None:
                raise
            return ExecResult(None, "", str(e), time.monotonic() - t0, timed_out=self.lost_status == RolloutStatus.TIMEOUT)
        if code == 409 and route == "verify":  # the pod agent refused the verifier's step, and says why
            raise _sandbox_error(f"the verifier cannot run in pod {self.pod}: {_error_of(data)}", RolloutStatus.ENV_ERROR)
        if code != 200:
            # The API server answers 5xx when the pod dies under the call; the watch says why.
            if await self._await_loss(5.0):
                return ExecResult(None, "", f"pod {self.pod} lost: {self.lost_reason}", time.monotonic() - t0,
                                  timed_out=self.lost_status == RolloutStatus.TIMEOUT)
            raise SandboxError(f"pod {self.pod}: {route} refused ({code}): {data[:300]!r}")
        r = json.loads(data)
        return ExecResult(r["returncode"], r["stdout"], r["stderr"], r["duration_s"], timed_out=r["timed_out"],
                          oom_kills=int(r.get("oom_kills") or 0))

    def _abs(self, path: str | Path) -> str:
        p = Path(path)
        return str(p if p.is_absolute() else self.workdir / p)

    async def read_file(self, path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
        """See :meth:`Sandbox.read_file`: the pod agent reads it with the driver's checks
        (``_hostile_read``), from the parent of the workdir (or of home) down, following nothing."""
        full = self._abs(path)
        code, data = await self._agent("GET", "file", query={"path": full, "root": self._read_root(full),
                                                             "max_bytes": str(max_bytes)},
                                       max_bytes=max_bytes + 4096, what=f"the reply for {path}")
        if code == 404 and b'"missing": true' in data:
            raise SandboxFileNotFound(f"no file {path} in pod {self.pod} (the agent did not write it)", str(path))
        if code == 403 and b'"refused": true' in data:
            why = str(json.loads(data).get("error", "refused"))
            raise SandboxFileRefused(f"refused to read {path} in pod {self.pod}: {why}", str(path), why)
        if code != 200:
            raise SandboxError(f"cannot read {path} in pod {self.pod}: {data[:200]!r}")
        return data

    def _read_root(self, full: str) -> str:
        """Where the pod agent's walk starts: the parent of the workdir or home holding ``full`` (so a
        workdir swapped for a link is refused too), else ``full``'s own directory."""
        for base in (self.workdir, self.home):
            if full == str(base) or full.startswith(str(base).rstrip("/") + "/"):
                return str(base.parent)
        return os.path.dirname(full)

    async def write_file(self, path: str | Path, data: bytes, mode: int = 0o644) -> None:
        import base64

        code, resp = await self._agent("PUT", "file", query={"path": self._abs(path), "mode": str(mode)},
                                       body={"data_b64": base64.b64encode(bytes(data)).decode()})
        if code != 200:
            raise SandboxError(f"cannot write {path} in pod {self.pod}: {resp[:200]!r}")

    async def verifier_view(self, ro_paths: Sequence[str]) -> VerifierView:
        """The verifier runs in this pod, not on the driver, once every process of the agent has ended
        (``_k8s_verify``)."""
        return await pod_verifier_view(self, ro_paths)

    async def end_agent(self) -> None:
        """End every process the agent left in the pod (``POST /end``): what a verifier reads then stays
        as the agent left it. A pod agent that cannot is a :class:`SandboxFailure` with ``env_error``."""
        code, data = await self._agent("POST", "end", body={}, timeout=60)
        if code != 200:
            raise _sandbox_error(f"cannot end the agent's processes in pod {self.pod}: {_error_of(data)}",
                                 RolloutStatus.ENV_ERROR)

    async def pull_workdir(self) -> Path:
        """A local copy of the pod's workdir, at most ``max_workdir_mb`` (packed and unpacked); more is
        :class:`~openforge.launchers._verifier.WorkdirTooLarge`, the agent's failure (``policy_failure``). Called by verifiers, after the agent stopped: every
        process the agent left is ended first (:meth:`end_agent`), so the copy, and any command a check
        runs in the pod afterwards, sees the workdir as the agent left it."""
        await self.end_agent()
        limit = self.launcher.max_workdir_mb << 20
        what = f"the workdir of pod {self.pod}"
        code, data = await self._agent("GET", "tar", query={"path": str(self.workdir)}, timeout=300,
                                       max_bytes=limit, what=f"{what} (as sent)", agents=True)
        if code != 200:
            raise SandboxError(f"cannot copy the workdir out of pod {self.pod}: {data[:200]!r}")
        if self._local is None:
            self._local = Path(tempfile.mkdtemp(prefix=f"openforge-{self.pod}-"))
        dest = self._local / "work"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        await asyncio.to_thread(functools.partial(extract_capped, data, dest, limit, f"{what} (unpacked)", agents=True))
        return dest

    async def expose(self, uds_path: str | Path, *, port: int | None = None) -> str:
        """Publish a host Unix-socket service to the pod (see the module docstring)."""
        from ._fwd import bridge, to_unix

        la, sock = self.launcher, str(uds_path)
        proxy_host = urlparse(self.proxy_url).hostname or "127.0.0.1"
        try:
            is_ip = ip_literal(proxy_host, "the host of the proxy URL") is not None
        except ConfigError as e:
            raise SandboxError(str(e)) from None
        bind = la.service_host or (proxy_host if is_ip else "0.0.0.0")

        handle = bridge(to_unix(sock))
        first, last = la.service_ports
        for p in ([port] if port else range(first, last + 1)):
            if p in la._service_ports_used:
                continue
            try:
                server = await asyncio.start_server(handle, bind, p)
            except OSError:
                continue
            la._service_ports_used.add(p)
            self._published.append((p, server))
            return f"http://{la.service_url_host or proxy_host}:{p}"
        raise SandboxError(f"no free port in service_ports {first}-{last} on {bind} to publish a service for pod {self.pod}")

    async def logs(self) -> str:
        return await asyncio.to_thread(self.launcher.core.read_namespaced_pod_log, self.pod, self.launcher.namespace)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for p, server in self._published:
            server.close()
            self.launcher._service_ports_used.discard(p)
        self._published.clear()
        await asyncio.to_thread(self.launcher._delete, self.pod)
        self.launcher._waiters.pop(self.pod, None)
        self.launcher._pods.pop(self.pod, None)
        if self._local is not None:
            shutil.rmtree(self._local, ignore_errors=True)
