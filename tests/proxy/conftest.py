"""Shared fixtures: SmolLM2's tokenizer once per session, a scripted proxy factory."""

from __future__ import annotations

import pytest
from testdeps import smollm2_model, smollm2_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return smollm2_tokenizer()


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct ``(model, tokenizer)``, loaded once per session (slow tests only)."""
    return smollm2_model()


def assert_early(arrivals: list[float], t0: float, t_end: float, *, min_total: float, first: float, spread: float,
                 min_count: int = 5) -> None:
    """Deltas really streamed: at least ``min_count`` arrived, the whole took ``min_total`` s or more,
    the first came within the first ``first`` fraction of it, and they spread over ``spread`` of it."""
    assert len(arrivals) >= min_count, arrivals
    total = t_end - t0
    assert total >= min_total, total
    assert arrivals[0] - t0 < first * total, (arrivals[0] - t0, total)
    assert arrivals[-1] - arrivals[0] > spread * total


TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]


class serve_app:
    """Run an ASGI app with uvicorn on a free loopback port inside the current event loop."""

    def __init__(self, app):
        self.app = app

    async def __aenter__(self) -> str:
        import asyncio
        import socket

        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(512)
        sock.setblocking(False)
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False))
        self.task = asyncio.ensure_future(self.server.serve(sockets=[sock]))
        while not self.server.started:
            await asyncio.sleep(0.01)
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def __aexit__(self, *exc):
        self.server.should_exit = True
        await self.task
