"""Per-request cost of the proxy's bounded request intake (issue 11) against the intake it replaced.

Measures, in one run and on the same bodies, the CPU time of turning a request's ASGI messages and
headers into a JSON dict:

* **before**: the old path — headers decoded into a dict, ``content-length`` checked with ``isdigit``,
  the body chunks joined, ``json.loads`` (stdlib, recursive, lets lone surrogates and NaN through);
* **after**: :mod:`openforge.proxy.intake` — ``header_map``, ``header_uint`` for the retry count,
  ``read_body`` (size limit), ``decode_body``, ``parse_json`` (orjson, strict UTF-8, depth bound
  checked without recursion). The header/body deadlines live in the connection protocol
  (:mod:`openforge.proxy.conn_guard`) and cost no timer for a request that arrives in one socket read;
* **depth check alone**: the breadth-first depth walk on the already-parsed body (it runs only when
  the body has more brackets than the depth limit).

Bodies: a one-message chat call, a 20-message call with 5 tools, and a 200-message coding-agent call
with 30 tools with nested schemas (~300 KB). Prints microseconds per request and the after/before ratio.

Usage: ``python benchmarks/request_intake.py [--seconds 1.0]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from openforge.proxy.intake import (
    Limits,
    decode_body,
    deeper_than,
    header_map,
    header_uint,
    parse_json,
    read_body,
)

HEADERS = [(b"host", b"127.0.0.1:8787"), (b"authorization", b"Bearer sk-of-" + b"k" * 32),
           (b"content-type", b"application/json"), (b"user-agent", b"OpenAI/Python 1.99.0"),
           (b"x-stainless-retry-count", b"0"), (b"x-stainless-lang", b"python"), (b"accept", b"application/json")]


def _schema(depth: int) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "string", "description": "a leaf"}
    for i in range(depth):
        s = {"type": "object", "properties": {f"p{i}": s, "flag": {"type": "boolean"}}, "required": [f"p{i}"]}
    return s


def bodies() -> dict[str, bytes]:
    small = {"model": "m", "messages": [{"role": "user", "content": "Hello there, what is 2 + 2?"}]}
    tools = [{"type": "function", "function": {"name": f"tool{i}", "description": "does a thing " * 5,
                                               "parameters": _schema(4)}} for i in range(30)]
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent. " * 40}]
    for i in range(100):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
            "name": "tool1", "arguments": json.dumps({"cmd": f"cat file{i}.py", "flag": True})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "def f(x):\n    return x * 2\n" * 40})
    medium = {"model": "m", "messages": msgs[:21], "tools": tools[:5], "stream": True}
    large = {"model": "m", "messages": msgs, "tools": tools, "stream": True, "max_tokens": 1024}
    return {name: json.dumps(b).encode() for name, b in (("small", small), ("medium", medium), ("large", large))}


async def before(body: bytes) -> dict[str, Any]:
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in HEADERS}
    n = headers.get("content-length")
    if n and n.isdigit() and int(n) > Limits.max_body:
        raise ValueError("too large")
    chunks = [body]
    data = json.loads(b"".join(chunks))
    retry = headers.get("x-stainless-retry-count", "0")
    _ = int(retry) if retry.isdigit() else 0
    return data


async def after(body: bytes, limits: Limits) -> dict[str, Any]:
    headers = header_map(HEADERS)
    header_uint(headers, "x-stainless-retry-count")
    msgs = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return msgs.pop()

    raw = await read_body(receive, headers, limits)
    return parse_json(decode_body(raw, headers.get("content-encoding"), limits.max_body), limits.max_depth)


async def per_call_us(fn: Any, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            await fn()
        n += 20
    return (time.perf_counter() - t0) / n * 1e6


async def main(seconds: float) -> None:
    limits = Limits()
    print(f"{'body':<8}{'bytes':>9}{'before µs':>12}{'after µs':>11}{'after/before':>14}{'depth walk µs':>15}")
    for name, body in bodies().items():
        b = await per_call_us(lambda body=body: before(body), seconds)
        a = await per_call_us(lambda body=body: after(body, limits), seconds)
        parsed = json.loads(body)

        async def walk(parsed: Any = parsed) -> None:
            deeper_than(parsed, limits.max_depth)

        w = await per_call_us(walk, seconds)
        print(f"{name:<8}{len(body):>9}{b:>12.1f}{a:>11.1f}{a / b:>14.2f}{w:>15.1f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="measuring time per cell")
    asyncio.run(main(ap.parse_args().seconds))
