"""The remote back-ends' HTTP client never reuses a keep-alive connection the server may be closing.

Against a real vLLM server (uvicorn, 5 s keep-alive) aiohttp's default 15 s reuse sent a call down a
connection the server closed at that moment: "Server disconnected", an infra error. The server here
closes, without answering, any request that arrives on a connection idle for 3.5 s or more — what
uvicorn does when its keep-alive timer fires as the request arrives — so the test is deterministic."""

from __future__ import annotations

import asyncio
import json
import time

from openforge.proxy.backends._http import KEEPALIVE_S, JsonClient

IDLE_CLOSE_S = 3.5


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    last = time.monotonic()
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            if time.monotonic() - last >= IDLE_CLOSE_S:  # the server's keep-alive ran out as it arrived
                break
            body = json.dumps({"ok": True}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: keep-alive\r\n"
                         b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
            last = time.monotonic()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def test_an_idle_connection_is_not_reused_past_the_servers_keepalive():
    assert KEEPALIVE_S < IDLE_CLOSE_S
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/completions"
    client = JsonClient(headers={}, timeout_s=10, max_connections=4, label="vLLM")
    try:
        assert await client.json("POST", url, {"n": 1}) == {"ok": True}
        assert await client.json("POST", url, {"n": 2}) == {"ok": True}  # reused at once: fine
        await asyncio.sleep(IDLE_CLOSE_S + 0.5)  # a harness's tool ran this long between two calls
        assert await client.json("POST", url, {"n": 3}) == {"ok": True}
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
