"""Bad input never gets a 5xx or crashes the server: malformed JSON, wrong types, unknown fields, huge
bodies, random structures (hypothesis), and clients that drop an SSE stream half-way."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import ProxyServer

ROUTES = ["v1/chat/completions", "v1/responses", "v1/messages", "v1/messages/count_tokens",
          "v1beta/models/m:generateContent", "v1beta/models/m:streamGenerateContent?alt=sse",
          "v1beta/models/m:countTokens"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c, max_size=4)),
                      max_leaves=12)
KEYS = ["model", "messages", "input", "tools", "tool_choice", "stream", "max_tokens", "max_output_tokens",
        "max_completion_tokens", "temperature", "top_p", "n", "system", "instructions", "previous_response_id",
        "stream_options", "response_format", "metadata", "thinking", "role", "content", "type", "contents",
        "systemInstruction", "generationConfig", "toolConfig", "parts", "functionDeclarations"]
msg_like = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool", "developer", "bogus", 3]),
                                  "content": values}, optional={"tool_calls": values, "type": values, "tool_call_id": values})
part_like = st.one_of(values, st.fixed_dictionaries({}, optional={
    k: values for k in ("text", "thought", "functionCall", "functionResponse", "inlineData", "function_call")}))
content_like = st.fixed_dictionaries({"parts": st.one_of(values, st.lists(part_like, max_size=3))},
                                     optional={"role": st.sampled_from(["user", "model", "function", "bogus", 3])})
bodies = st.one_of(
    st.fixed_dictionaries({"contents": st.lists(content_like, max_size=3)},
                          optional={"tools": st.one_of(values, st.lists(st.fixed_dictionaries(
                              {"functionDeclarations": st.lists(values, max_size=2)}), max_size=2)),
                                    "systemInstruction": values, "generationConfig": values, "toolConfig": values}),
    st.dictionaries(st.sampled_from(KEYS), values, max_size=8),
    st.fixed_dictionaries({"model": st.just("m"), "max_tokens": st.just(8)},
                          optional={"messages": st.lists(msg_like, max_size=3), "input": st.one_of(st.text(max_size=10), st.lists(msg_like, max_size=3)),
                                    "tools": values, "stream": st.booleans(), "system": values}),
)


@pytest.fixture(scope="module")
def fuzz_env(tokenizer):
    proxy = ProxyServer(ScriptedBackend({"turns": [], "final": "ok"}, tokenizer=tokenizer), max_body_bytes=1 << 20)
    h = proxy.create_rollout("fuzz")
    return proxy, h


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(route=st.sampled_from(ROUTES), body=bodies)
async def test_random_bodies_never_5xx(fuzz_env, route, body):
    proxy, h = fuzz_env
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as c:
        r = await c.post(f"/r/{h.rollout_id}/{route}", json=body, headers={"x-api-key": h.api_key})
    assert r.status_code < 500, (body, r.text)
    if r.status_code >= 400:
        err = r.json()
        assert (err.get("error") or {}).get("message"), err


async def test_malformed_and_huge_bodies(fuzz_env):
    proxy, h = fuzz_env
    hdr = {"x-api-key": h.api_key, "content-type": "application/json"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p") as c:
        for route in ROUTES:
            for raw in (b"{", b"", b"[1,2]", b"null", b'"str"', b"\xff\xfe", b'{"model": "m", "messages": [}'):
                r = await c.post(f"/r/{h.rollout_id}/{route}", content=raw, headers=hdr)
                assert r.status_code == 400, (route, raw, r.text)
            r = await c.post(f"/r/{h.rollout_id}/{route}", content=b'{"x": "' + b"a" * (2 << 20) + b'"}', headers=hdr)
            assert r.status_code == 413
        import gzip
        import json as _json

        ok = _json.dumps({"model": "m", "messages": [{"role": "user", "content": "gz"}]}).encode()
        r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", content=gzip.compress(ok),
                         headers={**hdr, "content-encoding": "gzip"})
        assert r.status_code == 200
        r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", content=b"not gzip",
                         headers={**hdr, "content-encoding": "gzip"})
        assert r.status_code == 400
        bomb = gzip.compress(b'{"x": "' + b"a" * (4 << 20) + b'"}')
        r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", content=bomb, headers={**hdr, "content-encoding": "gzip"})
        assert r.status_code == 413
        r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", headers=hdr, json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}], "brand_new_field": {"x": 1}, "store": False})
        assert r.status_code == 200  # unknown fields are served as if absent (harnesses add new ones all the time)
        r = await c.post(f"/r/{h.rollout_id}/v1/messages", headers=hdr, json={
            "model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "mystery"}]}]})
        assert r.status_code == 400 and "mystery" in r.json()["error"]["message"]


async def test_truncated_sse_clients_do_not_hurt_the_server(tokenizer):
    async with ProxyServer(ScriptedBackend({"turns": [], "final": "x" * 2000}, tokenizer=tokenizer)) as proxy:
        h = proxy.create_rollout("t")
        host, port = proxy.url[len("http://"):].split(":")
        for i in range(5):
            body = (f'{{"model":"m","stream":true,"messages":[{{"role":"user","content":"q{i}"}}]}}').encode()
            req = (f"POST /r/{h.rollout_id}/v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-api-key: {h.api_key}\r\n"
                   f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(req if i % 2 else req[: len(req) - 5])  # half of them never even finish the body
            await writer.drain()
            if i % 2:
                await reader.read(200)  # read the start of the stream, then drop the connection
            writer.transport.abort()
        s = socket.create_connection((host, int(port)))
        s.close()
        async with httpx.AsyncClient() as c:
            r = await c.post(f"{h.openai_base_url}/chat/completions", headers={"x-api-key": h.api_key},
                             json={"model": "m", "messages": [{"role": "user", "content": "still there?"}]})
        assert r.status_code == 200
        traj = proxy.finish_rollout(h.rollout_id)
        traj.validate_segments()
