"""The proxy's ASGI app: per-rollout model API routes and the admin control plane.

Owns: :func:`build_app` and the HTTP contract of DESIGN (routes under ``/r/{rollout_id}``:
``POST /v1/chat/completions``, ``POST /v1/responses``, ``POST /v1/messages`` (+ ``/count_tokens``),
``GET /v1/models``, ``HEAD /``; admin: ``POST /admin/rollouts``, ``GET /admin/rollouts/{id}``,
``POST /admin/rollouts/{id}/finish``, ``POST /admin/pause``, ``POST /admin/resume``,
``GET /admin/health``). Every error comes back in the called API's error shape, with a status the
SDKs retry only when retrying can help (5xx/429 for back-end trouble, 4xx for the caller's mistakes).
The three model routes are dispatched straight from the ASGI scope (:class:`_ProxyApp`); the rest go
through a Starlette router.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import ProxyError
from ..types import RolloutStatus
from .engine import ClientGone, Engine
from .recorder import RolloutState
from .sse import dumps
from .stream import TokenSink
from .wire_chat import ChatAdapter, openai_error
from .wire_messages import MessagesAdapter, anthropic_error
from .wire_responses import ResponsesAdapter

__all__ = ["MAX_BODY_BYTES", "build_app"]

log = logging.getLogger("openforge.proxy")
MAX_BODY_BYTES = 64 * 1024 * 1024
_CHAT, _RESP, _MSG = ChatAdapter(), ResponsesAdapter(), MessagesAdapter()
_SSE_HEADERS = {"cache-control": "no-cache"}
_BACKGROUND: set[asyncio.Future] = set()


class _Json(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


def _err(api: str, e: ProxyError) -> Response:
    body = anthropic_error(e) if api == "messages" else openai_error(e)
    headers = {"retry-after": "1"} if e.status in (429, 503) else None
    return _Json(body, status_code=e.status, headers=headers)


async def _read_json(request: Request, limit: int) -> tuple[bytes, dict[str, Any]]:
    n = request.headers.get("content-length")
    if n and n.isdigit() and int(n) > limit:
        raise ProxyError(f"request body of {n} bytes exceeds the limit of {limit}", 413, kind="request_too_large")
    chunks, size = [], 0
    async for c in request.stream():
        size += len(c)
        if size > limit:
            raise ProxyError(f"request body exceeds the limit of {limit} bytes", 413, kind="request_too_large")
        chunks.append(c)
    body = b"".join(chunks)
    enc = (request.headers.get("content-encoding") or "identity").lower()
    if enc != "identity":
        body = _decompress(body, enc, limit)
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProxyError(f"request body is not valid JSON: {e}", 400) from None
    if not isinstance(data, dict):
        raise ProxyError("request body must be a JSON object", 400)
    return body, data


def _decompress(body: bytes, enc: str, limit: int) -> bytes:
    import zlib

    try:
        if enc in ("gzip", "x-gzip", "deflate"):
            d = zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
            out = d.decompress(body, limit + 1)
        elif enc == "zstd":
            import zstandard

            out = zstandard.ZstdDecompressor().decompressobj().decompress(body)
        else:
            raise ProxyError(f"unsupported content-encoding {enc!r} (send identity, gzip, deflate or zstd)", 415)
    except ImportError:
        raise ProxyError("content-encoding zstd needs the zstandard package on the proxy host", 415) from None
    except (zlib.error, ValueError) as e:
        raise ProxyError(f"request body is not valid {enc}: {e}", 400) from None
    except ProxyError:
        raise
    except Exception as e:  # zstandard.ZstdError and friends
        raise ProxyError(f"request body is not valid {enc}: {e}", 400) from None
    if len(out) > limit:
        raise ProxyError(f"decompressed request body exceeds the limit of {limit} bytes", 413, kind="request_too_large")
    return out


class _Lean:
    """The part of a request the model routes read — lower-cased headers, the rollout id, the body
    stream, ``receive`` — built straight from the ASGI scope, so the hot routes skip Starlette's
    middleware stack, router and header views."""

    __slots__ = ("headers", "path_params", "receive")

    def __init__(self, scope: dict[str, Any], receive: Any, rollout_id: str):
        self.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.path_params = {"rollout_id": rollout_id}
        self.receive = receive

    async def stream(self) -> AsyncIterator[bytes]:
        while True:
            msg = await self.receive()
            if msg["type"] != "http.request":
                raise ClientGone()
            if msg.get("body"):
                yield msg["body"]
            if not msg.get("more_body"):
                return


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
                response = await handler(_Lean(scope, receive, rid))
                await response(scope, receive, send)
                return
        await self.router(scope, receive, send)


def _key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def build_app(engine: Engine, *, admin_token: str, public_url: Callable[[], str],
              max_body: int = MAX_BODY_BYTES, on_create: Callable[[RolloutState], Any] | None = None) -> _ProxyApp:
    recorder = engine.recorder

    def auth(request: Request, live: bool = True) -> RolloutState:
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
        if live and st.finished is not None:
            raise ProxyError(f"rollout {rid!r} is finished", 403, kind="permission_error")
        return st

    async def serve(request: Request, adapter: Any) -> Response:
        api = adapter.api
        try:
            st = auth(request)
            body, data = await _read_json(request, max_body)
            try:
                req = adapter.parse(data, st)
            except ProxyError:
                raise
            except Exception as e:  # a shape the validators missed: still the caller's input
                raise ProxyError(f"invalid request: {type(e).__name__}: {e}", 400) from None
            retry = request.headers.get("x-stainless-retry-count", "0")
            kw: dict[str, Any] = {"body": body, "retry_count": int(retry) if retry.isdigit() else 0,
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
        except ClientGone:
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

    async def chat(request: Request) -> Response:
        return await serve(request, _CHAT)

    async def responses(request: Request) -> Response:
        return await serve(request, _RESP)

    async def messages(request: Request) -> Response:
        return await serve(request, _MSG)

    async def count_tokens(request: Request) -> Response:
        try:
            auth(request)
            _, data = await _read_json(request, max_body)
            req = _MSG.parse(data, None, count_only=True)
            r = engine.renderer
            try:
                n = len(r.encode_rendered(r.text(req.messages, req.tools)))
            except Exception as e:
                raise ProxyError(f"the conversation cannot be rendered: {type(e).__name__}: {e}", 400) from None
            return _Json({"input_tokens": n})
        except ProxyError as e:
            return _err("messages", e)

    async def models(request: Request) -> Response:
        try:
            auth(request, live=False)
        except ProxyError as e:
            return _err("chat", e)
        name = engine.backend.describe()
        return _Json({"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "openforge",
                                                  "type": "model", "display_name": name}]})

    async def model(request: Request) -> Response:
        try:
            auth(request, live=False)
        except ProxyError as e:
            return _err("chat", e)
        name = request.path_params["model"]  # the proxy serves whatever model name a harness sends
        return _Json({"id": name, "object": "model", "created": 0, "owned_by": "openforge", "type": "model",
                      "display_name": name})

    async def unknown(request: Request) -> Response:
        api = "messages" if "/messages" in request.url.path or request.headers.get("anthropic-version") else "chat"
        return _err(api, ProxyError(f"no route {request.method} {request.url.path}: the proxy serves "
                                    "/v1/chat/completions, /v1/responses, /v1/messages, /v1/models", 404,
                                    kind="not_found_error"))

    async def root(request: Request) -> Response:
        return Response(status_code=200)

    # -- admin -----------------------------------------------------------------------------------
    def admin(request: Request) -> None:
        if not secrets.compare_digest((_key(request) or "").encode(), admin_token.encode()):
            raise ProxyError("admin token required (Authorization: Bearer $OPENFORGE_ADMIN_TOKEN)", 401,
                             kind="authentication_error")

    async def admin_json(request: Request) -> dict[str, Any]:
        if not (await request.body()).strip():
            return {}
        return (await _read_json(request, 1 << 20))[1]

    def admin_route(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """Admin token checked first; a ProxyError becomes an error response (OpenAI shape)."""

        async def route(request: Request) -> Response:
            try:
                admin(request)
                return await handler(request)
            except ProxyError as e:
                return _err("chat", e)

        return route

    @admin_route
    async def create(request: Request) -> Response:
        data = await admin_json(request)
        meta = data.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise ProxyError("'metadata' must be an object", 400, param="metadata")
        harness = data.get("harness")
        if harness is not None and not isinstance(harness, str):
            raise ProxyError("'harness' must be a string", 400, param="harness")
        st = recorder.create(data.get("task_id"), harness=harness, metadata=meta)
        if on_create:
            on_create(st)
        base = f"{public_url()}/r/{st.rollout_id}"
        return _Json({"rollout_id": st.rollout_id, "api_key": st.api_key, "openai_base_url": base + "/v1",
                      "anthropic_base_url": base}, status_code=201)

    @admin_route
    async def get_rollout(request: Request) -> Response:
        traj = recorder.snapshot(request.path_params["rollout_id"])
        if traj is None:
            raise ProxyError(f"unknown rollout {request.path_params['rollout_id']!r}", 404, kind="not_found_error")
        return Response(traj.model_dump_json(), media_type="application/json")

    @admin_route
    async def finish(request: Request) -> Response:
        data = await admin_json(request)
        reward, status = data.get("reward"), data.get("status")
        if reward is not None and (not isinstance(reward, (int, float)) or isinstance(reward, bool)):
            raise ProxyError("'reward' must be a number", 400, param="reward")
        if status is not None and status not in {s.value for s in RolloutStatus}:
            raise ProxyError(f"'status' must be one of {[s.value for s in RolloutStatus]}", 400, param="status")
        rewards = data.get("rewards")
        if rewards is not None and not isinstance(rewards, dict):
            raise ProxyError("'rewards' must be an object", 400, param="rewards")
        traj = recorder.finish(request.path_params["rollout_id"], reward=reward, status=status, rewards=rewards,
                               error=data.get("error") if isinstance(data.get("error"), str) else None)
        return Response(traj.model_dump_json(), media_type="application/json")

    @admin_route
    async def pause(request: Request) -> Response:
        await engine.pause()
        return _Json({"paused": True})

    @admin_route
    async def resume(request: Request) -> Response:
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
        Route(base + "/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route(base + "/v1/models", models, methods=["GET"]),
        Route(base + "/v1/models/{model:path}", model, methods=["GET"]),
        Route("/admin/rollouts", create, methods=["POST"]),
        Route("/admin/rollouts/{rollout_id}", get_rollout, methods=["GET"]),
        Route("/admin/rollouts/{rollout_id}/finish", finish, methods=["POST"]),
        Route("/admin/pause", pause, methods=["POST"]),
        Route("/admin/resume", resume, methods=["POST"]),
        Route("/admin/health", health, methods=["GET"]),
        Route(base + "/{rest:path}", unknown, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
    ]
    hot = {"v1/chat/completions": chat, "v1/responses": responses, "v1/messages": messages}
    return _ProxyApp(Starlette(routes=routes), hot)


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
