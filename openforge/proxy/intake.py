"""Bounded request intake: everything the proxy does with a request's bytes before a route sees a dict.

Owns: :class:`Limits` (body size, JSON depth), :func:`header_map` (the request's headers, repeated ones
joined), :func:`read_body` (a size limit on receiving the body),
:func:`decode_body` (every content-encoding, stacked ones too, with a bound on the decompressed OUTPUT),
:func:`parse_json` (strict UTF-8, no lone surrogates, no NaN, bounded nesting) and the defensive parsing of
the header values the proxy reads (:func:`header_uint`, :func:`check_content_type`).

Every failure is a :class:`ProxyError` with a 4xx status that names the header, the limit or the
problem (400 malformed, 413 too large, 415 unsupported encoding or charset), raised before
anything is rendered, generated or stored. Nothing here recurses over the request, so no input depth
can exhaust the stack.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..core.errors import ProxyError

__all__ = [
    "Limits",
    "check_content_type",
    "decode_body",
    "deeper_than",
    "header_map",
    "header_uint",
    "parse_json",
    "read_body",
]

Receive = Callable[[], Awaitable[Any]]

MAX_ENCODINGS = 3  # stacked content-encodings accepted on one body
MAX_GZIP_MEMBERS = 64  # concatenated gzip members (millions of empty ones would pin a core)
ZSTD_MAX_WINDOW = 1 << 24  # decoder memory a zstd frame may ask for (level 19 uses 8 MiB)
_UTF8 = {"utf-8", "utf8", "us-ascii", "ascii"}
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Limits:
    """What one request body may cost: ``max_body`` bytes (before and after decompression), JSON
    nested at most ``max_depth`` levels."""

    max_body: int = 64 * 1024 * 1024
    max_depth: int = 64


class BodyDisconnect(ConnectionError):
    """The client went away while sending the body."""


def header_map(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Lower-cased header names to values (latin-1, never fails); a repeated header's values are joined
    with ``", "`` (HTTP's list rule), so stacked ``content-encoding`` lines are all honoured."""
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw}
    if len(headers) != len(raw):
        headers = {}
        for k, v in raw:
            name, value = k.decode("latin-1"), v.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def header_uint(headers: Mapping[str, str], name: str, *, default: int = 0, max_digits: int = 9) -> int:
    """A non-negative integer header (ASCII digits only: ``²`` or ``٣`` are refused, not crashed on)."""
    v = headers.get(name)
    if v is None:
        return default
    s = v.strip()
    if not s or len(s) > max_digits or not (s.isascii() and s.isdigit()):
        raise ProxyError(f"header '{name}' must be a non-negative integer of at most {max_digits} digits, "
                         f"got {v[:40]!r}", 400, param=name)
    return int(s)


def check_content_type(headers: Mapping[str, str]) -> None:
    """A declared charset must be UTF-8 (JSON's only encoding); the media type itself is not policed."""
    ct = headers.get("content-type")
    if not ct or ";" not in ct:
        return
    for param in ct.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            cs = value.strip().strip('"').lower()
            if cs not in _UTF8:
                raise ProxyError(f"unsupported charset {cs[:40]!r} in header 'content-type': request bodies "
                                 "must be UTF-8 JSON", 415, param="content-type", kind="unsupported_media_type")


def _too_large(limit: int, what: str = "request body") -> ProxyError:
    return ProxyError(f"{what} exceeds the limit of {limit} bytes", 413, kind="request_too_large")


async def read_body(receive: Receive, headers: Mapping[str, str], limits: Limits) -> bytes:
    """The raw body, refused early when ``content-length`` says it is too large and cut off at
    ``limits.max_body`` bytes. Raises :class:`BodyDisconnect` when the client hangs up first (the
    server's body deadline, :mod:`.conn_guard`, hangs up on a client that stalls)."""
    declared = header_uint(headers, "content-length", default=-1, max_digits=18)
    if declared > limits.max_body:
        raise _too_large(limits.max_body, f"request body of {declared} bytes")
    check_content_type(headers)
    return await _receive_all(receive, limits.max_body)


async def _receive_all(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            raise BodyDisconnect()
        chunk = msg.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        if not msg.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def decode_body(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """Undo ``content-encoding`` (``gzip``/``x-gzip``, ``deflate``, ``br``, ``zstd``, ``identity``,
    stacked as ``gzip, zstd``: decoded last-applied first), each stage streamed and stopped at ``limit``
    bytes of output (413). Unknown encodings are a 415, corrupt or truncated data a 400."""
    if not content_encoding:
        return body
    encs = [e.strip().lower() for e in content_encoding.split(",")]
    encs = [e for e in encs if e and e != "identity"]
    if len(encs) > MAX_ENCODINGS:
        raise ProxyError(f"header 'content-encoding' stacks {len(encs)} encodings (at most {MAX_ENCODINGS})", 400,
                         param="content-encoding")
    for enc in reversed(encs):
        decoder = _DECODERS.get(enc)
        if decoder is None:
            raise ProxyError(f"unsupported content-encoding {enc[:40]!r} (send identity, gzip, deflate, br or zstd)",
                             415, param="content-encoding", kind="unsupported_media_type")
        try:
            body = decoder(body, limit)
        except ProxyError:
            raise
        except Exception as e:  # zlib.error, brotli.error, zstandard.ZstdError, ...
            raise ProxyError(f"request body is not valid {enc}: {e}", 400, param="content-encoding") from None
    return body


def _zlib(body: bytes, limit: int, *, deflate: bool) -> bytes:
    """gzip (any number of members) or deflate (zlib-wrapped, or raw as some clients send it)."""
    out = bytearray()
    data, wbits = body, 47  # 47: gzip or zlib header, auto-detected
    for _ in range(MAX_GZIP_MEMBERS):
        d = zlib.decompressobj(wbits)
        try:
            out += d.decompress(data, limit + 1 - len(out))
        except zlib.error:
            if not (deflate and wbits == 47 and not out):
                raise
            data, wbits = body, -15  # raw deflate
            continue
        if len(out) > limit:
            raise _too_large(limit, "decompressed request body")
        if not d.eof:
            raise ProxyError("request body is truncated compressed data", 400, param="content-encoding")
        data = d.unused_data
        if not data.strip(b"\0"):
            return bytes(out)
        if deflate:
            raise ProxyError("request body has data after the end of its deflate stream", 400,
                             param="content-encoding")
    raise ProxyError(f"request body has more than {MAX_GZIP_MEMBERS} gzip members", 400, param="content-encoding")


def _gzip(body: bytes, limit: int) -> bytes:
    return _zlib(body, limit, deflate=False)


def _deflate(body: bytes, limit: int) -> bytes:
    return _zlib(body, limit, deflate=True)


def _brotli(body: bytes, limit: int) -> bytes:
    try:
        import brotli
    except ImportError:
        raise ProxyError("content-encoding br needs the brotli package on the proxy host", 415,
                         param="content-encoding", kind="unsupported_media_type") from None
    d = brotli.Decompressor()
    if not hasattr(d, "can_accept_more_data"):  # brotli < 1.2 cannot bound its output
        raise ProxyError("content-encoding br needs brotli >= 1.2 on the proxy host", 415,
                         param="content-encoding", kind="unsupported_media_type")
    out = bytearray(d.process(body, output_buffer_limit=limit + 1))
    while len(out) <= limit and not d.can_accept_more_data():
        out += d.process(b"", output_buffer_limit=limit + 1 - len(out))
    if len(out) > limit:
        raise _too_large(limit, "decompressed request body")
    if not d.is_finished():
        raise ProxyError("request body is truncated compressed data", 400, param="content-encoding")
    return bytes(out)


def _zstd(body: bytes, limit: int) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise ProxyError("content-encoding zstd needs the zstandard package on the proxy host", 415,
                         param="content-encoding", kind="unsupported_media_type") from None
    dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    out = bytearray()
    with dctx.stream_reader(body, read_across_frames=True) as reader:
        while True:
            chunk = reader.read(min(1 << 20, limit + 1 - len(out)))
            if not chunk:
                return bytes(out)
            out += chunk
            if len(out) > limit:
                raise _too_large(limit, "decompressed request body")


_DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": _gzip, "x-gzip": _gzip, "deflate": _deflate, "br": _brotli, "zstd": _zstd,
}


def parse_json(body: bytes, max_depth: int) -> dict[str, Any]:
    """The body as a JSON object: strict UTF-8 (invalid bytes and lone ``\\ud800`` escapes are a 400),
    no NaN/Infinity, at most ``max_depth`` levels of nesting (checked without recursion, and only when
    the body has enough brackets to possibly be that deep)."""
    if body[:3] == _BOM:
        body = body[3:]
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ProxyError(f"request body is not valid JSON: {e}", 400) from None
    if type(data) is not dict:
        raise ProxyError("request body must be a JSON object", 400)
    if body.count(b"{") + body.count(b"[") > max_depth and deeper_than(data, max_depth):
        raise ProxyError(f"request body nests JSON deeper than {max_depth} levels", 400)
    return data


def deeper_than(obj: dict[str, Any] | list[Any], limit: int) -> bool:
    """Whether ``obj`` (depth 1) holds a container at depth ``limit + 1``: breadth-first, level by level."""
    level: list[Any] = [obj]
    for _ in range(limit):
        level = [v for o in level for v in (o.values() if type(o) is dict else o)
                 if type(v) is dict or type(v) is list]
        if not level:
            return False
    return True
