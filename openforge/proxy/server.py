"""Running the proxy: :class:`ProxyServer` serves the ASGI app with uvicorn inside the current event
loop, on TCP and/or a Unix-domain socket, and is the in-process API the orchestrator and trainers call.

Owns: :class:`ProxyServer`.

::

    async with ProxyServer(backend, store=store) as proxy:
        h = proxy.create_rollout("task-1", harness="codex")     # id, api_key, base URLs
        ...  # run the harness against h.openai_base_url / h.anthropic_base_url / h.gemini_base_url
        traj = proxy.finish_rollout(h.rollout_id, reward=1.0)    # segments built and validated
        await proxy.pause(); ...update weights...; await proxy.resume()
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

from ..core.call_origin import TrainCalls
from ..core.errors import ConfigError
from ..core.outcome import OutcomeFacts
from ..core.trajectory import Trajectory
from ..core.types import RolloutStatus
from ..util.serving import embedded_server
from .app import build_app
from .backends.base import Backend, SamplingParams
from .bounds import ProxyLimits, ProxyTimeouts, resolve_bounds
from .conn_guard import guarded_http_protocol
from .engine import Engine
from .intake import Limits
from .recorder import Recorder, RolloutHandle
from .render import Renderer
from .tokenpool import TokenPool, default_workers

__all__ = ["ProxyServer"]

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class AgentOnly:
    """ASGI wrapper for the socket sandboxes reach: only rollouts' model routes (``/r/{id}/...``,
    still checked against each rollout's own key) are served; the admin API and everything else
    answer 404, so no agent can reach the control plane even holding the admin token."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        rid, _, rest = path[3:].partition("/") if path.startswith("/r/") else ("", "", "")
        version = rest.partition("/")[0]
        if scope["type"] == "http" and rid and (rest == "" or version in ("v1", "v1beta", "v1alpha")):
            return await self.app(scope, receive, send)
        body = b'{"error": {"type": "not_found", "message": "not served on the sandbox socket: only a rollout\'s model routes are"}}'
        await send({"type": "http.response.start", "status": 404,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class ProxyServer:
    """The openforge proxy. ``port=0`` picks a free port; ``uds=PATH`` adds a Unix-socket listener
    with every route. The socket sandboxes reach, :attr:`agent_uds` (``agent_uds=PATH``, default a
    fresh private temp path), serves rollouts' model routes only (see :class:`AgentOnly`);
    ``host=None`` serves the sockets only.

    Hostile-client bounds: ``limits`` (:class:`~openforge.proxy.bounds.ProxyLimits`: body size, JSON
    depth, header size) and ``timeouts`` (:class:`~openforge.proxy.bounds.ProxyTimeouts`: headers, body,
    finishing a rollout); the old flat keywords (``max_body_bytes=``, ``body_timeout_s=``, ...) still work.
    ``token_workers``: processes that render and tokenize large prompts (default
    ``$OPENFORGE_TOKEN_WORKERS`` or 2; 0: in a thread of this process, as before the pool)."""

    def __init__(self, backend: Backend, *, store: Any = None, host: str | None = "127.0.0.1", port: int = 0,
                 uds: str | os.PathLike[str] | None = None, agent_uds: str | os.PathLike[str] | None = None,
                 admin_token: str | None = None,
                 sampling: SamplingParams | dict[str, Any] | None = None, renderer: Renderer | None = None,
                 public_url: str | None = None, limits: ProxyLimits | None = None,
                 timeouts: ProxyTimeouts | None = None, token_workers: int | None = None,
                 train_calls: TrainCalls = "harness", **flat: Any):
        limits, timeouts = resolve_bounds(limits, timeouts, flat)
        max_body_bytes, max_json_depth, max_header_bytes = (limits.max_body_bytes, limits.max_json_depth,
                                                            limits.max_header_bytes)
        header_timeout_s, body_timeout_s, finish_wait_s = timeouts.header_s, timeouts.body_s, timeouts.finish_wait_s
        if host is None and uds is None:
            raise ConfigError("ProxyServer needs a host (TCP) or a uds path")
        if host is not None and host not in _LOOPBACK and not admin_token:
            raise ConfigError(f"binding {host} (not loopback) requires an explicit admin token")
        self.backend = backend
        self.host, self.port, self.uds = host, port, (str(uds) if uds is not None else None)
        self._agent_dir = None if agent_uds is not None else tempfile.mkdtemp(prefix="openforge-agent-")
        self.agent_uds = str(agent_uds) if agent_uds is not None else f"{self._agent_dir}/proxy.sock"
        self.admin_token = admin_token or os.environ.get("OPENFORGE_ADMIN_TOKEN") or secrets.token_urlsafe(24)
        if isinstance(sampling, dict):
            sampling = SamplingParams(**sampling)
        self.renderer = renderer or Renderer(backend.tokenizer)
        self.recorder = Recorder(store, detokenize=self.renderer.decode, finish_wait_s=finish_wait_s,
                                 train_calls=train_calls)
        workers = default_workers() if token_workers is None else token_workers
        self.engine = Engine(backend, self.recorder, renderer=self.renderer, sampling=sampling,
                             pool=TokenPool(self.renderer, workers) if workers > 0 else None)
        self._public_url = public_url
        self.app = build_app(self.engine, admin_token=self.admin_token, public_url=lambda: self.url,
                             limits=Limits(max_body=max_body_bytes, max_depth=max_json_depth))
        self.header_timeout_s, self.body_timeout_s = header_timeout_s, body_timeout_s
        self.max_header_bytes = max_header_bytes
        self._servers: list[tuple[Any, asyncio.Task]] = []
        self._bound_port: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Base URL for TCP clients (or ``http://localhost`` when serving a socket only)."""
        if self._public_url:
            return self._public_url.rstrip("/")
        if self.host is None:
            return "http://localhost"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._bound_port or self.port}"

    @staticmethod
    def _unix_socket(path: str) -> socket.socket:
        p = Path(path)
        if p.exists() and p.is_socket():
            p.unlink()
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        u.bind(path)
        os.chmod(path, 0o666)  # a sandbox's agent runs as another uid
        return u

    async def _serve(self, app: Any, socks: list[socket.socket]) -> None:
        import uvicorn

        for s in socks:
            s.listen(2048)
            s.setblocking(False)
        http = guarded_http_protocol(self.header_timeout_s, self.body_timeout_s, self.max_header_bytes)
        config = uvicorn.Config(app, http=http, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2, timeout_keep_alive=30, backlog=2048,
                                proxy_headers=False)  # harnesses connect directly: no X-Forwarded-* to trust
        server = embedded_server(config)  # signals are the program's; the owner stops the proxy
        task = asyncio.ensure_future(server.serve(sockets=socks))
        self._servers.append((server, task))
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("proxy server stopped during start-up")
            await asyncio.sleep(0.01)

    async def start(self) -> ProxyServer:
        socks: list[socket.socket] = []
        if self.host is not None:
            fam = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.host, self.port))
            self._bound_port = s.getsockname()[1]
            socks.append(s)
        if self.uds is not None:
            socks.append(self._unix_socket(self.uds))
        try:
            if socks:
                await self._serve(self.app, socks)
            await self._serve(AgentOnly(self.app), [self._unix_socket(self.agent_uds)])
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        servers, self._servers = self._servers, []
        for server, _ in servers:
            server.should_exit = True
        for _, task in servers:
            try:
                await asyncio.wait_for(task, 10)
            except (asyncio.TimeoutError, Exception):
                task.cancel()
        await self.engine.aclose()  # the token workers go with the server
        for path in (self.uds, self.agent_uds):
            if path and Path(path).exists():
                try:
                    Path(path).unlink()
                except OSError:
                    pass
        if self._agent_dir is not None:
            shutil.rmtree(self._agent_dir, ignore_errors=True)

    async def aclose(self) -> None:
        await self.stop()
        await self.backend.aclose()

    async def __aenter__(self) -> ProxyServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    @property
    def store(self) -> Any:
        """The store this proxy records calls and finished trajectories into (None: memory only)."""
        return self.recorder.store

    # -- rollouts (sync: callable from sync and async code) -----------------------------------
    def create_rollout(self, task_id: str, harness: str | None = None, metadata: dict[str, Any] | None = None,
                       *, environment: str | None = None, base_url: str | None = None,
                       rollout_id: str | None = None) -> RolloutHandle:
        """Register a rollout; the handle's URLs point at ``base_url`` (default :attr:`url`). ``rollout_id``
        names it (e.g. a veRL session's id, which the back-end then sees on every call); default: a fresh id."""
        st = self.recorder.create(task_id, harness=harness, metadata=metadata, environment=environment,
                                  rollout_id=rollout_id)
        base = f"{(base_url or self.url).rstrip('/')}/r/{st.rollout_id}"
        return RolloutHandle(st.rollout_id, st.api_key, base + "/v1", base, base)

    def finish_rollout(self, rollout_id: str, *, reward: float | None = None,
                       status: RolloutStatus | str | None = None, rewards: dict[str, float] | None = None,
                       error: str | None = None, environment: str | None = None,
                       success_threshold: float = 1.0) -> Trajectory:
        """Close a rollout: later calls are refused; returns the trajectory with validated segments.
        Refused (409) while calls are in flight: :meth:`afinish_rollout` waits for them.

        The status comes from the one outcome rule (:mod:`openforge.core.outcome`) applied to the given
        ``status`` / ``reward`` and the recorded calls: ``success`` when neither is given, else by
        ``reward >= success_threshold``; whatever is given, a last call that failed in the back-end makes
        it ``infra_error`` and a context overflow ``policy_failure``."""
        return self.recorder.finish(rollout_id, reward=reward, status=status, rewards=rewards, error=error,
                                    environment=environment, success_threshold=success_threshold)

    def release_rollout(self, rollout_id: str) -> None:
        """Forget a rollout once its trajectory has been handed on (a long-running worker proxy without a
        store keeps every finished trajectory otherwise); later calls of it are refused. Idempotent."""
        self.recorder.rollouts.pop(rollout_id, None)

    async def afinish_rollout(self, rollout_id: str, *, reward: float | None = None,
                              status: RolloutStatus | str | None = None, rewards: dict[str, float] | None = None,
                              error: str | None = None, environment: str | None = None,
                              wait_s: float | None = None, facts: OutcomeFacts | None = None,
                              success_threshold: float = 1.0, metadata: dict[str, Any] | None = None,
                              metrics: dict[str, Any] | None = None) -> Trajectory:
        """:meth:`finish_rollout` for a rollout that may still have calls in flight: new calls are
        refused (409) at once, the ones in flight are awaited (up to ``wait_s``, default
        ``finish_wait_s``) and included; one still running then is recorded ``cancelled`` (included
        too) and its client gets a 409. Also finishes a rollout an earlier proxy on the same store
        left open (from the store's call log). ``metadata`` / ``metrics`` are added to the trajectory's
        own before it is stored (once: the store has it when this returns)."""
        return await self.recorder.afinish(rollout_id, wait_s=wait_s, reward=reward, status=status, rewards=rewards,
                                           error=error, environment=environment, facts=facts,
                                           success_threshold=success_threshold, metadata=metadata, metrics=metrics)

    def open_rollouts(self) -> list[dict[str, Any]]:
        """Rollouts not finished yet, including those an earlier proxy on the same store left open
        (``orphaned``): finish them, or cancel them with ``status="cancelled"``."""
        return self.recorder.open_rollouts()

    def get_trajectory(self, rollout_id: str) -> Trajectory | None:
        """The trajectory so far (calls, no segments) or the final one once finished."""
        return self.recorder.snapshot(rollout_id)

    async def pause(self) -> None:
        """New calls wait; returns when in-flight calls are done (safe to update weights)."""
        await self.engine.pause()

    async def resume(self) -> None:
        await self.engine.resume()
