"""A fault-injecting HTTP forwarder in front of one environment service.

Owns: :class:`FaultForwarder` — an ASGI app served on its own Unix socket (exposed into the sandbox
in place of the service's) that answers the first ``calls`` requests after it is armed (once the environment's setup is done)
with a fault (``503``, or held
for ``delay_s`` then ``504``) and forwards every other request unchanged to the service, which is
reached through a Unix socket (the built-in claw services) or a loopback URL (a task directory's
``[[services]]``). Each injected failure is timestamped (host clock) so the analysis can find the
step at which the agent met it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from ..envs.serve import AppServer
from .spec import ServiceFault

__all__ = ["FaultForwarder"]

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host",
        "content-length", "content-encoding"}


class FaultForwarder:
    """Forward HTTP to ``target`` (a Unix socket path or an ``http://`` URL), failing the first calls."""

    def __init__(self, fault: ServiceFault, target: str | Path, uds: str | Path):
        self.fault, self.target = fault, str(target)
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
            self._client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=self.target),
                                             base_url="http://service", timeout=120)
        await self._server.start()
        return self

    async def stop(self) -> None:
        await self._server.stop()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

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
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        self.requests += self.armed
        if self.armed and len(self.fired) < self.fault.calls:
            self.fired.append(time.time())
            await self._fail(send)
            return
        await self._forward(scope, body, send)

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
                   if k.decode("latin-1").lower() not in _HOP]
        path = scope.get("raw_path") or scope["path"].encode()
        url = path.decode("latin-1") + (("?" + scope["query_string"].decode("latin-1")) if scope.get("query_string") else "")
        try:
            resp = await self._client.request(scope["method"], url, headers=headers, content=body)
        except Exception as e:  # the service itself is down: say so, as a gateway would
            data = json.dumps({"error": f"bad gateway: {type(e).__name__}"}).encode()
            await send({"type": "http.response.start", "status": 502,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": data})
            return
        out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in resp.headers.items() if k.lower() not in _HOP]
        out.append((b"content-length", str(len(resp.content)).encode()))
        await send({"type": "http.response.start", "status": resp.status_code, "headers": out})
        await send({"type": "http.response.body", "body": resp.content})
