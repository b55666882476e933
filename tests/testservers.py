"""Small local servers the tests stand up on loopback: :class:`serve_app` (any ASGI app on a free port,
in the running event loop) and :func:`tool_then_answer_upstream` (a fake OpenAI-compatible API)."""

from __future__ import annotations

import asyncio
import socket

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


class serve_app:
    """Run an ASGI app with uvicorn on a free loopback port inside the current event loop."""

    def __init__(self, app):
        self.app = app

    async def __aenter__(self) -> str:
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


def tool_then_answer_upstream(seen: list | None = None) -> Starlette:
    """An OpenAI-compatible chat API: a ``bash`` tool call first, then a final answer once the tool
    result is in. Request bodies are appended to ``seen``."""

    async def chat(request: Request):
        body = await request.json()
        if seen is not None:
            seen.append(body)
        if body["messages"][-1]["role"] == "tool":
            msg, finish = {"role": "assistant", "content": "Finished."}, "stop"
        else:
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_up1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pwd"}'}}]}
            finish = "tool_calls"
        return JSONResponse({"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                             "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                             "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def serve_address(proc, max_lines: int = 200) -> tuple[str, str]:
    """The URL and admin token a ``forge proxy serve`` subprocess prints (its stdout piped, text mode);
    fails with what it printed when it gives neither."""
    import re

    url = token = None
    seen = []
    for _ in range(max_lines):
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        url = url or (m.group(1) if (m := re.search(r"at (http://127\.0\.0\.1:\d+)", line)) else None)
        token = token or (m.group(1) if (m := re.search(r"admin token .*: (\S+)$", line.strip())) else None)
        if url and token:
            return url, token
    raise AssertionError("forge proxy serve did not print its URL and admin token:\n" + "".join(seen))
