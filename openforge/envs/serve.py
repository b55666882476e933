"""Serving an environment's loopback app (mock services, web apps) on a Unix socket for one rollout.

Owns: :class:`AppServer` — uvicorn inside the driver's event loop, listening on a Unix socket that
the sandbox exposes as ``http://127.0.0.1:PORT`` inside (``Sandbox.expose``) — and
:func:`socket_path`, a short per-rollout socket path (AF_UNIX paths are limited to 108 bytes).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..launchers.base import Sandbox
from ..serving import embedded_server

__all__ = ["AppServer", "socket_path"]


def socket_path(sandbox: Sandbox, name: str) -> Path:
    """``<sandbox root>/<name>.sock``, or a fresh short ``/tmp/ofs-*/`` dir when that is too long
    (removed again by :meth:`AppServer.stop`)."""
    uds = Path(getattr(sandbox, "root", sandbox.workdir.parent)) / f"{name}.sock"
    if len(str(uds)) > 100:
        uds = Path(tempfile.mkdtemp(prefix="ofs-", dir="/tmp")) / f"{name}.sock"
    return uds


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
            if self._server.started:
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
