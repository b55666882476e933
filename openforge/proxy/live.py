"""Live streaming responses: a streaming call's SSE events written while the back-end generates.

Owns: :class:`LiveSSE` (the ``text/event-stream`` response written as its body iterator yields),
:func:`live_events` (opening events, deltas as tokens arrive, closing events once the call is
recorded; a client that goes away cancels the call, which is still recorded) and
:func:`wait_disconnect`. The model routes (:mod:`.routes_model`) decide when a response goes live; an
answer that is already complete goes out in one write instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response

from ..core.errors import ProxyError
from .canonical import CanonicalRequest
from .engine import ClientGone
from .recorder import RolloutState
from .render import Renderer
from .routing import LeanRequest, internal_error
from .stream import TokenSink
from .wire import WireAdapter

__all__ = ["SSE_HEADERS", "LiveSSE", "live_events", "wait_disconnect"]

log = logging.getLogger("openforge.proxy")
SSE_HEADERS = {"cache-control": "no-cache"}
_BACKGROUND: set[asyncio.Future] = set()  # cancelled calls still recording after their response is gone


class _Final(bytes):
    """The last chunk of a live response: the answer's closing events (``ok``) or an error event."""

    ok = False


class _Closing(_Final):
    ok = True


class LiveSSE(Response):
    """A ``text/event-stream`` response written as its body iterator yields. Unlike Starlette's
    StreamingResponse it does not listen for the disconnect itself (the engine already does, and
    cancels the call, which ends the iterator): one reader of ``receive``, no task group per response."""

    media_type = "text/event-stream"

    def __init__(self, body: AsyncIterator[bytes], call_index: int, media_type: str = "text/event-stream"):
        self.body_iterator, self.status_code, self.background = body, 200, None
        self.media_type = media_type  # the Gemini API's non-SSE stream is one JSON array
        self.closed = False  # the closing events (the whole answer) were written, not just the end of the body
        self.init_headers({**SSE_HEADERS, "x-openforge-call": str(call_index)})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        it = self.body_iterator
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in it:
                last = isinstance(chunk, _Final)  # the closing events end the body in the same write
                self.closed = last and chunk.ok
                await send({"type": "http.response.body", "body": bytes(chunk), "more_body": not last})
                if last:
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await it.aclose()  # type: ignore[attr-defined]


async def live_events(adapter: WireAdapter, req: CanonicalRequest, st: RolloutState, sink: TokenSink,
                      task: asyncio.Future, renderer: Renderer) -> AsyncIterator[bytes]:
    """The body of a live streaming response: opening events now, deltas as the back-end pushes
    tokens, closing events once the call is recorded (``task`` returns only after the durable write).
    If the client goes away, the response is cancelled and so is ``task`` (the call is recorded
    ``cancelled`` and the back-end stops generating)."""
    w = adapter.streamer(req, st, sink.prompt_tokens)
    dec = sink.decoder(renderer)
    try:
        yield w.open()
        while not task.done():
            await sink.wait()
            if task.done():
                break  # the final answer supersedes what is still queued
            reasoning, text = dec.feed(sink.take())
            if reasoning or text:
                yield w.delta(reasoning, text)
        try:
            result = task.result()
        except ClientGone:
            return
        except ProxyError as e:
            yield _Final(w.fail(e))
            return
        except Exception as e:
            log.exception("proxy error")
            yield _Final(w.fail(internal_error(e)))
            return
        yield _Closing(w.close(result))
    finally:
        if not task.done():  # the client went away mid-stream: stop generating, record it cancelled
            task.cancel()
            _BACKGROUND.add(task)  # finishes recording on its own even if this generator is torn down
            task.add_done_callback(_BACKGROUND.discard)
            try:
                await asyncio.shield(task)
            except BaseException:
                pass


async def wait_disconnect(request: LeanRequest) -> None:
    """Return once the client has gone away (the engine cancels the call then)."""
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return
