"""Gemini API answers: a canonical result as a ``GenerateContentResponse``, streamed or whole, and errors
in the API's shape.

Owns: :func:`gemini_response` (the JSON answer), :class:`GeminiStream` (the live writer: with ``alt=sse``
one ``data:`` event per chunk, else the chunks as one JSON array written element by element) and
:func:`gemini_error` (``{"error": {"code", "message", "status", "details"}}``, the field named in a
``google.rpc.BadRequest`` field violation).

A candidate's parts: the reasoning as a ``thought`` text part, the text, then one ``functionCall`` part per
tool call (with the call's ``id``). Every chunk of a stream carries a content with at least one part, as
the ``google-genai`` chat session requires to keep a streamed turn in its history; joined in order, the
chunks' text parts are the answer's text and their thought parts its reasoning, exactly.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import ProxyError
from .canonical import CanonicalRequest, CanonicalResult, new_id
from .sse import dumps, sse_data
from .stream import remainder

__all__ = ["GeminiStream", "gemini_error", "gemini_response"]

_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           405: "INVALID_ARGUMENT", 408: "DEADLINE_EXCEEDED", 409: "ABORTED", 413: "INVALID_ARGUMENT",
           415: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
           501: "UNIMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def gemini_error(e: ProxyError) -> dict[str, Any]:
    status = _STATUS.get(e.status, "INTERNAL" if e.status >= 500 else "FAILED_PRECONDITION")
    err: dict[str, Any] = {"code": e.status, "message": e.message, "status": status}
    if e.param:
        err["details"] = [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                           "fieldViolations": [{"field": e.param, "description": e.message}]}]
    return {"error": err}


def _calls(r: CanonicalResult) -> list[dict[str, Any]]:
    out = []
    for t in r.tool_calls:
        args = t.args_dict()
        out.append({"functionCall": {"id": t.id, "name": t.name,
                                     "args": args if isinstance(args, dict) else {"input": args}}})
    return out


def _usage(r: CanonicalResult) -> dict[str, int]:
    return {"promptTokenCount": r.prompt_tokens, "candidatesTokenCount": r.completion_tokens,
            "totalTokenCount": r.prompt_tokens + r.completion_tokens}


def _candidate(req: CanonicalRequest, r: CanonicalResult, parts: list[dict[str, Any]]) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"role": "model", "parts": parts},
                            "finishReason": "MAX_TOKENS" if r.finish_reason == "length" else "STOP", "index": 0}
    if req.extra.get("logprobs") and r.token_logprobs is not None:
        chosen = [{"token": t, "logProbability": lp} for t, lp in r.token_logprobs]
        cand["logprobsResult"] = {"chosenCandidates": chosen, "topCandidates": []}
        if chosen:
            cand["avgLogprobs"] = sum(lp for _, lp in r.token_logprobs) / len(chosen)
    return cand


def _envelope(req: CanonicalRequest, rid: str, cand: dict[str, Any], usage: dict[str, int] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"candidates": [cand]}
    if usage is not None:
        out["usageMetadata"] = usage
    out["modelVersion"] = req.model
    out["responseId"] = rid
    return out


def gemini_response(req: CanonicalRequest, r: CanonicalResult) -> dict[str, Any]:
    """The whole answer as one ``GenerateContentResponse``."""
    parts: list[dict[str, Any]] = [{"text": r.reasoning, "thought": True}] if r.reasoning else []
    if r.text or not r.tool_calls:
        parts.append({"text": r.text})
    return _envelope(req, new_id(""), _candidate(req, r, parts + _calls(r)), _usage(r))


class GeminiStream:
    """The chunks of one streamed answer: deltas as the text is generated, then a closing chunk with
    what is left, the function calls, ``finishReason`` and the usage. ``sse``: ``data:`` events, else
    one JSON array (``[`` on open, ``,`` between chunks, ``]`` after the last)."""

    def __init__(self, req: CanonicalRequest, prompt_tokens: int, *, sse: bool = True):
        self.req, self.prompt_tokens, self.sse = req, prompt_tokens, sse
        self.rid = new_id("")
        self.sent = {"reasoning": "", "text": ""}
        self.chunks = 0

    def _frame(self, obj: dict[str, Any], last: bool = False) -> bytes:
        self.chunks += 1
        if self.sse:
            return sse_data(obj)
        return (b"," if self.chunks > 1 else b"") + dumps(obj) + (b"]" if last else b"\r\n")

    def open(self) -> bytes:
        return b"" if self.sse else b"["

    def delta(self, reasoning: str = "", text: str = "") -> bytes:
        parts: list[dict[str, Any]] = []
        if reasoning:
            self.sent["reasoning"] += reasoning
            parts.append({"text": reasoning, "thought": True})
        if text:
            self.sent["text"] += text
            parts.append({"text": text})
        if not parts:
            return b""
        return self._frame(_envelope(self.req, self.rid, {"content": {"role": "model", "parts": parts}, "index": 0},
                                     None))

    def fail(self, e: ProxyError) -> bytes:
        """A failure after the response started: an error object as the last chunk (the SDK raises on it)."""
        return self._frame(gemini_error(e), last=True)

    def close(self, r: CanonicalResult) -> bytes:
        parts: list[dict[str, Any]] = []
        rest = remainder(self.sent["reasoning"], r.reasoning, "reasoning")
        if rest:
            parts.append({"text": rest, "thought": True})
        rest = remainder(self.sent["text"], r.text, "text")
        if rest:
            parts.append({"text": rest})
        parts += _calls(r)
        if not parts:  # a chunk without parts would drop the turn from a chat session's history
            parts.append({"text": ""})
        return self._frame(_envelope(self.req, self.rid, _candidate(self.req, r, parts), _usage(r)), last=True)
