"""Running the proxy: :class:`ProxyServer` serves the ASGI app with uvicorn inside the current event
loop, on TCP and/or a Unix-domain socket, and is the in-process API the orchestrator and trainers call.

Owns: :class:`ProxyServer`.

::

    async with ProxyServer(backend, store=store) as proxy:
        h = proxy.create_rollout("task-1", harness="codex")     # id, api_key, base URLs
        ...  # run the harness against h.openai_base_url / h.anthropic_base_url
        traj = proxy.finish_rollout(h.rollout_id, reward=1.0)    # segments built and validated
        await proxy.pause(); ...update weights...; await proxy.resume()
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..trajectory import Trajectory
from ..types import RolloutStatus
from .app import build_app
from .backends.base import Backend, SamplingParams
from .engine import Engine
from .recorder import Recorder, RolloutHandle
from .render import Renderer
from .tokenpool import TokenPool, default_workers

__all__ = ["ProxyServer"]

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class ProxyServer:
    """The openforge proxy. ``port=0`` picks a free port; ``uds=PATH`` adds a Unix-socket listener
    (for sandboxes without network); ``host=None`` with ``uds`` serves the socket only.
    ``token_workers``: processes that render and tokenize large prompts (default
    ``$OPENFORGE_TOKEN_WORKERS`` or 2; 0: in a thread of this process, as before the pool)."""

    def __init__(self, backend: Backend, *, store: Any = None, host: str | None = "127.0.0.1", port: int = 0,
                 uds: str | os.PathLike[str] | None = None, admin_token: str | None = None,
                 sampling: SamplingParams | dict[str, Any] | None = None, renderer: Renderer | None = None,
                 public_url: str | None = None, replay_window_s: float = 10.0,
                 max_body_bytes: int = 64 * 1024 * 1024, token_workers: int | None = None):
        if host is None and uds is None:
            raise ConfigError("ProxyServer needs a host (TCP) or a uds path")
        if host is not None and host not in _LOOPBACK and not admin_token:
            raise ConfigError(f"binding {host} (not loopback) requires an explicit admin token")
        self.backend = backend
        self.host, self.port, self.uds = host, port, (str(uds) if uds is not None else None)
        self.admin_token = admin_token or os.environ.get("OPENFORGE_ADMIN_TOKEN") or secrets.token_urlsafe(24)
        if isinstance(sampling, dict):
            sampling = SamplingParams(**sampling)
        self.renderer = renderer or Renderer(backend.tokenizer)
        self.recorder = Recorder(store, detokenize=self.renderer.decode)
        workers = default_workers() if token_workers is None else token_workers
        self.engine = Engine(backend, self.recorder, renderer=self.renderer, sampling=sampling,
                             replay_window_s=replay_window_s,
                             pool=TokenPool(self.renderer, workers) if workers > 0 else None)
        self._public_url = public_url
        self.app = build_app(self.engine, admin_token=self.admin_token, public_url=lambda: self.url,
                             max_body=max_body_bytes)
        self._server: Any = None
        self._task: asyncio.Task | None = None
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

    async def start(self) -> ProxyServer:
        import uvicorn

        socks: list[socket.socket] = []
        if self.host is not None:
            fam = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.host, self.port))
            self._bound_port = s.getsockname()[1]
            socks.append(s)
        if self.uds is not None:
            p = Path(self.uds)
            if p.exists() and p.is_socket():
                p.unlink()
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            u.bind(self.uds)
            os.chmod(self.uds, 0o666)
            socks.append(u)
        for s in socks:
            s.listen(2048)
            s.setblocking(False)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2, timeout_keep_alive=30, backlog=2048,
                                proxy_headers=False)  # harnesses connect directly: no X-Forwarded-* to trust
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None  # uvicorn < 0.29
        self._task = asyncio.ensure_future(self._server.serve(sockets=socks))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("proxy server stopped during start-up")
            await asyncio.sleep(0.01)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._task is not None:
                try:
                    await asyncio.wait_for(self._task, 10)
                except (asyncio.TimeoutError, Exception):
                    self._task.cancel()
            self._server = None
        await self.engine.aclose()  # the token workers go with the server
        if self.uds and Path(self.uds).exists():
            try:
                Path(self.uds).unlink()
            except OSError:
                pass

    async def aclose(self) -> None:
        await self.stop()
        await self.backend.aclose()

    async def __aenter__(self) -> ProxyServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # -- rollouts (sync: callable from sync and async code) -----------------------------------
    def create_rollout(self, task_id: str, harness: str | None = None, metadata: dict[str, Any] | None = None,
                       *, environment: str | None = None, base_url: str | None = None) -> RolloutHandle:
        """Register a rollout; the handle's URLs point at ``base_url`` (default :attr:`url`)."""
        st = self.recorder.create(task_id, harness=harness, metadata=metadata, environment=environment)
        base = f"{(base_url or self.url).rstrip('/')}/r/{st.rollout_id}"
        return RolloutHandle(st.rollout_id, st.api_key, base + "/v1", base)

    def finish_rollout(self, rollout_id: str, *, reward: float | None = None,
                       status: RolloutStatus | str | None = None, rewards: dict[str, float] | None = None,
                       error: str | None = None, environment: str | None = None) -> Trajectory:
        """Close a rollout: later calls are refused; returns the trajectory with validated segments.

        ``status`` defaults to ``infra_error`` when the last call failed in the back-end, else to
        ``success`` / ``policy_failure`` by ``reward > 0`` (``success`` when no reward is given). A
        given ``policy_failure`` / ``timeout`` becomes ``infra_error`` when the last call failed in the
        back-end (the policy never answered it), so back-end outages are never scored 0."""
        return self.recorder.finish(rollout_id, reward=reward, status=status, rewards=rewards, error=error,
                                    environment=environment)

    def get_trajectory(self, rollout_id: str) -> Trajectory | None:
        """The trajectory so far (calls, no segments) or the final one once finished."""
        return self.recorder.snapshot(rollout_id)

    async def pause(self) -> None:
        """New calls wait; returns when in-flight calls are done (safe to update weights)."""
        await self.engine.pause()

    async def resume(self) -> None:
        await self.engine.resume()
