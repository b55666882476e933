"""A fault-injecting HTTP forwarder in front of one environment service.

Owns: :class:`FaultForwarder` — an ASGI app served on its own Unix socket (exposed into the sandbox
in place of the service's) that answers the first ``calls`` requests after it is armed (once the environment's setup is done)
with a fault (``503``, or held
for ``delay_s`` then ``504``) and forwards every other request unchanged to the service, which is
reached through a Unix socket (the built-in claw services) or a loopback URL (a task directory's
``[[services]]``). Each injected failure is timestamped (host clock) so the analysis can find the
step at which the agent met it.

The forwarder runs as the driver on the agent's behalf, so it trusts nothing the agent controls:

* it opens the service's socket **once, by file descriptor** (``O_PATH``, no symlink followed, must
  be a socket) when it starts, and connects through ``/proc/self/fd/N`` from then on: replacing the
  path afterwards (a symlink to the driver's private socket, or to another rollout's service)
  changes nothing;
* a request body larger than ``max_body`` bytes is answered ``413`` and never forwarded; a body cut
  short by the client's disconnect is dropped (nothing reaches the service);
* responses are streamed through in chunks, never held whole in the driver's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from ..core.errors import EnvironmentError_
from ..envs.serve import AppServer
from .spec import ServiceFault

__all__ = ["MAX_BODY", "FaultForwarder", "pin_socket"]

#: Hop-by-hop headers: never passed on (the request's length is re-computed by the client).
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host"}
_REQ_DROP = _HOP | {"content-length"}
#: Default bound on a request body the forwarder accepts (larger: ``413``, nothing forwarded).
MAX_BODY = 16 * 1024 * 1024


class _TooLarge(ValueError):
    """A request body over ``max_body``."""


class _Disconnected(ConnectionError):
    """The client left before its request body was complete."""


def pin_socket(path: str | Path) -> int:
    """An ``O_PATH`` descriptor of the Unix socket at ``path`` (a symlink is refused, not followed);
    connect through ``/proc/self/fd/<fd>`` to reach exactly this socket whatever the path becomes."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise EnvironmentError_(f"fault forwarder: cannot open the service socket {path}: {e.strerror or e}") from e
    mode = os.fstat(fd).st_mode
    if not stat.S_ISSOCK(mode):
        os.close(fd)
        raise EnvironmentError_(f"fault forwarder: {path} is not a Unix socket (a symlink or a file was put there)")
    return fd


class FaultForwarder:
    """Forward HTTP to ``target`` (a Unix socket path or an ``http://`` URL), failing the first calls."""

    def __init__(self, fault: ServiceFault, target: str | Path, uds: str | Path, *, max_body: int = MAX_BODY):
        self.fault, self.target, self.max_body = fault, str(target), max_body
        self._fd: int | None = None  # the service's socket, pinned at start
        self.fired: list[float] = []  # host time.time() of each injected failure
        self.requests = 0
        #: False until the agent starts (:meth:`arm`): the environment's own setup gets the real service
        self.armed = False
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:  # a plain function: uvicorn
            await self._app(scope, receive, send)  # takes a bound method for an ASGI2 app

        self._server = AppServer(app, uds)
        self._client: Any = None

    @property
    def uds(self) -> str:
        return self._server.uds

    async def start(self) -> FaultForwarder:
        import httpx

        if self.target.startswith(("http://", "https://")):
            self._client = httpx.AsyncClient(base_url=self.target, timeout=120)
        else:
            self._fd = pin_socket(self.target)
            self._client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=f"/proc/self/fd/{self._fd}"),
                                             base_url="http://service", timeout=120)
        await self._server.start()
        return self

    async def stop(self) -> None:
        await self._server.stop()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def arm(self) -> None:
        """Start failing requests (called once the environment's setup is done)."""
        self.armed = True

    def record(self) -> dict[str, Any]:
        """What happened: requests seen and when each failure was injected."""
        return {"requests": self.requests, "fired": len(self.fired), "fired_at": [round(t, 3) for t in self.fired]}

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        try:
            body = await self._body(scope, receive)
        except _Disconnected:  # the client went away mid-body: forward nothing
            return
        except _TooLarge:
            await self._answer(send, 413, f"request body larger than {self.max_body} bytes")
            return
        self.requests += self.armed
        if self.armed and len(self.fired) < self.fault.calls:
            self.fired.append(time.time())
            await self._fail(send)
            return
        await self._forward(scope, body, send)

    async def _body(self, scope: dict[str, Any], receive: Any) -> bytes:
        """The whole request body, at most ``max_body`` bytes (:class:`_TooLarge` beyond), or
        :class:`_Disconnected` when the client left before it was complete."""
        for k, v in scope["headers"]:
            if k.lower() == b"content-length" and v.strip().isdigit() and int(v) > self.max_body:
                raise _TooLarge
        parts: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise _Disconnected
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise _TooLarge
            parts.append(chunk)
            if not msg.get("more_body"):
                return b"".join(parts)

    @staticmethod
    async def _answer(send: Any, status: int, err: str) -> None:
        data = json.dumps({"error": err}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    async def _fail(self, send: Any) -> None:
        if self.fault.kind == "service_timeout":
            await asyncio.sleep(self.fault.delay_s)
            status, err = 504, "upstream request timed out"
        else:
            status, err = self.fault.status, "service temporarily unavailable, try again later"
        data = json.dumps({"error": err}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        if status == 503:
            headers.append((b"retry-after", b"1"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def _forward(self, scope: dict[str, Any], body: bytes, send: Any) -> None:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k.decode("latin-1").lower() not in _REQ_DROP]
        path = scope.get("raw_path") or scope["path"].encode()
        url = path.decode("latin-1") + (("?" + scope["query_string"].decode("latin-1")) if scope.get("query_string") else "")
        try:
            req = self._client.build_request(scope["method"], url, headers=headers, content=body)
            resp = await self._client.send(req, stream=True)
        except Exception as e:  # the service itself is down: say so, as a gateway would
            await self._answer(send, 502, f"bad gateway: {type(e).__name__}")
            return
        try:  # raw bytes, as the service sent them (its content-encoding and length stay true)
            out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in resp.headers.multi_items()
                   if k.lower() not in _HOP]
            await send({"type": "http.response.start", "status": resp.status_code, "headers": out})
            async for chunk in resp.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await resp.aclose()
