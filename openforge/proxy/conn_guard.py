"""The connection-level limits uvicorn lacks: a deadline and a size cap on a request's line and headers.

Owns: :func:`guarded_http_protocol`, the uvicorn HTTP protocol class the proxy serves with.

uvicorn times out idle keep-alive connections but not a client that opens a connection, or starts a
request, and then sends its request line or headers slowly or never (a slowloris); with httptools it
also buffers headers without a size limit. The guarded protocol arms a timer when a connection opens
and when a request's first byte arrives, disarms it when the headers are complete, and answers
``408`` (too slow) or ``431`` (headers too large) with ``connection: close`` and closes the connection;
the parser's own ``400`` for malformed HTTP gets the same JSON error body (uvicorn's is plain text).
The body's deadline is enforced where the body is read (:func:`openforge.proxy.intake.read_body`).
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["guarded_http_protocol"]

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def _refusal(status: int, kind: str, message: str) -> bytes:
    """A refusal before any route is known, in a shape both SDK families parse (OpenAI reads
    ``error.message/type/param/code``, Anthropic ``type: error`` + ``error.type/message``)."""
    from .sse import dumps

    body = dumps({"type": "error", "error": {"type": kind, "message": message, "param": None, "code": None}})
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, _REASONS[status], len(body))) + body


def guarded_http_protocol(header_timeout_s: float, max_header_bytes: int) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a ``header_timeout_s`` deadline and a ``max_header_bytes`` cap
    on each request's line + headers (counted per received chunk, so the cap may be overshot by one
    socket read, never more)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None
        _header_bytes = 0

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None:  # a body, or a new request's first bytes (on_message_begin arms)
                super().data_received(data)
                return
            self._header_bytes += len(data)
            super().data_received(data)
            if self._header_timer is not None and self._header_bytes > max_header_bytes:
                self._refuse(431, "request_too_large",
                             f"the request line and headers exceed {max_header_bytes} bytes")

        def send_400_response(self, msg: str) -> None:  # the HTTP parser refused the bytes
            self._refuse(400, "invalid_request_error", msg)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def _arm(self) -> None:
            self._header_bytes = 0
            self._header_timer = self.loop.call_later(header_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expired(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                self.cycle.keep_alive = False  # a pipelined request stalled: close once the current one is answered
                return
            self._refuse(408, "request_timeout", f"the request headers were not received within {header_timeout_s:g} s")

        def _refuse(self, status: int, kind: str, message: str) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self.transport.write(_refusal(status, kind, message))
                self.transport.close()

    return GuardedHttpToolsProtocol
