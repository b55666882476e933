"""The HTTP client the remote back-ends (``vllm:``, ``openai:``) share: aiohttp when installed (about a
third of httpx's per-request CPU cost, which matters for proxy overhead), httpx otherwise.

Owns: :class:`JsonClient` — ``await request(method, url, body) -> (status, text)`` and
``async for lines in stream_lines(method, url, body)`` (a streamed answer's complete lines, as each
network read brings them), a non-200 answer raised as :class:`HTTPRefused` (status and body),
with transport errors mapped to :class:`~openforge.core.errors.BackendError` /
:class:`~openforge.core.errors.BackendTimeout` — and :class:`SSEChunks` (the JSON chunks of an
OpenAI-style ``data:`` stream).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import contextmanager
from typing import Any

from ...core.errors import BackendError, BackendTimeout
from ..sse import dumps, loads

__all__ = ["HTTPRefused", "JsonClient", "SSEChunks"]

#: Idle keep-alive connections are reused for this long only: below the servers' own keep-alive (vLLM's
#: uvicorn closes an idle connection after 5 s, VLLM_HTTP_TIMEOUT_KEEP_ALIVE). aiohttp's default, 15 s,
#: reuses a connection the server is closing at that moment: the call fails "Server disconnected", and
#: a rollout whose tool ran ~5 s between two calls became an infra error (seen against a real vLLM).
KEEPALIVE_S = 3.0


class HTTPRefused(BackendError):
    """The server answered a request with a non-200 status (``status``, ``body``: its first 2,000 chars)."""

    def __init__(self, message: str, *, status: int, body: str):
        super().__init__(message)
        self.status, self.body = status, body


def _refused(label: str, method: str, url: str, status: int, text: str) -> HTTPRefused:
    return HTTPRefused(f"{label} {method} {url} -> HTTP {status}: {text[:500]}", status=status, body=text[:2000])


class JsonClient:
    def __init__(self, *, headers: dict[str, str], timeout_s: float, max_connections: int, label: str):
        self.headers = {"content-type": "application/json", **headers}
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.label = label
        self._session: Any = None
        self._httpx: Any = None

    def _client(self) -> Any:
        if self._session is None and self._httpx is None:
            try:
                import aiohttp

                self._session = aiohttp.ClientSession(
                    headers=self.headers,
                    connector=aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=self.max_connections,
                                                   keepalive_timeout=KEEPALIVE_S),
                    timeout=aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=10.0))
            except ImportError:
                import httpx

                self._httpx = httpx.AsyncClient(
                    headers=self.headers, timeout=httpx.Timeout(self.timeout_s, connect=10.0),
                    limits=httpx.Limits(max_connections=self.max_connections,
                                        max_keepalive_connections=self.max_connections, keepalive_expiry=KEEPALIVE_S))
        return self._session or self._httpx

    async def request(self, method: str, url: str, body: Any = None) -> tuple[int, str]:
        client = self._client()
        data = dumps(body) if body is not None else None
        with self._errors():
            if self._session is not None:
                async with client.request(method, url, data=data) as r:
                    return r.status, await r.text()
            r = await client.request(method, url, content=data)
            return r.status_code, r.text

    async def stream_lines(self, method: str, url: str, body: Any = None) -> AsyncIterator[list[str]]:
        """The answer's complete lines (without line ends), a list per network read, as they arrive
        (under load one read brings several SSE events: they are handled in one step). A non-200
        answer raises :class:`BackendError` with its body before anything is yielded."""
        client = self._client()
        data = dumps(body) if body is not None else None
        with self._errors():
            if self._session is not None:
                async with client.request(method, url, data=data) as r:
                    if r.status != 200:
                        raise _refused(self.label, method, url, r.status, await r.text())
                    rest = b""
                    async for data in r.content.iter_any():
                        lines = (rest + data).split(b"\n")
                        rest = lines.pop()
                        if lines:
                            yield [raw.decode("utf-8", "replace").rstrip("\r") for raw in lines]
                    if rest:
                        yield [rest.decode("utf-8", "replace").rstrip("\r")]
                return
            async with client.stream(method, url, content=data) as r:
                if r.status_code != 200:
                    raise _refused(self.label, method, url, r.status_code,
                                   (await r.aread()).decode("utf-8", "replace"))
                async for line in r.aiter_lines():
                    yield [line]

    @contextmanager
    def _errors(self):
        try:
            yield
        except BackendError:  # before TimeoutError: a BackendTimeout is one, and keeps its message
            raise
        except asyncio.TimeoutError:
            raise BackendTimeout(f"{self.label} timed out after {self.timeout_s:g}s") from None
        except Exception as e:
            if type(e).__name__ in ("TimeoutException", "ReadTimeout", "ConnectTimeout", "PoolTimeout", "WriteTimeout"):
                raise BackendTimeout(f"{self.label} timed out: {e}") from None
            if isinstance(e, (OSError, ValueError)) or type(e).__module__.split(".")[0] in ("aiohttp", "httpx", "httpcore"):
                raise BackendError(f"{self.label} unreachable: {type(e).__name__}: {e}") from None
            raise

    async def json(self, method: str, url: str, body: Any = None) -> Any:
        status, text = await self.request(method, url, body)
        if status != 200:
            raise _refused(self.label, method, url, status, text)
        try:
            return json.loads(text)
        except ValueError:
            raise BackendError(f"{self.label} {url} returned non-JSON: {text[:200]}") from None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._httpx is not None:
            await self._httpx.aclose()
            self._httpx = None


class SSEChunks:
    """``async for chunks in SSEChunks(stream_lines(...), label)``: the JSON objects of the ``data:``
    lines, a list per network read, until ``data: [DONE]`` (then :attr:`done` is true). A malformed
    chunk or an ``{"error": ...}`` chunk raises :class:`BackendError`; other non-blank lines that are
    not SSE fields are kept in :attr:`other` (an upstream that ignored ``stream`` answers with one JSON
    body)."""

    def __init__(self, lines: AsyncIterator[list[str]], label: str):
        self.lines, self.label = lines, label
        self.done = False
        self.other: list[str] = []

    async def __aiter__(self) -> AsyncIterator[list[dict[str, Any]]]:
        try:
            async for batch in self.lines:
                chunks = []
                for line in batch:
                    if not line.startswith("data:"):
                        if line and not line.startswith((":", "event:", "id:", "retry:")):
                            self.other.append(line)
                        continue  # blank separators, comments, "event:" lines
                    data = line[5:].strip()
                    if data == "[DONE]":
                        self.done = True
                        break
                    try:
                        chunk = loads(data)
                    except ValueError:
                        chunk = None
                    if not isinstance(chunk, dict):
                        raise BackendError(f"{self.label} sent a malformed stream chunk: {data[:200]}")
                    if chunk.get("error"):
                        raise BackendError(f"{self.label} stream failed: {json.dumps(chunk['error'])[:500]}")
                    chunks.append(chunk)
                if chunks:
                    yield chunks
                if self.done:
                    return
        finally:
            await self.lines.aclose()  # type: ignore[attr-defined]
