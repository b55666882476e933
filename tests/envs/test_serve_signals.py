"""Environment servers (``openforge.envs.serve.AppServer``: claw's mock services, the browser env's web
app, the fault forwarder) run one per rollout inside the driver's event loop. They must leave
SIGINT/SIGTERM to the program: uvicorn >= 0.29 swaps its own handlers in while a server runs and puts
back what it found when it stops, so servers stopped out of order left a stopped server's handler
installed, and Ctrl-C / SIGTERM of `forge` (or a benchmark) only flagged a dead server — measured on
`benchmarks/transfer.py`, which ignored both during claw teacher rollouts."""

from __future__ import annotations

import asyncio
import signal

import pytest

from openforge.envs.serve import AppServer


async def _app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await asyncio.sleep(_app.slow_shutdown)
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


_app.slow_shutdown = 0.0


def _handlers() -> tuple:
    return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


async def test_servers_started_and_stopped_out_of_order_leave_the_signal_handlers_alone(tmp_path):
    before = _handlers()
    a = await AppServer(_app, tmp_path / "a.sock").start()
    b = await AppServer(_app, tmp_path / "b.sock").start()
    assert _handlers() == before  # while they serve
    await a.stop()  # the first one started stops first
    assert _handlers() == before
    c = await AppServer(_app, tmp_path / "c.sock").start()
    await b.stop()
    await c.stop()
    assert _handlers() == before


async def test_cancelling_the_caller_of_stop_is_not_swallowed(tmp_path, monkeypatch):
    monkeypatch.setattr(_app, "slow_shutdown", 3.0)  # a shutdown that takes a while
    server = await AppServer(_app, tmp_path / "s.sock").start()
    stopping = asyncio.ensure_future(server.stop())
    await asyncio.sleep(0.3)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
