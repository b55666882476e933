"""Serving an environment's loopback app (mock services, web apps) on a Unix socket for one rollout.

Owns: :class:`AppServer` — uvicorn inside the driver's event loop, listening on a Unix socket that
the sandbox exposes as ``http://127.0.0.1:PORT`` inside (``Sandbox.expose``) — and
:func:`socket_path`, a short per-rollout socket path (AF_UNIX paths are limited to 108 bytes).

Where the sockets live: never in a directory the agent can write (its rollout directory is its own).
A driver-side component that connects to a socket by path — the fault forwarder in front of a
service — would otherwise connect wherever the agent's symlink points (a confused deputy). Each
socket gets a fresh driver-owned ``0700`` directory under ``/tmp``; the sandbox sees only the socket
itself, bind-mounted, and the launcher grants the agent's uid (and only it) the right to connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..launchers.base import Sandbox
from ..util.serving import embedded_server

__all__ = ["AppServer", "socket_path"]


def socket_path(sandbox: Sandbox, name: str) -> Path:
    """``/tmp/ofs-*/<name>.sock`` in a fresh directory owned by the driver, mode ``0700`` (removed
    again by :meth:`AppServer.stop`): short enough for AF_UNIX, and out of the agent's reach (see the
    module docstring). ``sandbox`` is the rollout the socket serves (kept for the signature)."""
    del sandbox
    return Path(tempfile.mkdtemp(prefix="ofs-", dir="/tmp")) / f"{name}.sock"


class AppServer:
    """An ASGI app served with uvicorn on a Unix socket in the current event loop."""

    def __init__(self, app: Any, uds: str | Path):
        self.app, self.uds = app, str(uds)
        self._server: Any = None
        self._task: asyncio.Task | None = None

    async def start(self) -> AppServer:
        import uvicorn

        config = uvicorn.Config(self.app, uds=self.uds, log_level="warning", lifespan="on", access_log=False)
        self._server = embedded_server(config)  # one per rollout: signals stay the program's
        self._task = asyncio.create_task(self._server.serve())
        for _ in range(400):
            if self._server.started:  # uvicorn makes it 0666: the driver's alone until Sandbox.expose grants
                os.chmod(self.uds, 0o600)  # the agent access
                return self
            if self._task.done():
                self._task.result()
                break
            await asyncio.sleep(0.01)
        raise RuntimeError(f"the app on {self.uds} did not start")

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            # wait() neither raises the server's own error or cancellation nor swallows the caller's
            _, pending = await asyncio.wait({self._task}, timeout=5)
            for task in pending:
                task.cancel()
            self._server = self._task = None
            with contextlib.suppress(OSError):
                Path(self.uds).unlink()
            if Path(self.uds).parent.name.startswith("ofs-"):
                shutil.rmtree(Path(self.uds).parent, ignore_errors=True)
