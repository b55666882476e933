"""The connection-level limits uvicorn lacks: deadlines on a request's headers and body, a size cap on
its headers.

Owns: :func:`guarded_http_protocol`, the uvicorn HTTP protocol class the proxy serves with.

uvicorn times out idle keep-alive connections but not a client that opens a connection, or starts a
request, and then sends its request line, headers or body slowly or never (a slowloris); with
httptools it also buffers headers without a size limit. The guarded protocol arms a header timer when
a connection opens and when a request's first byte arrives (disarmed when the headers are complete),
and a body timer when a socket read ends with the headers complete but the body not (disarmed when
the body is complete) — a request that arrives whole in one read, the common case, costs no timer.
Expiry answers ``408`` (``431`` for oversized headers) with ``connection: close`` and closes the
connection; the ASGI app then sees ``http.disconnect``. The parser's own ``400`` for malformed HTTP
gets the same JSON error body (uvicorn's is plain text).

Each request's scope also carries :data:`~.delivery.SENT_EXTENSION`, an async callable the app awaits
after its last send: True once the whole response was written and flushed to the socket (uvicorn silently
drops what an app sends to a connection that is gone, and buffers what the socket does not take yet);
False when the connection was lost first. The proxy tells a delivered reply from a cut-off one by it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .delivery import SENT_EXTENSION

__all__ = ["guarded_http_protocol"]

_FLUSH_POLL_S = 0.005  # while a large reply is still in the transport's buffer (rare: only the tail of one)
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def _refusal(status: int, kind: str, message: str) -> bytes:
    """A refusal before any route is known, in a shape both SDK families parse (OpenAI reads
    ``error.message/type/param/code``, Anthropic ``type: error`` + ``error.type/message``)."""
    from .sse import dumps

    body = dumps({"type": "error", "error": {"type": kind, "message": message, "param": None, "code": None}})
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, _REASONS[status], len(body))) + body


def guarded_http_protocol(header_timeout_s: float, body_timeout_s: float,
                          max_header_bytes: int) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a ``header_timeout_s`` deadline and a ``max_header_bytes`` cap
    on each request's line + headers (counted per received chunk, so the cap may be overshot by one
    socket read, never more), and a ``body_timeout_s`` deadline on its body."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None
        _header_bytes = 0
        _body_timer: asyncio.TimerHandle | None = None
        _in_body = False  # headers complete, body not yet

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        _lost: tuple[Exception | None] | None = None  # (exc,) once the connection is gone

        def connection_lost(self, exc: Exception | None) -> None:
            self._lost = (exc,)
            self._disarm()
            self._disarm_body()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None:  # a body, or a new request's first bytes (on_message_begin arms)
                super().data_received(data)
            else:
                self._header_bytes += len(data)
                super().data_received(data)
                if self._header_timer is not None and self._header_bytes > max_header_bytes:
                    self._refuse(431, "request_too_large",
                                 f"the request line and headers exceed {max_header_bytes} bytes")
            if self._in_body and self._body_timer is None and not self.transport.is_closing():
                self._body_timer = self.loop.call_later(body_timeout_s, self._body_expired)

        def send_400_response(self, msg: str) -> None:  # the HTTP parser refused the bytes
            self._refuse(400, "invalid_request_error", msg)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            self._in_body = True
            super().on_headers_complete()
            cycle = self.cycle  # the request's cycle, created just now; the app receives self.scope
            if cycle is not None and getattr(cycle, "scope", None) is self.scope:
                self.scope.setdefault("extensions", {})[SENT_EXTENSION] = lambda: self._flushed(cycle)

        async def _flushed(self, cycle: Any) -> bool:
            """The response of ``cycle`` was written whole and the socket took every byte of it (a clean
            close after flushing counts; a connection lost with bytes still buffered does not)."""
            if not cycle.response_complete:  # a send after the connection was lost is dropped silently
                return False
            while self._lost is None and self.transport.get_write_buffer_size() > 0:
                await asyncio.sleep(_FLUSH_POLL_S)
            return self._lost is None or self._lost[0] is None

        def on_message_complete(self) -> None:
            self._in_body = False
            self._disarm_body()
            super().on_message_complete()

        def _arm(self) -> None:
            self._header_bytes = 0
            self._header_timer = self.loop.call_later(header_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _disarm_body(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _body_expired(self) -> None:
            self._body_timer = None
            cycle = self.cycle
            if self.transport.is_closing() or cycle is None:
                return
            if cycle.response_started and not cycle.response_complete:
                cycle.keep_alive = False  # answering already (without the body): close once done
                return
            if not cycle.response_started:
                cycle.disconnected = True  # the app's receive() now says http.disconnect; its answer is dropped
                cycle.message_event.set()
                self.transport.write(_refusal(408, "request_timeout",
                                              f"the request body was not received within {body_timeout_s:g} s"))
            self.transport.close()

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
