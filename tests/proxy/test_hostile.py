"""Regression tests for issue 11 part 3: each cause of a 5xx, a hang or unbounded memory the hostile-request
campaign found, answered with a 4xx in the route's error shape before anything runs, or cut off in time.
Timeouts and half-sent requests are played over a real socket."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time

import httpx
import pytest

from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.server import ProxyServer

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MSG = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


class Counting(ScriptedBackend):
    """The scripted policy, counting generations (a refused request must never reach it)."""

    calls = 0

    async def generate(self, prompt_ids, params, ctx=None):
        type(self).calls += 1
        return await super().generate(prompt_ids, params, ctx)


def nested(depth: int) -> str:
    """JSON text nesting objects and arrays ``depth`` levels deep (too deep for ``json.dumps``)."""
    opens = "".join('{"k": ' if i % 2 == 0 else "[" for i in range(depth))
    return opens + '"leaf"' + "".join("}" if i % 2 == 0 else "]" for i in reversed(range(depth)))


def with_raw(base: dict, key: str, raw: str) -> bytes:
    """``base`` as JSON with ``key`` set to the JSON text ``raw``."""
    return (json.dumps(base)[:-1] + f', "{key}": {raw}}}').encode()


@pytest.fixture
def env(tokenizer, tmp_path):
    from openforge.store import TrajectoryStore

    store = TrajectoryStore(tmp_path / "calls.db")
    proxy = ProxyServer(Counting({"turns": [], "final": "ok"}, tokenizer=tokenizer), store=store, admin_token="adm",
                        max_body_bytes=1 << 20)
    h = proxy.create_rollout("hostile")
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p")
    Counting.calls = 0
    yield proxy, h, client
    store.close()


def openai_shape(r: httpx.Response) -> dict:
    err = r.json()["error"]
    assert isinstance(err["message"], str) and isinstance(err["type"], str) and "param" in err, r.text
    return err


def anthropic_shape(r: httpx.Response) -> dict:
    body = r.json()
    assert body["type"] == "error" and isinstance(body["error"]["message"], str), r.text
    return body["error"]


def admin_shape(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message", "field"}, r.text
    return body["error"]


@pytest.mark.parametrize("depth", [65, 255, 980])
async def test_deep_json_is_refused_before_anything_runs(env, depth):
    proxy, h, c = env
    async with c:
        for route, base in (("chat/completions", CHAT), ("responses", {"model": "m", "input": "hi"}),
                            ("messages", MSG), ("messages/count_tokens", MSG)):
            r = await c.post(f"/r/{h.rollout_id}/v1/{route}", content=with_raw(base, "metadata", nested(depth)),
                             headers={"x-api-key": h.api_key})
            assert r.status_code == 400, (route, r.status_code, r.text[:300])
            err = anthropic_shape(r) if "messages" in route else openai_shape(r)
            assert "deeper than 64" in err["message"]
        r = await c.post("/admin/rollouts", content=with_raw({"task_id": "t"}, "metadata", nested(depth)),
                         headers={"x-api-key": "adm"})
        assert r.status_code == 400 and "deeper" in admin_shape(r)["message"]
    assert Counting.calls == 0 and proxy.get_trajectory(h.rollout_id).calls == []  # nothing generated or stored
    r = await httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app), base_url="http://p").post(
        f"/r/{h.rollout_id}/v1/chat/completions", content=with_raw(CHAT, "metadata", nested(63)),  # 64 levels in all
        headers={"x-api-key": h.api_key})
    assert r.status_code == 200 and Counting.calls == 1  # at the limit: served and recorded


@pytest.mark.parametrize("field", ["content", "model", "tool"])
async def test_lone_surrogate_escapes_are_a_400(env, field):
    proxy, h, c = env
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]}
    raw = json.dumps(body).replace({"content": '"hi"', "model": '"m"', "tool": '"t"'}[field], '"a\\ud800b"', 1)
    async with c:
        for route in ("chat/completions", "messages/count_tokens"):
            r = await c.post(f"/r/{h.rollout_id}/v1/{route}", content=raw.encode(),
                             headers={"x-api-key": h.api_key, "content-type": "application/json"})
            assert r.status_code == 400, (route, r.text[:300])
            assert "surrogate" in (anthropic_shape(r) if "messages" in route else openai_shape(r))["message"]
    assert Counting.calls == 0 and proxy.get_trajectory(h.rollout_id).calls == []


async def test_invalid_utf8_and_non_utf8_charsets(env):
    _proxy, h, c = env
    hdr = {"x-api-key": h.api_key, "content-type": "application/json"}
    async with c:
        r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", headers=hdr,
                         content=b'{"model": "m", "messages": [{"role": "user", "content": "\xc3\x28"}]}')
        assert r.status_code == 400 and "UTF-8" in openai_shape(r)["message"]
        utf16 = json.dumps(CHAT).encode("utf-16")
        r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", content=utf16,
                         headers={**hdr, "content-type": "application/json; charset=utf-16"})
        assert r.status_code == 415 and openai_shape(r)["param"] == "content-type"


@pytest.mark.parametrize("value", ["²".encode("latin-1"), "٣".encode(), b"1.5", b"-1", b"9" * 5000, b"0x1"])
async def test_odd_retry_count_is_a_400_naming_the_header(env, value):
    _, h, c = env
    async with c:
        r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", json=CHAT,
                         headers={"x-api-key": h.api_key, "x-stainless-retry-count": value})
        assert r.status_code == 400 and openai_shape(r)["param"] == "x-stainless-retry-count", r.text
        r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", json=CHAT,
                         headers={"x-api-key": h.api_key, "x-stainless-retry-count": "2"})
        assert r.status_code == 200


@pytest.mark.parametrize("route", ["chat/completions", "messages", "messages/count_tokens"])
async def test_odd_content_length_is_a_400_in_the_route_shape(env, route):
    """Over ASGI the header reaches the app as sent (``²`` passes ``isdigit()`` and fails ``int()``)."""
    proxy, h, _ = env
    sent: list[dict] = []
    scope = {"type": "http", "method": "POST", "path": f"/r/{h.rollout_id}/v1/{route}", "raw_path": b"",
             "query_string": b"", "root_path": "", "scheme": "http", "server": ("p", 80), "client": ("c", 1),
             "http_version": "1.1", "asgi": {"version": "3.0"},
             "headers": [(b"x-api-key", h.api_key.encode()), (b"content-length", "²".encode("latin-1"))]}
    msgs = [{"type": "http.request", "body": json.dumps(MSG).encode(), "more_body": False}]

    async def receive():
        return msgs.pop(0) if msgs else {"type": "http.disconnect"}

    async def send(m):
        sent.append(m)

    await proxy.app(scope, receive, send)
    assert sent[0]["status"] == 400
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert (body["error"]["type"] == "invalid_request_error") and "content-length" in body["error"]["message"]


async def test_admin_wrong_types_name_the_field(env):
    proxy, h, c = env
    adm = {"x-api-key": "adm"}
    url = f"/admin/rollouts/{h.rollout_id}/finish"
    async with c:
        for body, field in (({"status": []}, "status"), ({"status": {"a": 1}}, "status"), ({"reward": "x"}, "reward"),
                            ({"reward": True}, "reward"), ({"rewards": {"a": "x"}}, "rewards"),
                            ({"rewards": [1]}, "rewards"), ({"error": 5}, "error")):
            r = await c.post(url, json=body, headers=adm)
            assert r.status_code == 400 and admin_shape(r)["field"] == field, (body, r.text)
        for body, field in (({"task_id": ["x"]}, "task_id"), ({"task_id": "t", "harness": {}}, "harness"),
                            ({"task_id": "t", "metadata": []}, "metadata")):
            r = await c.post("/admin/rollouts", json=body, headers=adm)
            assert r.status_code == 400 and admin_shape(r)["field"] == field, (body, r.text)
        r = await c.post(url, content=b"[1]", headers=adm)
        assert r.status_code == 400 and admin_shape(r)
    assert proxy.get_trajectory(h.rollout_id).status is None or proxy.recorder.get(h.rollout_id).finished is None


async def test_every_admin_and_router_error_is_json_in_its_shape(env):
    _, h, c = env
    async with c:
        for method, path in (("GET", "/admin/nope"), ("PUT", "/admin/health"), ("GET", "/admin/pause"),
                             ("POST", "/admin/rollouts/x/finish"), ("GET", "/admin/rollouts/x")):
            r = await c.request(method, path, headers={"x-api-key": "adm"})
            assert r.status_code in (404, 405), (method, path, r.status_code)
            admin_shape(r)
        r = await c.post("/admin/rollouts", json={"task_id": "t"})
        assert r.status_code == 401 and admin_shape(r)["type"] == "authentication_error"
        r = await c.get("/v1/models")  # no rollout prefix: OpenAI shape
        assert r.status_code == 404 and openai_shape(r)
        r = await c.put(f"/r/{h.rollout_id}/v1/messages/count_tokens", headers={"x-api-key": h.api_key})
        assert r.status_code in (404, 405) and anthropic_shape(r)


async def test_every_content_encoding_is_bounded_on_its_output(env):
    """gzip, deflate (zlib and raw), br, zstd and stacked encodings decode; a bomb in any of them is a
    413 (stopped at the limit), an unknown encoding a 415, corrupt data a 400."""
    import zlib

    _, h, c = env
    ok = json.dumps(CHAT).encode()
    bomb = b'{"x": "' + b"a" * (8 << 20) + b'"}'
    raw_deflate = zlib.compressobj(wbits=-15)
    encoders = {"gzip": gzip.compress, "deflate": zlib.compress, "x-gzip": gzip.compress}
    try:  # the `compression` extra (in `dev`): br and zstd are tested where installed
        import brotli

        encoders["br"] = brotli.compress
    except ImportError:
        pass
    try:
        import zstandard

        encoders["zstd"] = zstandard.ZstdCompressor().compress
    except ImportError:
        pass
    hdr = {"x-api-key": h.api_key, "content-type": "application/json"}
    url = f"/r/{h.rollout_id}/v1/chat/completions"
    async with c:
        for enc, f in encoders.items():
            assert (await c.post(url, content=f(ok), headers={**hdr, "content-encoding": enc})).status_code == 200, enc
            r = await c.post(url, content=f(bomb), headers={**hdr, "content-encoding": enc})
            assert r.status_code == 413 and openai_shape(r)["type"] == "request_too_large", enc
            r = await c.post(url, content=b"\x1f\x8b not really", headers={**hdr, "content-encoding": enc})
            assert r.status_code == 400, enc
        raw = raw_deflate.compress(ok) + raw_deflate.flush()
        assert (await c.post(url, content=raw, headers={**hdr, "content-encoding": "deflate"})).status_code == 200
        outer = "zstd" if "zstd" in encoders else "deflate"
        stacked = encoders[outer](gzip.compress(ok))
        r = await c.post(url, content=stacked, headers={**hdr, "content-encoding": f"gzip, {outer}"})
        assert r.status_code == 200, r.text
        r = await c.post(url, content=gzip.compress(gzip.compress(bomb)), headers={**hdr, "content-encoding": "gzip, gzip"})
        assert r.status_code == 413
        r = await c.post(url, content=gzip.compress(ok), headers={**hdr, "content-encoding": "compress"})
        assert r.status_code == 415 and openai_shape(r)["param"] == "content-encoding"
        r = await c.post(url, content=gzip.compress(ok)[:-6], headers={**hdr, "content-encoding": "gzip"})
        assert r.status_code == 400 and "truncated" in openai_shape(r)["message"]
        r = await c.post(url, content=gzip.compress(b"") * 5000 + gzip.compress(ok),
                         headers={**hdr, "content-encoding": "gzip"})  # 5000 empty members: CPU, not memory
        assert r.status_code == 400 and "members" in openai_shape(r)["message"]


async def test_zstd_bomb_does_not_inflate_proxy_memory(env):
    """32 KB of zstd that inflates to 512 MiB: the proxy stops at its body limit (1 MiB here) — the
    Python heap's peak while serving it stays far below the bomb."""
    import tracemalloc

    zstd = pytest.importorskip("zstandard")
    _, h, c = env
    cobj = zstd.ZstdCompressor(level=3).compressobj()
    parts = [cobj.compress(b'{"x": "')] + [cobj.compress(bytes(1 << 20)) for _ in range(512)]
    bomb = b"".join(parts) + cobj.compress(b'"}') + cobj.flush()
    assert len(bomb) < 64 * 1024
    async with c:
        tracemalloc.start()
        try:
            r = await c.post(f"/r/{h.rollout_id}/v1/chat/completions", content=bomb,
                             headers={"x-api-key": h.api_key, "content-encoding": "zstd"})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert r.status_code == 413 and openai_shape(r)["type"] == "request_too_large", r.text[:300]
    assert peak < 16 << 20, f"peak heap {peak >> 20} MiB serving a {len(bomb)}-byte zstd body"


# -- real sockets: half-sent requests are cut off ------------------------------------------------


async def _closed_within(host: str, port: int, data: bytes, bound: float) -> tuple[float, bytes]:
    """Send ``data``, then nothing: how long until the server closes, and what it answered."""
    reader, writer = await asyncio.open_connection(host, port)
    t0 = time.monotonic()
    got = b""

    async def read_all() -> None:
        nonlocal got
        while chunk := await reader.read(65536):
            got += chunk

    try:
        writer.write(data)
        await writer.drain()
        await asyncio.wait_for(read_all(), bound)
    except (asyncio.TimeoutError, ConnectionError):
        pass
    finally:
        writer.transport.abort()
    return time.monotonic() - t0, got


async def test_half_sent_requests_are_disconnected_in_bounded_time(tokenizer):
    async with ProxyServer(ScriptedBackend({"turns": [], "final": "ok"}, tokenizer=tokenizer),
                           header_timeout_s=0.5, body_timeout_s=0.5) as proxy:
        h = proxy.create_rollout("slow")
        host, port = proxy.url[len("http://"):].split(":")
        body = json.dumps(CHAT).encode()
        head = (f"POST /r/{h.rollout_id}/v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-api-key: {h.api_key}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode()
        cases = {"nothing": b"", "half a request line": head[:10], "half the headers": head[: len(head) // 2],
                 "half the body": head + body[: len(body) // 2]}
        for what, data in cases.items():
            took, got = await _closed_within(host, int(port), data, 5.0)
            assert took < 3.0, f"{what}: still open after {took:.1f} s"
            if data:
                assert got.startswith(b"HTTP/1.1 408"), (what, got[:200])
                assert json.loads(got.split(b"\r\n\r\n", 1)[1])["error"]["message"], what
        # a body dripped a byte at a time: the deadline is for the whole body, not between reads
        reader, writer = await asyncio.open_connection(host, int(port))
        t0 = time.monotonic()
        writer.write(head)
        got = b""
        for b in body:
            try:
                writer.write(bytes([b]))
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.sleep(0.1)
            if reader.at_eof() or time.monotonic() - t0 > 5:
                break
            with contextlib.suppress(asyncio.TimeoutError):
                got += await asyncio.wait_for(reader.read(4096), 0.01)
        writer.transport.abort()
        assert got.startswith(b"HTTP/1.1 408") and time.monotonic() - t0 < 3.0, got[:200]
        # a keep-alive connection that starts a second request and stalls is cut off as well
        took, got = await _closed_within(host, int(port), head + body + head[:20], 5.0)
        # cut off in bounded time; its 408 may be lost to the connection's reset in a busy suite (seen once)
        assert took < 3.0 and got.startswith(b"HTTP/1.1 200"), (took, got[:300])
        async with httpx.AsyncClient() as c:
            r = await c.post(f"{h.openai_base_url}/chat/completions", json=CHAT, headers={"x-api-key": h.api_key})
        assert r.status_code == 200


async def test_oversized_headers_are_refused(tokenizer):
    async with ProxyServer(ScriptedBackend({"turns": [], "final": "ok"}, tokenizer=tokenizer),
                           max_header_bytes=16 * 1024) as proxy:
        host, port = proxy.url[len("http://"):].split(":")
        flood = b"GET /admin/health HTTP/1.1\r\nhost: x\r\n" + b"x-junk: " + b"a" * (1 << 20)
        took, got = await _closed_within(host, int(port), flood, 5.0)
        assert got.startswith(b"HTTP/1.1 431") and took < 3.0, got[:200]
