"""The one accept-and-pipe bridge (``openforge.launchers._fwd.bridge``) that every forwarder uses:
bytes both ways, a fresh upstream per connection, an unreachable upstream closes the connection."""

from __future__ import annotations

import asyncio

from openforge.launchers._fwd import bridge, to_tcp, to_unix


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data.upper())
        await writer.drain()
    writer.close()


async def test_bridge_pipes_both_ways_to_a_fresh_upstream_each_time(tmp_path):
    upstream = await asyncio.start_unix_server(_echo, str(tmp_path / "up.sock"))
    seen = []
    front = await asyncio.start_server(bridge(to_unix(str(tmp_path / "up.sock")), lambda: seen.append(1)),
                                       "127.0.0.1", 0)
    port = front.sockets[0].getsockname()[1]
    try:
        for text in (b"hello", b"again"):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(text + b"x" * 200_000)
            await w.drain()
            got = await r.readexactly(len(text) + 200_000)
            assert got == text.upper() + b"X" * 200_000
            w.close()
        assert len(seen) == 2
    finally:
        front.close()
        upstream.close()


async def test_an_unreachable_upstream_closes_the_connection(tmp_path):
    front = await asyncio.start_unix_server(bridge(to_tcp("127.0.0.1", 1)), str(tmp_path / "front.sock"))
    try:
        r, w = await asyncio.open_unix_connection(str(tmp_path / "front.sock"))
        assert await asyncio.wait_for(r.read(), 5) == b""
        w.close()
    finally:
        front.close()
