"""The per-rollout model API routes under ``/r/{rollout_id}``.

Owns: :class:`ModelRoutes` — per-rollout authentication (the rollout's own key; a finished rollout
takes no more calls), ``POST /v1/chat/completions``, ``/v1/responses``, ``/v1/messages`` and the Gemini
API's ``POST /{v1beta|v1|v1alpha}/models/{model}:generateContent`` / ``:streamGenerateContent`` (served
by the :class:`~.engine.Engine`, answered as JSON, as one SSE write, or live through :mod:`.live`),
``POST /v1/messages/count_tokens`` and ``…/models/{model}:countTokens``, ``GET /v1/models[/{model}]``
(in the Gemini API's shape for a Gemini client, as ``GET /v1beta/models[/{model}]``), the ``GET|HEAD /``
probes and the 404 for any other path under a rollout. The serving routes answer every error
themselves, in their API's shape; the others are wrapped by :func:`~.routing.guard`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..core.errors import ProxyError
from .canonical import CanonicalRequest
from .delivery import Delivered, Report
from .engine import ClientGone
from .intake import BodyDisconnect, header_map, header_uint
from .live import SSE_HEADERS, LiveSSE, live_events, wait_disconnect
from .recorder import RolloutState
from .routing import (
    AppState,
    Handler,
    JsonResponse,
    LeanRequest,
    api_of,
    error_response,
    internal_error,
    lean_guard,
    query_param,
    read_json,
    request_key,
)
from .stream import TokenSink
from .wire import WireAdapter
from .wire_chat import ChatAdapter
from .wire_gemini import GeminiAdapter
from .wire_messages import MessagesAdapter
from .wire_responses import ResponsesAdapter

__all__ = ["ModelRoutes", "checked_parse"]

log = logging.getLogger("openforge.proxy")
_CHAT, _RESP, _MSG = ChatAdapter(), ResponsesAdapter(), MessagesAdapter()
#: ``{version}/models/{model}:{method}`` below ``/r/{rollout_id}/``: the Gemini API's model methods
GEMINI_PATH = re.compile(r"(v1|v1beta|v1alpha)/models/([^/:]+):([A-Za-z]+)")
GEMINI_METHODS = ("generateContent", "streamGenerateContent", "countTokens")


def checked_parse(parse: Callable[[], CanonicalRequest]) -> CanonicalRequest:
    """``parse()``; a shape the validators missed is still the caller's input: a 400, not a 500."""
    try:
        return parse()
    except ProxyError:
        raise
    except Exception as e:
        raise ProxyError(f"invalid request: {type(e).__name__}: {e}", 400) from None


class ModelRoutes:
    """The handlers of the model API routes, reading everything from one :class:`~.routing.AppState`."""

    def __init__(self, state: AppState):
        self.state = state

    def hot(self) -> dict[str, Handler]:
        """The serving routes by path below ``/r/{rollout_id}/``, dispatched straight from the ASGI scope."""
        return {"v1/chat/completions": self.chat, "v1/responses": self.responses, "v1/messages": self.messages}

    def gemini_route(self, rest: str) -> tuple[Handler, dict[str, str]] | None:
        """The handler and path parameters of a Gemini model method path below ``/r/{rollout_id}/``."""
        m = GEMINI_PATH.fullmatch(rest)
        if m is None:
            return None
        method = m.group(3)
        handler = {"generateContent": self.generate, "streamGenerateContent": self.stream_generate,
                   "countTokens": lean_guard("gemini", self.gemini_count_tokens)}.get(method, self.gemini_unknown)
        return handler, {"model": m.group(2), "method": method}

    def auth(self, request: LeanRequest, live: bool = True) -> RolloutState:
        """The rollout a request's key opens (401 without a key or for an unknown rollout, 403 for another
        rollout's key, 409 when ``live`` and the rollout is finished)."""
        rid = request.path_params["rollout_id"]
        key = request_key(request, query=True)
        if not key:
            raise ProxyError("missing API key: send 'Authorization: Bearer <key>', 'x-api-key', 'x-goog-api-key' "
                             "or '?key=<key>'", 401, kind="authentication_error")
        st = self.state.recorder.get(rid)
        if st is None:
            raise ProxyError(f"unknown rollout {rid!r}", 401, kind="authentication_error")
        if not secrets.compare_digest(key.encode(), st.api_key.encode()):
            raise ProxyError(f"this API key is not valid for rollout {rid!r}", 403, kind="permission_error")
        if live and not st.accepting:
            raise ProxyError(f"rollout {rid!r} is finished: it takes no more calls", 409)
        return st

    async def serve(self, request: LeanRequest, adapter: WireAdapter) -> Response:
        """One model call in ``adapter``'s wire API; every error answered in its shape. An answer goes
        out wrapped in :class:`~.delivery.Delivered`, which confirms the call once the reply is out whole."""
        api, engine = adapter.api, self.state.engine
        try:
            st = self.auth(request)
            retry = header_uint(request.headers, "x-stainless-retry-count")
            body, data = await read_json(request, self.state.limits)
            req = checked_parse(lambda: adapter.parse(data, st))
            kw: dict[str, Any] = {"body": body, "retry_count": retry,
                                  "idempotency_key": request.headers.get("idempotency-key"),
                                  "disconnect": lambda: wait_disconnect(request)}
            if req.stream:
                sink = TokenSink()
                task = asyncio.ensure_future(engine.serve(st, req, sink=sink, **kw))
                sink.watch(task)
                try:
                    await sink.ready()
                except asyncio.CancelledError:
                    task.cancel()
                    raise
                if not task.done():  # generation has begun: stream it as it comes
                    live = LiveSSE(live_events(adapter, req, st, sink, task, engine.renderer), sink.call_index,
                                   media_type=req.extra.get("media_type", "text/event-stream"))
                    return Delivered(live, self._report(st, sink.call_index), whole=lambda: live.closed)
                result = task.result()
            else:
                result = await engine.serve(st, req, **kw)
        except ProxyError as e:
            return error_response(api, e)
        except (ClientGone, BodyDisconnect):
            return Response(status_code=499)
        except Exception as e:  # a bug: log it, answer in the API's shape
            log.exception("proxy error")
            return error_response(api, internal_error(e))
        report = self._report(st, result.call_index)
        try:
            if req.stream:
                # The answer is already complete (a replay, a back-end that does not stream, or a generation that
                # ended before the response could start) and durable: the whole event sequence goes out in
                # one write — same SSE bytes, far fewer syscalls than chunk-by-chunk.
                reply: Response = Response(b"".join(adapter.stream(req, result, st)),
                                           media_type=req.extra.get("media_type", "text/event-stream"),
                                           headers={**SSE_HEADERS, "x-openforge-call": str(result.call_index)})
            else:
                reply = JsonResponse(adapter.respond(req, result, st),
                                     headers={"x-openforge-call": str(result.call_index)})
        except BaseException:
            report(False)
            raise
        return Delivered(reply, report)

    def _report(self, st: RolloutState, call_index: int) -> Report:
        """What a reply carrying call ``call_index`` reports its delivery to."""
        recorder = self.state.recorder
        return lambda delivered: recorder.reply_done(st, call_index, delivered)

    async def chat(self, request: LeanRequest) -> Response:
        return await self.serve(request, _CHAT)

    async def responses(self, request: LeanRequest) -> Response:
        return await self.serve(request, _RESP)

    async def messages(self, request: LeanRequest) -> Response:
        return await self.serve(request, _MSG)

    async def generate(self, request: LeanRequest) -> Response:
        return await self.serve(request, GeminiAdapter(request.path_params["model"]))

    async def stream_generate(self, request: LeanRequest) -> Response:
        try:
            alt = query_param(request, "alt") if request.query else None
            if alt not in (None, "sse", "json"):
                raise ProxyError(f"unsupported alt={alt[:40]!r}: send alt=sse (server-sent events) or alt=json", 400,
                                 param="alt")
        except ProxyError as e:
            return error_response("gemini", e)
        return await self.serve(request, GeminiAdapter(request.path_params["model"], stream=True, sse=alt == "sse"))

    async def gemini_unknown(self, request: LeanRequest) -> Response:
        p = request.path_params
        return error_response("gemini", ProxyError(
            f"method models/{p['model']}:{p['method']} is not served: the proxy serves "
            f"{', '.join(GEMINI_METHODS)}", 404, kind="not_found_error"))

    def _count(self, req: CanonicalRequest) -> int:
        r = self.state.engine.renderer
        try:
            return len(r.encode_rendered(r.text(req.messages, req.tools)))
        except Exception as e:
            raise ProxyError(f"the conversation cannot be rendered: {type(e).__name__}: {e}", 400) from None

    async def count_tokens(self, request: LeanRequest) -> Response:
        self.auth(request)
        _, data = await read_json(request, self.state.limits)
        req = checked_parse(lambda: _MSG.parse(data, None, count_only=True))
        return JsonResponse({"input_tokens": self._count(req)})

    async def gemini_count_tokens(self, request: LeanRequest) -> Response:
        """``countTokens``: ``{"contents": …}`` or ``{"generateContentRequest": {…}}`` → ``{"totalTokens"}``."""
        self.auth(request)
        _, data = await read_json(request, self.state.limits)
        inner = data.get("generateContentRequest", data.get("generate_content_request"))
        if inner is not None and not isinstance(inner, dict):
            raise ProxyError("'generateContentRequest' must be an object", 400, param="generateContentRequest")
        adapter = GeminiAdapter(request.path_params["model"])
        req = checked_parse(lambda: adapter.parse(inner if inner is not None else data, None, count_only=True))
        return JsonResponse({"totalTokens": self._count(req)})

    def _gemini_model(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = {"name": f"models/{name}", "baseModelId": name, "version": "openforge",
                               "displayName": name, "description": "served by the openforge proxy",
                               "supportedGenerationMethods": list(GEMINI_METHODS)}
        limit = self.state.engine.backend.max_context
        if isinstance(limit, int):
            out["inputTokenLimit"] = limit
        return out

    async def gemini_models(self, request: LeanRequest) -> Response:
        self.auth(request, live=False)
        return JsonResponse({"models": [self._gemini_model(self.state.engine.backend.describe())]})

    async def gemini_model(self, request: LeanRequest) -> Response:
        self.auth(request, live=False)
        return JsonResponse(self._gemini_model(request.path_params["model"].removeprefix("models/")))

    async def models(self, request: LeanRequest) -> Response:
        if "x-goog-api-key" in request.headers:  # the google-genai SDK asks /v1/models too
            return await lean_guard("gemini", self.gemini_models)(request)
        self.auth(request, live=False)
        name = self.state.engine.backend.describe()
        return JsonResponse({"object": "list", "data": [{"id": name, "object": "model", "created": 0,
                                                         "owned_by": "openforge", "type": "model",
                                                         "display_name": name}]})

    async def model(self, request: LeanRequest) -> Response:
        if "x-goog-api-key" in request.headers:
            return await lean_guard("gemini", self.gemini_model)(request)
        self.auth(request, live=False)
        name = request.path_params["model"]  # the proxy serves whatever model name a harness sends
        return JsonResponse({"id": name, "object": "model", "created": 0, "owned_by": "openforge", "type": "model",
                             "display_name": name})

    @staticmethod
    async def unknown(request: Request) -> Response:
        return error_response(api_of(request.url.path, header_map(request.scope["headers"])),
                              ProxyError(f"no route {request.method} {request.url.path}: the proxy serves "
                                         "/v1/chat/completions, /v1/responses, /v1/messages, /v1/models and "
                                         "/v1beta/models/{model}:generateContent|streamGenerateContent|countTokens",
                                         404,
                                         kind="not_found_error"))

    @staticmethod
    async def root(request: Request) -> Response:
        return Response(status_code=200)
