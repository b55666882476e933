"""The proxy's admin control plane under ``/admin``.

Owns: :class:`AdminRoutes` — admin-token authentication, ``POST /admin/rollouts`` (create: id, key,
base URLs), ``GET /admin/rollouts`` (the open ones), ``GET /admin/rollouts/{id}`` (the trajectory so
far), ``POST /admin/rollouts/{id}/finish`` (waits for the calls in flight, returns the trajectory; a
``status`` that contradicts the ``reward`` under ``success_threshold`` is refused with a 422),
``POST /admin/pause`` / ``/admin/resume`` (weight sync) and ``GET /admin/health``. Admin bodies are
small JSON objects (at most 1 MiB); a field of the wrong type is a 400 naming it, in the admin error
shape (:func:`~.routing.admin_error`).
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..core.errors import ProxyError
from ..core.finite import is_finite_number, is_number
from ..core.types import RolloutStatus
from .intake import decode_body, parse_json, read_body
from .routing import AppState, JsonResponse, LeanRequest, request_key

__all__ = ["AdminRoutes"]


def _field(ok: bool, name: str, what: str) -> None:
    """An admin body field of the wrong type: a 400 naming it."""
    if not ok:
        raise ProxyError(f"'{name}' must be {what}", 400, param=name)


class AdminRoutes:
    """The handlers of the admin routes, reading everything from one :class:`~.routing.AppState`."""

    def __init__(self, state: AppState):
        self.state = state

    def admin(self, request: LeanRequest) -> None:
        """Refuse a request without the admin token (401)."""
        if not secrets.compare_digest((request_key(request) or "").encode(), self.state.admin_token.encode()):
            raise ProxyError("admin token required (Authorization: Bearer $OPENFORGE_ADMIN_TOKEN)", 401,
                             kind="authentication_error")

    async def admin_json(self, request: LeanRequest) -> dict[str, Any]:
        """The admin-authenticated request's JSON object body (``{}`` when empty)."""
        self.admin(request)
        limits = self.state.admin_limits
        body = await read_body(request.receive, request.headers, limits)
        body = decode_body(body, request.headers.get("content-encoding"), limits.max_body)
        return parse_json(body, limits.max_depth) if body.strip() else {}

    async def create(self, request: LeanRequest) -> Response:
        data = await self.admin_json(request)
        task_id, harness, meta = data.get("task_id"), data.get("harness"), data.get("metadata")
        _field(isinstance(task_id, str) and task_id != "", "task_id", "a non-empty string")
        _field(harness is None or isinstance(harness, str), "harness", "a string")
        _field(meta is None or isinstance(meta, dict), "metadata", "an object")
        st = self.state.recorder.create(task_id, harness=harness, metadata=meta)
        if self.state.on_create:
            self.state.on_create(st)
        base = f"{self.state.public_url()}/r/{st.rollout_id}"
        return JsonResponse({"rollout_id": st.rollout_id, "api_key": st.api_key, "openai_base_url": base + "/v1",
                             "anthropic_base_url": base, "gemini_base_url": base}, status_code=201)

    async def get_rollout(self, request: LeanRequest) -> Response:
        self.admin(request)
        traj = self.state.recorder.snapshot(request.path_params["rollout_id"])
        if traj is None:
            raise ProxyError(f"unknown rollout {request.path_params['rollout_id']!r}", 404, param="rollout_id",
                             kind="not_found_error")
        return Response(traj.model_dump_json(), media_type="application/json")

    async def finish(self, request: LeanRequest) -> Response:
        recorder = self.state.recorder
        data = await self.admin_json(request)
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
        threshold = data.get("success_threshold", 1.0)
        _field(is_finite_number(threshold), "success_threshold", "a finite number")
        traj = await recorder.afinish(request.path_params["rollout_id"], wait_s=wait_s, reward=reward, status=status,
                                      rewards=rewards, error=error, success_threshold=threshold)
        return Response(traj.model_dump_json(), media_type="application/json")

    async def list_open(self, request: LeanRequest) -> Response:
        self.admin(request)
        return JsonResponse({"open": self.state.recorder.open_rollouts()})

    async def pause(self, request: LeanRequest) -> Response:
        self.admin(request)
        await self.state.engine.pause()
        return JsonResponse({"paused": True})

    async def resume(self, request: LeanRequest) -> Response:
        self.admin(request)
        await self.state.engine.resume()
        return JsonResponse({"paused": False})

    async def health(self, request: Request) -> Response:
        engine = self.state.engine
        return JsonResponse({"ok": True, "paused": engine.paused, "backend": engine.backend.describe(),
                             "rollouts": len(self.state.recorder.rollouts)})
