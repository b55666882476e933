"""The proxy's ASGI app: per-rollout model API routes and the admin control plane.

Owns: :func:`build_app` and the route table — the HTTP contract of DESIGN (routes under
``/r/{rollout_id}``: ``POST /v1/chat/completions``, ``POST /v1/responses``, ``POST /v1/messages``
(+ ``/count_tokens``), ``POST /{v1beta|v1|v1alpha}/models/{model}:generateContent|streamGenerateContent|countTokens``
(the Gemini API), ``GET /v1/models``, ``GET /v1beta/models``, ``HEAD /``; admin: ``POST /admin/rollouts``, ``GET /admin/rollouts``
(open ones), ``GET /admin/rollouts/{id}``, ``POST /admin/rollouts/{id}/finish`` (waits for the calls in
flight), ``POST /admin/pause``, ``POST /admin/resume``, ``GET /admin/health``). Every error comes back in
the called API's error shape, with a status the SDKs retry only when retrying can help (5xx/429 for
back-end trouble, 4xx for the caller's mistakes); admin routes answer errors as
``{"error": {"type", "message", "field"}}`` (:func:`admin_error`). Bodies are read, decompressed and
parsed within bounds by :mod:`.intake` before any route logic runs.

The handlers live where their job is: :mod:`.routes_model` (model API routes), :mod:`.routes_admin`
(control plane), :mod:`.live` (live SSE streaming), :mod:`.routing` (the shared :class:`AppState`,
error shapes, the guard). The serving routes are dispatched straight from the ASGI scope
(:class:`ProxyApp`); the rest go through a Starlette router.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Route

from .engine import Engine
from .intake import Limits
from .recorder import RolloutState
from .routes_admin import AdminRoutes
from .routes_model import ModelRoutes
from .routing import AppState, Handler, LeanRequest, admin_error, guard, http_error

#: The handler and path parameters of a path below ``/r/{rollout_id}/`` matched by pattern, or None.
Matcher = Callable[[str], "tuple[Handler, dict[str, str]] | None"]

__all__ = ["MAX_BODY_BYTES", "AppState", "ProxyApp", "admin_error", "build_app", "routes"]

MAX_BODY_BYTES = 64 * 1024 * 1024


class ProxyApp:
    """The proxy's ASGI app: ``POST /r/{rollout_id}/v1/{chat/completions,responses,messages}`` and the
    paths ``match`` knows (the Gemini API's ``models/{model}:{method}``) go straight to their handlers;
    everything else goes through the Starlette router."""

    def __init__(self, router: Starlette, hot: dict[str, Handler], match: Matcher | None = None):
        self.router, self.hot, self.match = router, hot, match

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].startswith("/r/"):
            rid, _, rest = scope["path"][3:].partition("/")
            handler, params = self.hot.get(rest), {"rollout_id": rid}
            if handler is None and self.match is not None and rid:
                found = self.match(rest)
                if found is not None:
                    handler, params = found[0], {**params, **found[1]}
            if handler is not None and rid:
                response = await handler(LeanRequest(scope, receive, params))
                await response(scope, receive, send)
                return
        await self.router(scope, receive, send)


def routes(model: ModelRoutes, admin: AdminRoutes) -> list[Route]:
    """The route table behind the Starlette router, in matching order (the catch-all 404 last)."""
    base = "/r/{rollout_id}"
    return [
        Route("/", model.root, methods=["GET", "HEAD"]),
        Route(base, model.root, methods=["GET", "HEAD"]),
        Route(base + "/", model.root, methods=["GET", "HEAD"]),
        Route(base + "/v1/messages/count_tokens", guard("messages", model.count_tokens), methods=["POST"]),
        Route(base + "/v1/models", guard("chat", model.models), methods=["GET"]),
        Route(base + "/v1/models/{model:path}", guard("chat", model.model), methods=["GET"]),
        Route(base + "/v1beta/models", guard("gemini", model.gemini_models), methods=["GET"]),
        Route(base + "/v1beta/models/{model:path}", guard("gemini", model.gemini_model), methods=["GET"]),
        Route("/admin/rollouts", guard("admin", admin.create), methods=["POST"]),
        Route("/admin/rollouts", guard("admin", admin.list_open), methods=["GET"]),
        Route("/admin/rollouts/{rollout_id}", guard("admin", admin.get_rollout), methods=["GET"]),
        Route("/admin/rollouts/{rollout_id}/finish", guard("admin", admin.finish), methods=["POST"]),
        Route("/admin/pause", guard("admin", admin.pause), methods=["POST"]),
        Route("/admin/resume", guard("admin", admin.resume), methods=["POST"]),
        Route("/admin/health", admin.health, methods=["GET"]),
        Route(base + "/{rest:path}", model.unknown, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
    ]


def build_app(engine: Engine, *, admin_token: str, public_url: Callable[[], str],
              max_body: int = MAX_BODY_BYTES, on_create: Callable[[RolloutState], Any] | None = None,
              limits: Limits | None = None) -> ProxyApp:
    """The proxy's ASGI app. ``limits`` bound every request body (``max_body`` is its size when
    ``limits`` is not given); admin bodies are further capped at 1 MiB."""
    state = AppState(engine, admin_token=admin_token, public_url=public_url,
                     limits=limits or Limits(max_body=max_body), on_create=on_create)
    model, admin = ModelRoutes(state), AdminRoutes(state)
    router = Starlette(routes=routes(model, admin), exception_handlers={HTTPException: http_error, Exception: http_error})
    return ProxyApp(router, model.hot(), model.gemini_route)
