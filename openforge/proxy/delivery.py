"""Whether a model call's reply reached its client.

The proxy makes a call durable *before* any byte of its reply (so no acknowledged call is lost), which
means a recorded call may have a reply that never arrived whole: the client went away or the connection
broke while it was being written, or the proxy died first. Such a call is ``delivery_uncertain``: kept,
never trained (the harness's next step may not have been conditioned on it).

Owns: :class:`Delivered` (the ASGI wrapper a model route puts around a reply: it reports, exactly once,
whether the reply's last body message went out — the recorder then confirms the call) and
:data:`SENT_EXTENSION` (the ASGI scope extension through which the proxy's own HTTP protocol,
:mod:`.conn_guard`, says whether the connection really took the response: uvicorn drops a send to a
connection that is gone without a word).

"Went out" means written in full and flushed to the socket while the connection was open — the
furthest a server can vouch for (the kernel may still hold the last bytes). The check costs nothing
when the socket took the reply at once (the common case); a large reply's tail is waited for. Under
another ASGI server (no extension) a final send that returns is taken as delivered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.responses import Response

__all__ = ["SENT_EXTENSION", "Delivered", "Report"]

#: ``await scope["extensions"][SENT_EXTENSION]()`` after the last send: True once the server has written
#: the whole response and flushed it to the socket, False when the connection was lost first.
SENT_EXTENSION = "openforge.response_flushed"

#: Called once per reply with whether it went out whole.
Report = Callable[[bool], None]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Delivered(Response):
    """Runs ``response`` and calls ``report(True)`` as soon as its final body message has gone out
    whole (at once when the socket took it in one write, so before the client can act on it), else
    ``report(False)`` once the response ends.

    ``whole`` says whether the reply is complete when its body ends: a live stream whose closing events
    were never written (the call failed or the client left) ends its HTTP body all the same."""

    def __init__(self, response: Response, report: Report, *, whole: Callable[[], bool] = lambda: True):
        # not Response.__init__: this wraps a response that is already built (its status and headers)
        self.response, self.status_code, self.background = response, response.status_code, None
        self.raw_headers = response.raw_headers
        self._report = report
        self._whole = whole

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Send) -> None:  # type: ignore[override]
        sent = (scope.get("extensions") or {}).get(SENT_EXTENSION)
        final = reported = False

        def report(delivered: bool) -> None:
            nonlocal reported
            if not reported:
                reported = True
                self._report(delivered)

        async def tracked(message: MutableMapping[str, Any]) -> None:
            nonlocal final
            await send(message)
            if final or message.get("type") != "http.response.body" or message.get("more_body", False):
                return
            final = True
            report(self._whole() and (await sent() if sent is not None else True))

        try:
            await self.response(scope, receive, tracked)
        finally:
            report(False)  # no-op once reported
