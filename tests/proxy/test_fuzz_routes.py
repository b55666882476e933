"""Seeded hostile-request fuzzing of EVERY proxy route (issue 11): thousands of generated requests —
deep nesting, lone surrogates, invalid UTF-8, wrong types at every field, huge numbers, odd and repeated
headers, compression bombs and bogus encodings, split and truncated bodies — driven in-process straight
through the ASGI app (so hostile header bytes reach it unfiltered), then malformed and half-sent
requests over a real socket. The back-end is the scripted policy, which never fails, so a 5xx is
always a proxy bug. Asserts: no 5xx, every error body in its route's API shape, every request answered
(or cut off) within a bound, and normal SDK calls still work afterwards."""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import time
import zlib
from collections import Counter
from typing import Any

import pytest

from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.proxy.routes_model import GEMINI_PATH
from openforge.proxy.server import ProxyServer

SEED, N_REQUESTS, BOUND_S = 11, 5000, 5.0
LIMIT = 256 * 1024  # the fuzzed proxy's body limit
DEEP, SURR, BADU = "\x00DEEP", "\x00SURR\x00", "\x00BADU\x00"  # placeholders spliced in after json.dumps

TOOLS = [{"type": "function", "function": {"name": "sh", "parameters": {"type": "object", "properties": {
    "cmd": {"type": "string"}}}}}]
BASES: dict[str, dict[str, Any]] = {
    "chat": {"model": "m", "max_tokens": 8, "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                               "function": {"name": "sh", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}], "tools": TOOLS, "stream": False,
        "temperature": 1.0, "stream_options": {"include_usage": True}},
    "responses": {"model": "m", "max_output_tokens": 8, "instructions": "be brief", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}],
        "tools": [{"type": "function", "name": "sh", "parameters": {"type": "object"}}], "stream": False},
    "messages": {"model": "m", "max_tokens": 8, "system": [{"type": "text", "text": "be brief"}], "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"},
                                          {"type": "tool_use", "id": "t1", "name": "sh", "input": {"cmd": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": "ok"}]}]}],
        "tools": [{"name": "sh", "input_schema": {"type": "object"}}], "stream": False},
    "gemini": {"systemInstruction": {"parts": [{"text": "be brief"}]}, "contents": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"text": "hm", "thought": True}, {"functionCall": {"name": "sh", "args": {"cmd": "ls"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "sh", "response": {"output": "ok"}}}]}],
        "tools": [{"functionDeclarations": [{"name": "sh", "parameters": {"type": "OBJECT", "properties": {
            "cmd": {"type": "STRING"}}}}]}], "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "generationConfig": {"maxOutputTokens": 8, "temperature": 1.0, "stopSequences": ["\n\n"]}},
    "create": {"task_id": "t", "harness": "h", "metadata": {"k": [1, 2]}},
    "finish": {"reward": 1.0, "status": "success", "rewards": {"a": 0.5}, "error": "e"},
    "none": {},
}
ODD_HEADERS = {
    "x-stainless-retry-count": [b"1", b"\xb2", "\u0663".encode(), b"-1", b"9" * 40, b"", b"1.0", b" 2 "],
    "content-type": [b"application/json", b"application/json; charset=utf-16", b"text/plain", b"; charset",
                     b"application/json; charset=\"UTF-8\"", b"\xff\xfe", b"application/json;;;charset=latin-1"],
    "anthropic-version": [b"2023-06-01", b"\xff" * 10, b"x" * 3000],
    "anthropic-beta": [b"a,b,,c", b"\x00\x01", b"x" * 3000],
    "idempotency-key": [b"k" * 8000, b"\xe9", b""],
    "accept": [b"*/*", b"text/event-stream", b"\x80"],
    "authorization": [b"Bearer", b"Bearer \xff\xfe", b"Basic Zm9vOmJhcg==", b"bearer  "],
    "x-api-key": [b"", b"\xff" * 64, b"sk-" + b"a" * 5000],
    "x-goog-api-key": [b"", b"\xff" * 64, b"k" * 5000],
}


def _hostile(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(22)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, -1, 2**31, 2**63 - 1, 2**64 + 1, 10**30, -(10**30)])
    if pick == 3:
        return rng.choice([1.5, -0.0, 1e308, -1e308, 5e-324])
    if pick == 4:
        return rng.choice(["", "²", "\u0000", "<tool_call>", "<think>", "</think>", "\u202e", "🦀" * 50])
    if pick == 5:
        return "x" * rng.choice([1, 100, 5000, 60000])
    if pick == 6:
        return f"{DEEP}{rng.choice([63, 64, 65, 200, 255, 980, 1100, 5000])}\x00"
    if pick == 7:
        return SURR
    if pick == 8:
        return BADU
    if pick in (9, 10) and depth < 3:
        return [_hostile(rng, depth + 1) for _ in range(rng.randrange(4))]
    if pick in (11, 12) and depth < 3:
        return {rng.choice(["type", "text", "content", "role", "name", "id", "input", "x"]): _hostile(rng, depth + 1)
                for _ in range(rng.randrange(4))}
    if pick == 13:
        if rng.random() < 0.3:  # a Gemini part
            return {rng.choice(["text", "functionCall", "functionResponse", "inlineData", "thought", "executableCode",
                                "function_call"]): _hostile(rng, depth + 1) if depth < 3 else "t"}
        return {"type": rng.choice(["text", "image", "tool_use", "tool_result", "thinking", "input_text",
                                    "function_call", "function_call_output", "message", "redacted_thinking",
                                    "document", "reasoning", "custom_tool_call", "bogus"]),
                "text": _hostile(rng, depth + 1) if depth < 3 else "t"}
    if pick == 14:
        return rng.choice(["user", "assistant", "system", "tool", "developer", "function", "bogus"])
    return rng.choice([[], {}, "ok", 1, [1, "a"], {"a": 1}, [{"role": "user", "content": "x"}]])


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    body = json.loads(json.dumps(body))
    for _ in range(rng.randrange(1, 4)):
        paths = _paths(body)
        if not paths or rng.random() < 0.25:
            body[rng.choice(["model", "messages", "input", "tools", "tool_choice", "stream", "max_tokens", "n",
                             "max_output_tokens", "system", "instructions", "previous_response_id", "metadata",
                             "temperature", "top_p", "thinking", "logit_bias", "audio", "task_id", "reward",
                             "status", "rewards", "error", "harness", "response_format", "text", "contents",
                             "systemInstruction", "generationConfig", "toolConfig", "cachedContent"])] = _hostile(rng)
            continue
        *parent, last = rng.choice(paths)
        node = body
        for p in parent:
            node = node[p]
        if rng.random() < 0.15 and isinstance(node, dict):
            del node[last]
        else:
            node[last] = _hostile(rng)
    return body


def _encode(rng: random.Random, body: dict[str, Any]) -> bytes:
    text = json.dumps(body, ensure_ascii=False)
    while DEEP.replace("\x00", "\\u0000") in text:  # json.dumps escapes the NULs
        head, _, rest = text.partition('"\\u0000DEEP')
        n, _, tail = rest.partition('\\u0000"')
        depth = int(n)
        text = head + '{"a": [' * (depth // 2) + "1" + "]}" * (depth // 2) + tail
    text = text.replace('"\\u0000SURR\\u0000"', rng.choice(['"\\ud800"', '"a\\udfff"', '"\\ud83d\\u0041"']))
    raw = text.encode("utf-8", "surrogatepass")
    return raw.replace(b'"\\u0000BADU\\u0000"', rng.choice([b'"\xff\xfe"', b'"\xc3\x28"', b'"\xed\xa0\x80"',
                                                             b'"\xf4\x90\x80\x80"', b'"\xc0\xaf"']))


def _bomb(enc: str) -> bytes:
    payload = b'{"x": "' + bytes(4 << 20) + b'"}'
    if enc == "br":
        import brotli

        return brotli.compress(payload, quality=1)
    if enc == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(payload)
    return gzip.compress(payload) if enc == "gzip" else zlib.compress(payload)


def _compressors() -> dict[str, Any]:
    out: dict[str, Any] = {"gzip": gzip.compress, "deflate": zlib.compress}
    try:
        import brotli

        out["br"] = brotli.compress
    except ImportError:
        pass
    try:
        import zstandard

        out["zstd"] = zstandard.ZstdCompressor().compress
    except ImportError:
        pass
    return out


def _body_bytes(rng: random.Random, base: str, comp: dict[str, Any], bombs: dict[str, bytes]
                ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """A hostile body for ``base`` and the encoding headers that go with it."""
    roll = rng.random()
    if base == "none" and roll < 0.6:
        raw = b""
    elif roll < 0.08:
        raw = rng.choice([b"", b"{", b"null", b"[]", b'"s"', b"\xef\xbb\xbf{}", b"{}" * 3, b"\x00" * 10,
                          bytes(rng.randrange(256) for _ in range(64)), b'{"a": NaN}', b'{"a": 1e999}',
                          b"  " * 1000 + b"{}", b'{"a": 1,}', b"\xff\xfe{\x00}\x00"])
    else:
        raw = _encode(rng, _mutate(rng, BASES[base]) if rng.random() < 0.85 else BASES[base])
        if rng.random() < 0.05:
            raw = raw[: rng.randrange(len(raw) + 1)]
    headers: list[tuple[bytes, bytes]] = []
    roll = rng.random()
    if roll < 0.08:
        enc = rng.choice(list(comp))
        raw = comp[enc](raw)
        headers.append((b"content-encoding", enc.encode()))
    elif roll < 0.11:
        enc = rng.choice(list(bombs))
        raw = bombs[enc]
        headers.append((b"content-encoding", enc.encode()))
    elif roll < 0.13:
        inner, outer = rng.choice(list(comp)), rng.choice(list(comp))
        raw = comp[outer](comp[inner](raw))
        headers += [(b"content-encoding", inner.encode()), (b"content-encoding", outer.encode())]
    elif roll < 0.16:
        headers.append((b"content-encoding", rng.choice([b"compress", b"gzip, gzip, gzip, gzip", b"identity",
                                                          b"GZIP", b"\xff", b"gzip;q=1", b"zstd", b"br", b""])))
    return raw, headers


class _Asgi:
    """A minimal in-process HTTP/1.1 client for an ASGI app: any header bytes, the body in chunks, and
    ``receive`` answering ``http.disconnect`` only once the response is complete (as uvicorn does)."""

    def __init__(self, app: Any):
        self.app = app

    async def request(self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes,
                      chunks: int = 1) -> tuple[int, dict[bytes, bytes], bytes]:
        step = max(1, -(-len(body) // chunks))
        parts = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
        queue = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
        done = asyncio.Event()
        start: dict[str, Any] = {}
        out: list[bytes] = []

        async def receive() -> dict[str, Any]:
            if queue:
                return queue.pop(0)
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                start.update(msg)
            elif msg["type"] == "http.response.body":
                out.append(msg.get("body", b""))
                if not msg.get("more_body"):
                    done.set()

        path, _, query = path.partition("?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
                 "headers": [(b"host", b"proxy"), *headers], "client": ("127.0.0.1", 1), "server": ("proxy", 80)}
        await self.app(scope, receive, send)
        done.set()
        return start["status"], dict(start.get("headers", [])), b"".join(out)


def _expected_shape(api: str, method: str, path: str, headers: list[tuple[bytes, bytes]]) -> str:
    """The shape of a route's errors; the routes that answer whoever calls them (no such route, the
    models list) in the shape of the client the request's path or headers say it is."""
    names = {k for k, _ in headers}
    if api == "gemini" and method == "POST" and not GEMINI_PATH.fullmatch(path.split("/", 3)[3].partition("?")[0]):
        api = "unknown"  # a model name with a slash: no Gemini method, the router's 404
    if api == "models":
        return "gemini" if b"x-goog-api-key" in names else "chat"
    if api != "unknown":
        return api
    if "/messages" in path:
        return "messages"
    if "/v1beta/" in path:
        return "gemini"
    if b"anthropic-version" in names:
        return "messages"
    return "gemini" if b"x-goog-api-key" in names else "chat"


def _shape_ok(api: str, body: bytes, status: int) -> bool:
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return False
    if api == "gemini":
        return set(doc) == {"error"} and err.get("code") == status and isinstance(err.get("status"), str)
    if not isinstance(err.get("type"), str):
        return False
    if api == "messages":
        return doc.get("type") == "error"
    if api == "admin":
        return set(doc) == {"error"} and set(err) == {"type", "message", "field"}
    return set(doc) == {"error"} and {"param", "code"} <= set(err)


@pytest.fixture(scope="module")
def fuzzed(tokenizer):
    proxy = ProxyServer(ScriptedBackend({"turns": [], "final": "ok"}, tokenizer=tokenizer), admin_token="adm",
                        max_body_bytes=LIMIT, header_timeout_s=0.5, body_timeout_s=0.5)
    return proxy


async def test_thousands_of_hostile_requests_on_every_route(fuzzed):
    proxy = fuzzed
    if proxy.engine.pool is not None:  # large prompts render in token workers: start them before timing requests
        await proxy.engine.pool.render([{"role": "user", "content": "warm " * 8000}], None, [])
    try:
        await _fuzz_every_route(proxy)
    finally:
        await proxy.engine.aclose()


async def _fuzz_every_route(proxy: ProxyServer) -> None:
    rng = random.Random(SEED)
    client = _Asgi(proxy.app)
    live = proxy.create_rollout("fuzz")
    comp = _compressors()
    bombs = {enc: _bomb(enc) for enc in comp}
    to_finish = [proxy.create_rollout("fin").rollout_id for _ in range(40)]

    def route(rid: str, key: str) -> tuple[str, str, str, str, list[tuple[bytes, bytes]]]:
        """method, path, body base, expected error shape, auth headers."""
        user = [(b"x-api-key", key.encode())] if rng.random() < 0.9 else [
            (rng.choice([b"x-api-key", b"authorization"]), rng.choice(ODD_HEADERS["x-api-key"]))]
        goog = [(b"x-goog-api-key", key.encode())] if rng.random() < 0.9 else [
            (b"x-goog-api-key", rng.choice(ODD_HEADERS["x-goog-api-key"]))]
        admin = [(b"authorization", b"Bearer adm")] if rng.random() < 0.9 else [
            (b"authorization", rng.choice(ODD_HEADERS["authorization"]))]
        junk = rng.choice(["x", "%ff%fe", "a" * 300, "..%2f..", "gpt-4o/../../admin"])
        model = rng.choice(["gemini-x", "m", junk])
        table = [
            ("POST", f"/r/{rid}/v1/chat/completions", "chat", "chat", user),
            ("POST", f"/r/{rid}/v1/responses", "responses", "chat", user),
            ("POST", f"/r/{rid}/v1/messages", "messages", "messages", user),
            ("POST", f"/r/{rid}/v1/messages/count_tokens", "messages", "messages", user),
            ("POST", f"/r/{rid}/v1beta/models/{model}:generateContent", "gemini", "gemini", goog),
            ("POST", f"/r/{rid}/v1beta/models/{model}:streamGenerateContent"
                     f"{rng.choice(['', '?alt=sse', '?alt=json', '?alt=%ff', '?' + '&'.join(['a=1'] * 40)])}",
             "gemini", "gemini", goog),
            ("POST", f"/r/{rid}/v1/models/{model}:countTokens", "gemini", "gemini", goog),
            ("GET", f"/r/{rid}/v1beta/models", "none", "gemini", goog),
            ("GET", f"/r/{rid}/v1/models", "none", "models", user),
            ("GET", f"/r/{rid}/v1/models/{junk}", "none", "models", user),
            ("HEAD", f"/r/{rid}", "none", "chat", user),
            ("HEAD", "/", "none", "chat", []),
            ("GET", f"/r/{rid}/v1/{junk}", "chat", "unknown", user),
            ("POST", "/admin/rollouts", "create", "admin", admin),
            ("GET", f"/admin/rollouts/{rng.choice([rid, junk])}", "none", "admin", admin),
            ("POST", f"/admin/rollouts/{rng.choice([*to_finish, junk])}/finish", "finish", "admin", admin),
            ("POST", "/admin/pause", "none", "admin", admin),
            ("POST", "/admin/resume", "none", "admin", admin),
            ("GET", "/admin/health", "none", "admin", admin),
            (rng.choice(["PUT", "DELETE", "PATCH", "GET"]), rng.choice(["/admin/rollouts", "/admin/health",
                                                                         f"/r/{rid}/v1/messages/count_tokens"]),
             "none", "", admin),
        ]
        method, path, base, api, auth = table[rng.randrange(len(table))]
        if not api:  # a wrong method: the path says which shape
            api = "admin" if path.startswith("/admin") else "messages"
        return method, path, base, api, auth

    statuses: Counter = Counter()
    slowest = 0.0
    t_start = time.monotonic()
    for i in range(N_REQUESTS):
        method, path, base, api, auth = route(live.rollout_id, live.api_key)
        body, enc_headers = _body_bytes(rng, base, comp, bombs)
        headers = auth + enc_headers
        for name, values in ODD_HEADERS.items():
            if name not in ("authorization", "x-api-key") and rng.random() < 0.06:
                headers.append((name.encode(), rng.choice(values)))
        api = _expected_shape(api, method, path, headers)
        if rng.random() < 0.03:
            headers.append((b"content-length", rng.choice([b"\xb2", b"-5", b"99999999999999999999", b"1e3", b"0"])))
        t0 = time.monotonic()
        status, _rheaders, rbody = await asyncio.wait_for(
            client.request(method, path, headers, body, chunks=rng.choice([1, 1, 1, 2, 7])), BOUND_S * 2)
        took = time.monotonic() - t0
        slowest = max(slowest, took)
        what = f"#{i} {method} {path} headers={headers!r:.300} body={body[:300]!r} -> {status} {rbody[:400]!r}"
        assert status < 500, what
        assert took < BOUND_S, f"{took:.1f}s: {what}"
        if status >= 400 and method != "HEAD" and status != 499:
            assert _shape_ok(api, rbody, status), what
        if path == "/admin/pause" and status == 200:
            await proxy.resume()  # the fuzzer must not leave new calls waiting
        statuses[(api, status)] += 1
    took_all = time.monotonic() - t_start
    print(f"{N_REQUESTS} hostile requests in {took_all:.1f}s, slowest {slowest * 1000:.0f} ms: {sorted(statuses.items())}")
    for api in ("chat", "messages", "gemini", "admin"):  # every shape got both served and refused traffic
        assert any(s < 300 for (a, s) in statuses if a == api) and any(s >= 400 for (a, s) in statuses if a == api)
    assert statuses[("chat", 413)] and statuses[("chat", 400)] and statuses[("messages", 400)]
    assert statuses[("gemini", 400)] and statuses[("gemini", 413)]


async def test_malformed_and_half_sent_requests_over_a_real_socket(fuzzed, tokenizer):
    """Raw HTTP/1.1 abuse against the listening server: garbage request lines, bogus or conflicting
    content-lengths, bad chunked framing, truncated bodies, stalled headers, slowloris, header floods,
    pipelining. Every connection is answered (< 500) or closed within the bound; the real SDKs work after."""
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    proxy = fuzzed
    rng = random.Random(SEED + 1)
    async with proxy:
        h = proxy.create_rollout("socket")
        host, port = proxy.url[len("http://"):].split(":")
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        path = f"/r/{h.rollout_id}/v1/chat/completions".encode()
        auth = f"x-api-key: {h.api_key}\r\n".encode()

        def req(extra: bytes = b"", content: bytes = body, cl: bytes | None = None, close: bool = True) -> bytes:
            """A request; ``connection: close`` unless told, so an answered one ends its connection."""
            cl = str(len(content)).encode() if cl is None else cl
            extra += b"connection: close\r\n" if close else b""
            return b"POST " + path + b" HTTP/1.1\r\nhost: x\r\n" + auth + b"content-length: " + cl + b"\r\n" + extra + \
                b"\r\n" + content

        cases: list[tuple[str, bytes, float]] = [
            ("garbage", bytes(rng.randrange(256) for _ in range(200)), 0),
            ("nul request line", b"\x00\x00\x00\r\n\r\n", 0),
            ("bad method", b"P\xffST / HTTP/1.1\r\nhost: x\r\n\r\n", 0),
            ("http/9", b"GET / HTTP/9.9\r\n\r\n", 0),
            ("superscript length", req(cl=b"\xb2"), 0),
            ("negative length", req(cl=b"-1"), 0),
            ("conflicting lengths", req(extra=b"content-length: 3\r\n"), 0),
            ("length beyond limit", req(cl=str(LIMIT * 8).encode(), content=b"{}"), 0),
            ("truncated body", req(cl=str(len(body) + 50).encode()), 0),
            ("half the headers", req()[:40], 0),
            ("half a request line", b"POST /r/", 0),
            ("nothing", b"", 0),
            ("bad chunk size", b"POST " + path + b" HTTP/1.1\r\nhost: x\r\n" + auth +
             b"transfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 0),
            ("chunked, never ends", b"POST " + path + b" HTTP/1.1\r\nhost: x\r\n" + auth +
             b"transfer-encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n", 0),
            ("chunked and length", req(extra=b"transfer-encoding: chunked\r\n"), 0),
            ("header flood", b"GET /admin/health HTTP/1.1\r\n" + b"x-a: b\r\n" * 20000, 0),
            ("one huge header", b"GET /admin/health HTTP/1.1\r\nx-a: " + b"a" * (2 << 20), 0),
            ("slowloris", req()[:60], 0.15),
            ("pipelined then stalled", req(close=False) + req(close=False) + req()[:30], 0),
            ("gzip bomb", req(extra=b"content-encoding: gzip\r\n", content=_bomb("gzip")), 0),
            ("bad latin-1 header", req(extra=b"x-stainless-retry-count: \xb2\r\n"), 0),
        ]

        async def play(what: str, data: bytes, drip: float) -> None:
            reader, writer = await asyncio.open_connection(host, int(port))
            t0 = time.monotonic()
            got = b""

            async def talk() -> None:
                nonlocal got
                try:
                    if drip:  # one byte at a time, forever (until the server hangs up)
                        for b in data:
                            writer.write(bytes([b]))
                            await writer.drain()
                            await asyncio.sleep(drip)
                    else:
                        writer.write(data)
                        await writer.drain()
                except ConnectionError:
                    pass
                while chunk := await reader.read(65536):
                    got += chunk

            try:
                await asyncio.wait_for(talk(), BOUND_S)
            except (asyncio.TimeoutError, ConnectionError):
                pass
            finally:
                writer.transport.abort()
            took = time.monotonic() - t0
            assert took < BOUND_S - 0.5, f"{what}: connection still open after {took:.1f}s (got {got[:200]!r})"
            for line in got.split(b"\r\n"):
                if line.startswith(b"HTTP/1.1 "):
                    assert int(line.split()[1]) < 500, (what, got[:500])

        await asyncio.gather(*(play(*c) for c in cases))

        oai = openai.AsyncOpenAI(base_url=h.openai_base_url, api_key=h.api_key, max_retries=0)
        r = await oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "still there?"}])
        assert r.choices[0].message.content == "ok"
        ant = anthropic.AsyncAnthropic(base_url=h.anthropic_base_url, api_key=h.api_key, max_retries=0)
        m = await ant.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "and now?"}])
        assert m.content[0].text == "ok"
        genai = pytest.importorskip("google.genai")
        gem = genai.Client(api_key=h.api_key, http_options={"base_url": h.gemini_base_url})
        g = await gem.aio.models.generate_content(model="m", contents="and Gemini?")
        assert g.text == "ok"
