"""The proxy's HTTP contract as a table: every route (method + path, in matching order) and the
serving routes dispatched straight from the ASGI scope (three by path, the Gemini methods by pattern). A route lost or reordered by a refactor of
the app fails here before any wire test runs."""

from __future__ import annotations

import httpx

from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import ProxyServer

GET = ["GET", "HEAD"]
ROUTES = [
    (GET, "/"),
    (GET, "/r/{rollout_id}"),
    (GET, "/r/{rollout_id}/"),
    (["POST"], "/r/{rollout_id}/v1/messages/count_tokens"),
    (GET, "/r/{rollout_id}/v1/models"),
    (GET, "/r/{rollout_id}/v1/models/{model:path}"),
    (GET, "/r/{rollout_id}/v1beta/models"),
    (GET, "/r/{rollout_id}/v1beta/models/{model:path}"),
    (["POST"], "/admin/rollouts"),
    (GET, "/admin/rollouts"),
    (GET, "/admin/rollouts/{rollout_id}"),
    (["POST"], "/admin/rollouts/{rollout_id}/finish"),
    (["POST"], "/admin/pause"),
    (["POST"], "/admin/resume"),
    (GET, "/admin/health"),
    (["DELETE", "GET", "HEAD", "PATCH", "POST", "PUT"], "/r/{rollout_id}/{rest:path}"),
]
HOT = ["v1/chat/completions", "v1/messages", "v1/responses"]


def _proxy(tokenizer) -> ProxyServer:
    return ProxyServer(ScriptedBackend({"turns": [{"text": "hi"}]}, tokenizer=tokenizer), admin_token="adm")


def test_route_table_is_the_documented_one(tokenizer):
    app = _proxy(tokenizer).app
    assert [(sorted(r.methods), r.path) for r in app.router.routes] == ROUTES
    assert sorted(app.hot) == HOT
    assert app.match("v1beta/models/gemini-x:generateContent")[1] == {"model": "gemini-x", "method": "generateContent"}
    assert app.match("v1/models/m:streamGenerateContent") and app.match("v1alpha/models/m:countTokens")
    assert app.match("v2/models/m:generateContent") is None and app.match("v1beta/models/a/b:generateContent") is None


async def test_every_route_answers_in_its_own_handler(tokenizer):
    """Each route reaches a handler of its own (not the router's 404/405): a GET/POST on every path
    answers with the status its handler gives a request without a key or body."""
    proxy = _proxy(tokenizer)
    h = proxy.create_rollout("t")
    adm = {"authorization": "Bearer adm"}
    r = f"/r/{h.rollout_id}"
    want = [
        ("GET", "/", {}, 200), ("HEAD", r, {}, 200), ("GET", r + "/", {}, 200),
        ("POST", r + "/v1/messages/count_tokens", {}, 401), ("GET", r + "/v1/models", {}, 401),
        ("GET", r + "/v1/models/some/model", {}, 401),
        ("POST", "/admin/rollouts", {}, 401), ("GET", "/admin/rollouts", adm, 200),
        ("GET", f"/admin/rollouts/{h.rollout_id}", adm, 200), ("POST", "/admin/rollouts/nope/finish", {}, 401),
        ("POST", "/admin/pause", {}, 401), ("POST", "/admin/resume", {}, 401), ("GET", "/admin/health", {}, 200),
        ("PUT", r + "/v1/other", {}, 404),
        ("POST", r + "/v1/chat/completions", {}, 401), ("POST", r + "/v1/responses", {}, 401),
        ("POST", r + "/v1/messages", {}, 401),
        ("GET", r + "/v1beta/models", {}, 401), ("GET", r + "/v1beta/models/gemini-x", {}, 401),
        ("POST", r + "/v1beta/models/gemini-x:generateContent", {}, 401),
        ("POST", r + "/v1beta/models/gemini-x:streamGenerateContent", {}, 401),
        ("POST", r + "/v1beta/models/gemini-x:countTokens", {}, 401),
        ("POST", r + "/v1beta/models/gemini-x:embedContent", {}, 404),
    ]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as c:
        got = [(m, p, (await c.request(m, p, headers=hd)).status_code) for m, p, hd, _ in want]
        wrong_method = await c.request("DELETE", "/admin/health")
    assert got == [(m, p, s) for m, p, _, s in want]
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["type"] == "invalid_request_error"
