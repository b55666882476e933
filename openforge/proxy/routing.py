"""Shared plumbing of the proxy's HTTP routes: the one typed object every handler reads, the lean
request view of the hot routes, and the error shapes.

Owns: :class:`AppState` (engine, admin token, public URL, body limits, ``on_create`` hook — what the
handlers once captured from ``build_app``'s closure), :class:`LeanRequest`, :data:`ErrorShape`,
:class:`JsonResponse`, :func:`admin_error` / :func:`error_response` (every error in the called API's
shape, with the headers that make SDK retries behave), :func:`guard` (a handler's errors answered in
that shape), :func:`http_error` (Starlette's own 404/405), :func:`request_key` and :func:`read_json`
(a request body read, decompressed and parsed within bounds, see :mod:`.intake`), :func:`query_param`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..core.errors import ProxyError
from .engine import ClientGone, Engine
from .intake import BodyDisconnect, Limits, decode_body, header_map, parse_json, read_body
from .recorder import Recorder, RolloutState
from .sse import dumps
from .wire_chat import openai_error
from .wire_gemini_out import gemini_error
from .wire_messages import anthropic_error

__all__ = [
    "ADMIN_MAX_BODY",
    "AppState",
    "ErrorShape",
    "Handler",
    "JsonResponse",
    "LeanRequest",
    "admin_error",
    "api_of",
    "error_response",
    "guard",
    "http_error",
    "internal_error",
    "lean_guard",
    "query_param",
    "read_json",
    "request_key",
]

log = logging.getLogger("openforge.proxy")
ADMIN_MAX_BODY = 1 << 20  # admin bodies are small JSON objects
PARSE_IN_THREAD_BYTES = 1 << 20  # larger bodies are parsed off the event loop
MAX_QUERY_FIELDS = 32
_GEMINI_VERSIONS = ("/v1beta/", "/v1alpha/")

#: Whose error shape a response takes: Anthropic's for ``messages``, Gemini's for ``gemini``, the admin
#: one, else OpenAI's.
ErrorShape = Literal["chat", "responses", "messages", "gemini", "admin"]


@dataclass
class AppState:
    """What every route handler reads: the serving engine (and through it the recorder), the admin
    token, the public base URL (a callable: the port is known only once bound), the body limits and
    the hook run on each created rollout. ``admin_limits`` are ``limits`` capped at 1 MiB."""

    engine: Engine
    admin_token: str
    public_url: Callable[[], str]
    limits: Limits
    on_create: Callable[[RolloutState], Any] | None = None
    admin_limits: Limits = field(init=False)

    def __post_init__(self) -> None:
        self.admin_limits = replace(self.limits, max_body=min(self.limits.max_body, ADMIN_MAX_BODY))

    @property
    def recorder(self) -> Recorder:
        return self.engine.recorder


class LeanRequest:
    """The part of a request the model routes read — lower-cased headers, the path parameters, the raw
    query string, the body stream, ``receive`` — built straight from the ASGI scope, so the hot routes
    skip Starlette's middleware stack, router and header views."""

    __slots__ = ("headers", "path_params", "query", "receive")

    def __init__(self, scope: dict[str, Any], receive: Any, path_params: dict[str, str]):
        self.headers = header_map(scope["headers"])
        self.path_params = path_params
        self.query: bytes = scope.get("query_string") or b""
        self.receive = receive

    @classmethod
    def of(cls, request: Request) -> LeanRequest:
        return cls(request.scope, request.receive, request.path_params)


#: A route handler on the lean request view.
Handler = Callable[[LeanRequest], Awaitable[Response]]


class JsonResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


def admin_error(e: ProxyError) -> dict[str, Any]:
    """The admin routes' one error shape: ``{"error": {"type", "message", "field"}}``."""
    return {"error": {"type": e.kind, "message": e.message, "field": e.param}}


def error_response(api: ErrorShape, e: ProxyError) -> Response:
    """``e`` in the error shape of ``api``: ``messages`` (Anthropic), ``gemini``, ``admin``, else OpenAI's."""
    body = (anthropic_error(e) if api == "messages" else gemini_error(e) if api == "gemini" else
            admin_error(e) if api == "admin" else openai_error(e))
    headers = None
    if e.status in (429, 503):
        headers = {"retry-after": "1"}
    elif e.status in (408, 413):  # the body may be unread: this connection cannot carry another request
        headers = {"connection": "close"}
    return JsonResponse(body, status_code=e.status, headers=headers)


def internal_error(e: Exception) -> ProxyError:
    """A bug, as the 500 the caller gets (after it is logged)."""
    return ProxyError(f"internal proxy error: {type(e).__name__}: {e}", 500, kind="api_error")


def api_of(path: str, headers: Mapping[str, str]) -> ErrorShape:
    """Which error shape a request outside the routes gets: admin, Anthropic, Gemini or OpenAI."""
    if path.startswith("/admin"):
        return "admin"
    if "/messages" in path:
        return "messages"
    if any(v in path for v in _GEMINI_VERSIONS):
        return "gemini"
    if "anthropic-version" in headers:
        return "messages"
    return "gemini" if "x-goog-api-key" in headers else "chat"


def guard(api: ErrorShape, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint running ``handler``: every error it raises answered in ``api``'s shape (a
    bug is logged and still answered in that shape)."""

    guarded = lean_guard(api, handler)

    async def endpoint(request: Request) -> Response:
        return await guarded(LeanRequest.of(request))

    return endpoint


def lean_guard(api: ErrorShape, handler: Handler) -> Handler:
    """``handler`` with every error it raises answered in ``api``'s shape (for the hot dispatch)."""

    async def guarded(request: LeanRequest) -> Response:
        try:
            return await handler(request)
        except ProxyError as e:
            return error_response(api, e)
        except (ClientGone, BodyDisconnect):
            return Response(status_code=499)
        except Exception as e:
            log.exception("proxy error")
            return error_response(api, internal_error(e))

    return guarded


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 (and any escaped exception) in the shape of the API the path belongs to."""
    api = api_of(request.url.path, header_map(request.scope["headers"]))
    if isinstance(exc, HTTPException):
        kind = {404: "not_found_error", 405: "invalid_request_error"}.get(exc.status_code, "invalid_request_error")
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        return error_response(api, ProxyError(msg, exc.status_code, kind=kind))
    log.error("proxy error", exc_info=exc)
    return error_response(api, internal_error(exc))


def request_key(request: LeanRequest, *, query: bool = False) -> str | None:
    """The API key a request carries: ``Authorization: Bearer KEY``, ``x-api-key`` or ``x-goog-api-key``;
    with ``query`` (the model routes: the Gemini API's form) also ``?key=KEY``."""
    auth = request.headers.get("authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    key = request.headers.get("x-api-key") or request.headers.get("x-goog-api-key")
    if key is None and query and request.query:
        key = query_param(request, "key")
    return key


def query_param(request: LeanRequest, name: str) -> str | None:
    """The last value of ``name`` in the request's query string (a 400 for more than 32 fields)."""
    try:
        pairs = parse_qsl(request.query.decode("latin-1"), max_num_fields=MAX_QUERY_FIELDS)
    except ValueError:
        raise ProxyError(f"the query string has more than {MAX_QUERY_FIELDS} fields", 400, param="query") from None
    return next((v for k, v in reversed(pairs) if k == name), None)


async def read_json(request: LeanRequest, limits: Limits) -> tuple[bytes, dict[str, Any]]:
    """The request's JSON object, read, decompressed and parsed within ``limits`` (see :mod:`.intake`)."""
    body = await read_body(request.receive, request.headers, limits)
    enc = request.headers.get("content-encoding")
    if enc:  # decompression releases the GIL: off the event loop, so a bomb stalls no other rollout
        body = await asyncio.to_thread(decode_body, body, enc, limits.max_body)
    if len(body) > PARSE_IN_THREAD_BYTES:
        return body, await asyncio.to_thread(parse_json, body, limits.max_depth)
    return body, parse_json(body, limits.max_depth)
