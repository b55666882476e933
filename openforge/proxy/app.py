"""The proxy's ASGI app: per-rollout model API routes and the admin control plane.

Owns: :func:`build_app` and the HTTP contract of DESIGN (routes under ``/r/{rollout_id}``:
``POST /v1/chat/completions``, ``POST /v1/responses``, ``POST /v1/messages`` (+ ``/count_tokens``),
``GET /v1/models``, ``HEAD /``; admin: ``POST /admin/rollouts``, ``GET /admin/rollouts`` (open ones),
``GET /admin/rollouts/{id}``, ``POST /admin/rollouts/{id}/finish`` (waits for the calls in flight), ``POST /admin/pause``, ``POST /admin/resume``,
``GET /admin/health``). Every error comes back in the called API's error shape, with a status the
SDKs retry only when retrying can help (5xx/429 for back-end trouble, 4xx for the caller's mistakes);
admin routes answer errors as ``{"error": {"type", "message", "field"}}`` (:func:`admin_error`). Bodies
are read, decompressed and parsed within bounds by :mod:`.intake` before any route logic runs.
The three model routes are dispatched straight from the ASGI scope (:class:`_ProxyApp`); the rest go
through a Starlette router.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import ProxyError
from ..finite import is_number
from ..types import RolloutStatus
from .engine import ClientGone, Engine
from .intake import BodyDisconnect, Limits, decode_body, header_map, header_uint, parse_json, read_body
from .recorder import RolloutState
from .sse import dumps
from .stream import TokenSink
from .wire_chat import ChatAdapter, openai_error
from .wire_messages import MessagesAdapter, anthropic_error
from .wire_responses import ResponsesAdapter

__all__ = ["MAX_BODY_BYTES", "admin_error", "build_app"]

log = logging.getLogger("openforge.proxy")
MAX_BODY_BYTES = 64 * 1024 * 1024
_CHAT, _RESP, _MSG = ChatAdapter(), ResponsesAdapter(), MessagesAdapter()
_SSE_HEADERS = {"cache-control": "no-cache"}
_BACKGROUND: set[asyncio.Future] = set()
_PARSE_IN_THREAD_BYTES = 1 << 20  # larger bodies are parsed off the event loop


class _Json(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


def admin_error(e: ProxyError) -> dict[str, Any]:
    """The admin routes' one error shape: ``{"error": {"type", "message", "field"}}``."""
    return {"error": {"type": e.kind, "message": e.message, "field": e.param}}


def _err(api: str, e: ProxyError) -> Response:
    """``e`` in the error shape of ``api``: ``messages`` (Anthropic), ``admin``, else OpenAI's."""
    body = anthropic_error(e) if api == "messages" else admin_error(e) if api == "admin" else openai_error(e)
    headers = None
    if e.status in (429, 503):
        headers = {"retry-after": "1"}
    elif e.status in (408, 413):  # the body may be unread: this connection cannot carry another request
        headers = {"connection": "close"}
    return _Json(body, status_code=e.status, headers=headers)


def _api_of(path: str, headers: Mapping[str, str]) -> str:
    """Which error shape a request outside the routes gets: admin, Anthropic or OpenAI."""
    if path.startswith("/admin"):
        return "admin"
    return "messages" if "/messages" in path or "anthropic-version" in headers else "chat"


def _guard(api: str, handler: Callable[[_Lean], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint running ``handler``: every error it raises answered in ``api``'s shape (a
    bug is logged and still answered in that shape)."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(_Lean.of(request))
        except ProxyError as e:
            return _err(api, e)
        except (ClientGone, BodyDisconnect):
            return Response(status_code=499)
        except Exception as e:
            log.exception("proxy error")
            return _err(api, ProxyError(f"internal proxy error: {type(e).__name__}: {e}", 500, kind="api_error"))

    return endpoint


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 (and any escaped exception) in the shape of the API the path belongs to."""
    api = _api_of(request.url.path, header_map(request.scope["headers"]))
    if isinstance(exc, HTTPException):
        kind = {404: "not_found_error", 405: "invalid_request_error"}.get(exc.status_code, "invalid_request_error")
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        return _err(api, ProxyError(msg, exc.status_code, kind=kind))
    log.error("proxy error", exc_info=exc)
    return _err(api, ProxyError(f"internal proxy error: {type(exc).__name__}: {exc}", 500, kind="api_error"))


async def _read_json(request: _Lean, limits: Limits) -> tuple[bytes, dict[str, Any]]:
    """The request's JSON object, read, decompressed and parsed within ``limits`` (see :mod:`.intake`)."""
    body = await read_body(request.receive, request.headers, limits)
    enc = request.headers.get("content-encoding")
    if enc:  # decompression releases the GIL: off the event loop, so a bomb stalls no other rollout
        body = await asyncio.to_thread(decode_body, body, enc, limits.max_body)
    if len(body) > _PARSE_IN_THREAD_BYTES:
        return body, await asyncio.to_thread(parse_json, body, limits.max_depth)
    return body, parse_json(body, limits.max_depth)


class _Lean:
    """The part of a request the model routes read — lower-cased headers, the rollout id, the body
    stream, ``receive`` — built straight from the ASGI scope, so the hot routes skip Starlette's
    middleware stack, router and header views."""

    __slots__ = ("headers", "path_params", "receive")

    def __init__(self, scope: dict[str, Any], receive: Any, path_params: dict[str, str]):
        self.headers = header_map(scope["headers"])
        self.path_params = path_params
        self.receive = receive

    @classmethod
    def of(cls, request: Request) -> _Lean:
        return cls(request.scope, request.receive, request.path_params)


class _ProxyApp:
    """The proxy's ASGI app: ``POST /r/{rollout_id}/v1/{chat/completions,responses,messages}`` go
    straight to their handlers; everything else goes through the Starlette router."""

    def __init__(self, router: Starlette, hot: dict[str, Callable[[Any], Awaitable[Response]]]):
        self.router, self.hot = router, hot

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].startswith("/r/"):
            rid, _, rest = scope["path"][3:].partition("/")
            handler = self.hot.get(rest)
            if handler is not None and rid:
                response = await handler(_Lean(scope, receive, {"rollout_id": rid}))
                await response(scope, receive, send)
                return
        await self.router(scope, receive, send)


def _key(request: _Lean) -> str | None:
    auth = request.headers.get("authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def build_app(engine: Engine, *, admin_token: str, public_url: Callable[[], str],
              max_body: int = MAX_BODY_BYTES, on_create: Callable[[RolloutState], Any] | None = None,
              limits: Limits | None = None) -> _ProxyApp:
    """The proxy's ASGI app. ``limits`` bound every request body (``max_body`` is its size when
    ``limits`` is not given); admin bodies are further capped at 1 MiB."""
    recorder = engine.recorder
    limits = limits or Limits(max_body=max_body)
    admin_limits = replace(limits, max_body=min(limits.max_body, 1 << 20))

    def auth(request: _Lean, live: bool = True) -> RolloutState:
        rid = request.path_params["rollout_id"]
        key = _key(request)
        if not key:
            raise ProxyError("missing API key: send 'Authorization: Bearer <key>' or 'x-api-key'", 401,
                             kind="authentication_error")
        st = recorder.get(rid)
        if st is None:
            raise ProxyError(f"unknown rollout {rid!r}", 401, kind="authentication_error")
        if not secrets.compare_digest(key.encode(), st.api_key.encode()):
            raise ProxyError(f"this API key is not valid for rollout {rid!r}", 403, kind="permission_error")
        if live and not st.accepting:
            raise ProxyError(f"rollout {rid!r} is finished: it takes no more calls", 409)
        return st

    def parse(adapter: Any, data: dict[str, Any], st: RolloutState | None, **kw: Any) -> Any:
        try:
            return adapter.parse(data, st, **kw)
        except ProxyError:
            raise
        except Exception as e:  # a shape the validators missed: still the caller's input
            raise ProxyError(f"invalid request: {type(e).__name__}: {e}", 400) from None

    async def serve(request: _Lean, adapter: Any) -> Response:
        api = adapter.api
        try:
            st = auth(request)
            retry = header_uint(request.headers, "x-stainless-retry-count")
            body, data = await _read_json(request, limits)
            req = parse(adapter, data, st)
            kw: dict[str, Any] = {"body": body, "retry_count": retry,
                                  "idempotency_key": request.headers.get("idempotency-key"),
                                  "disconnect": lambda: _wait_disconnect(request)}
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
                    return _LiveSSE(_live(adapter, req, st, sink, task, engine.renderer), sink.call_index)
                result = task.result()
            else:
                result = await engine.serve(st, req, **kw)
        except ProxyError as e:
            return _err(api, e)
        except (ClientGone, BodyDisconnect):
            return Response(status_code=499)
        except Exception as e:  # a bug: log it, answer in the API's shape
            log.exception("proxy error")
            return _err(api, ProxyError(f"internal proxy error: {type(e).__name__}: {e}", 500, kind="api_error"))
        if req.stream:
            # The answer is already complete (a replay, a back-end that does not stream, or a generation that
            # ended before the response could start) and durable: the whole event sequence goes out in
            # one write — same SSE bytes, far fewer syscalls than chunk-by-chunk.
            return Response(b"".join(adapter.stream(req, result, st)), media_type="text/event-stream",
                            headers={**_SSE_HEADERS, "x-openforge-call": str(result.call_index)})
        return _Json(adapter.respond(req, result, st), headers={"x-openforge-call": str(result.call_index)})

    async def chat(request: _Lean) -> Response:
        return await serve(request, _CHAT)

    async def responses(request: _Lean) -> Response:
        return await serve(request, _RESP)

    async def messages(request: _Lean) -> Response:
        return await serve(request, _MSG)

    async def count_tokens(request: _Lean) -> Response:
        auth(request)
        _, data = await _read_json(request, limits)
        req = parse(_MSG, data, None, count_only=True)
        r = engine.renderer
        try:
            n = len(r.encode_rendered(r.text(req.messages, req.tools)))
        except Exception as e:
            raise ProxyError(f"the conversation cannot be rendered: {type(e).__name__}: {e}", 400) from None
        return _Json({"input_tokens": n})

    async def models(request: _Lean) -> Response:
        auth(request, live=False)
        name = engine.backend.describe()
        return _Json({"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "openforge",
                                                  "type": "model", "display_name": name}]})

    async def model(request: _Lean) -> Response:
        auth(request, live=False)
        name = request.path_params["model"]  # the proxy serves whatever model name a harness sends
        return _Json({"id": name, "object": "model", "created": 0, "owned_by": "openforge", "type": "model",
                      "display_name": name})

    async def unknown(request: Request) -> Response:
        return _err(_api_of(request.url.path, header_map(request.scope["headers"])),
                    ProxyError(f"no route {request.method} {request.url.path}: the proxy serves "
                               "/v1/chat/completions, /v1/responses, /v1/messages, /v1/models", 404,
                               kind="not_found_error"))

    async def root(request: Request) -> Response:
        return Response(status_code=200)

    # -- admin -----------------------------------------------------------------------------------
    def admin(request: _Lean) -> None:
        if not secrets.compare_digest((_key(request) or "").encode(), admin_token.encode()):
            raise ProxyError("admin token required (Authorization: Bearer $OPENFORGE_ADMIN_TOKEN)", 401,
                             kind="authentication_error")

    async def admin_json(request: _Lean) -> dict[str, Any]:
        admin(request)
        body = await read_body(request.receive, request.headers, admin_limits)
        body = decode_body(body, request.headers.get("content-encoding"), admin_limits.max_body)
        return parse_json(body, admin_limits.max_depth) if body.strip() else {}

    async def create(request: _Lean) -> Response:
        data = await admin_json(request)
        task_id, harness, meta = data.get("task_id"), data.get("harness"), data.get("metadata")
        _field(isinstance(task_id, str) and task_id != "", "task_id", "a non-empty string")
        _field(harness is None or isinstance(harness, str), "harness", "a string")
        _field(meta is None or isinstance(meta, dict), "metadata", "an object")
        st = recorder.create(task_id, harness=harness, metadata=meta)
        if on_create:
            on_create(st)
        base = f"{public_url()}/r/{st.rollout_id}"
        return _Json({"rollout_id": st.rollout_id, "api_key": st.api_key, "openai_base_url": base + "/v1",
                      "anthropic_base_url": base}, status_code=201)

    async def get_rollout(request: _Lean) -> Response:
        admin(request)
        traj = recorder.snapshot(request.path_params["rollout_id"])
        if traj is None:
            raise ProxyError(f"unknown rollout {request.path_params['rollout_id']!r}", 404, param="rollout_id",
                             kind="not_found_error")
        return Response(traj.model_dump_json(), media_type="application/json")

    async def finish(request: _Lean) -> Response:
        data = await admin_json(request)
        reward, status, rewards, error = (data.get(k) for k in ("reward", "status", "rewards", "error"))
        _field(reward is None or is_number(reward), "reward", "a number")
        statuses = [s.value for s in RolloutStatus]
        _field(status is None or (isinstance(status, str) and status in statuses), "status", f"one of {statuses}")
        _field(rewards is None or (isinstance(rewards, dict) and all(map(is_number, rewards.values()))),
               "rewards", "an object of numbers")
        _field(error is None or isinstance(error, str), "error", "a string")
        wait_s = data.get("wait_s")
        _field(wait_s is None or (is_number(wait_s) and 0 <= wait_s <= 3600), "wait_s",
               "a number of seconds between 0 and 3600")
        traj = await recorder.afinish(request.path_params["rollout_id"], wait_s=wait_s, reward=reward, status=status,
                                      rewards=rewards, error=error)
        return Response(traj.model_dump_json(), media_type="application/json")

    async def list_open(request: _Lean) -> Response:
        admin(request)
        return _Json({"open": recorder.open_rollouts()})

    async def pause(request: _Lean) -> Response:
        admin(request)
        await engine.pause()
        return _Json({"paused": True})

    async def resume(request: _Lean) -> Response:
        admin(request)
        await engine.resume()
        return _Json({"paused": False})

    async def health(request: Request) -> Response:
        return _Json({"ok": True, "paused": engine.paused, "backend": engine.backend.describe(),
                      "rollouts": len(recorder.rollouts)})

    base = "/r/{rollout_id}"
    routes = [
        Route("/", root, methods=["GET", "HEAD"]),
        Route(base, root, methods=["GET", "HEAD"]),
        Route(base + "/", root, methods=["GET", "HEAD"]),
        Route(base + "/v1/messages/count_tokens", _guard("messages", count_tokens), methods=["POST"]),
        Route(base + "/v1/models", _guard("chat", models), methods=["GET"]),
        Route(base + "/v1/models/{model:path}", _guard("chat", model), methods=["GET"]),
        Route("/admin/rollouts", _guard("admin", create), methods=["POST"]),
        Route("/admin/rollouts", _guard("admin", list_open), methods=["GET"]),
        Route("/admin/rollouts/{rollout_id}", _guard("admin", get_rollout), methods=["GET"]),
        Route("/admin/rollouts/{rollout_id}/finish", _guard("admin", finish), methods=["POST"]),
        Route("/admin/pause", _guard("admin", pause), methods=["POST"]),
        Route("/admin/resume", _guard("admin", resume), methods=["POST"]),
        Route("/admin/health", health, methods=["GET"]),
        Route(base + "/{rest:path}", unknown, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
    ]
    hot = {"v1/chat/completions": chat, "v1/responses": responses, "v1/messages": messages}
    router = Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _http_error})
    return _ProxyApp(router, hot)


def _field(ok: bool, name: str, what: str) -> None:
    """An admin body field of the wrong type: a 400 naming it."""
    if not ok:
        raise ProxyError(f"'{name}' must be {what}", 400, param=name)


class _Final(bytes):
    """The last chunk of a live response."""


class _LiveSSE(Response):
    """A ``text/event-stream`` response written as its body iterator yields. Unlike Starlette's
    StreamingResponse it does not listen for the disconnect itself (the engine already does, and
    cancels the call, which ends the iterator): one reader of ``receive``, no task group per response."""

    media_type = "text/event-stream"

    def __init__(self, body: AsyncIterator[bytes], call_index: int):
        self.body_iterator, self.status_code, self.background = body, 200, None
        self.init_headers({**_SSE_HEADERS, "x-openforge-call": str(call_index)})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        it = self.body_iterator
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in it:
                last = isinstance(chunk, _Final)  # the closing events end the body in the same write
                await send({"type": "http.response.body", "body": bytes(chunk), "more_body": not last})
                if last:
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await it.aclose()  # type: ignore[attr-defined]


async def _live(adapter: Any, req: Any, st: RolloutState, sink: TokenSink, task: asyncio.Future,
                renderer: Any) -> AsyncIterator[bytes]:
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
            yield _Final(w.fail(ProxyError(f"internal proxy error: {type(e).__name__}: {e}", 500, kind="api_error")))
            return
        yield _Final(w.close(result))
    finally:
        if not task.done():  # the client went away mid-stream: stop generating, record it cancelled
            task.cancel()
            _BACKGROUND.add(task)  # finishes recording on its own even if this generator is torn down
            task.add_done_callback(_BACKGROUND.discard)
            try:
                await asyncio.shield(task)
            except BaseException:
                pass


async def _wait_disconnect(request: Request) -> None:
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return
