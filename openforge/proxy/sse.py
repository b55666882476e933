"""Server-sent-events framing and JSON encoding shared by the wire adapters.

Owns: :func:`sse` (one ``event:``/``data:`` frame), :func:`sse_data` (a ``data:``-only frame, Chat
Completions style), :func:`dumps` (compact JSON bytes), :func:`loads` (JSON text or bytes; raises
``ValueError`` on bad input).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dumps", "loads", "sse", "sse_data"]


try:
    import orjson

    loads = orjson.loads  # orjson.JSONDecodeError is a ValueError

    def dumps(obj: Any) -> bytes:
        try:
            return orjson.dumps(obj)
        except TypeError:  # e.g. integers beyond 64 bits echoed from a request
            return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()

except ImportError:  # pragma: no cover
    loads = json.loads

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def sse(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + dumps(data) + b"\n\n"


def sse_data(data: dict[str, Any] | str) -> bytes:
    if isinstance(data, str):
        return b"data: " + data.encode() + b"\n\n"
    return b"data: " + dumps(data) + b"\n\n"
