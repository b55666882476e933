"""Anthropic Messages wire adapter: request → canonical, result → JSON or the SSE event sequence.

Owns: :class:`MessagesAdapter`, :class:`MessagesStream` (the live event writer), :func:`anthropic_error`. Handles system blocks (Claude Code's
``x-anthropic-billing-header`` line is stripped: it changes per request and would break splicing),
``role: system`` messages mid-conversation, ``tool_use`` / ``tool_result`` (text and images),
``thinking`` blocks, Anthropic-defined tools (``bash_*``, ``computer_*``, ``text_editor_*``).
Streams ``message_start, content_block_start, ping, content_block_delta…, content_block_stop,
message_delta, message_stop``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

from ..core.errors import ProxyError
from ..core.types import ServedAPI
from .canonical import CanonicalRequest, CanonicalResult, new_id, require, stop_strings, text_of
from .sse import sse
from .stream import remainder
from .wire_fields import check_fields

__all__ = ["MessagesAdapter", "MessagesStream", "anthropic_error", "strip_billing_header"]

BILLING_PREFIX = "x-anthropic-billing-header:"
_KINDS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
          503: "overloaded_error", 529: "overloaded_error"}
_BUILTIN_SCHEMAS = {
    "bash": {"type": "object", "properties": {"command": {"type": "string"}, "restart": {"type": "boolean"}}},
    "computer": {"type": "object", "properties": {
        "action": {"type": "string"}, "coordinate": {"type": "array", "items": {"type": "integer"}},
        "text": {"type": "string"}}, "required": ["action"]},
    "text_editor": {"type": "object", "properties": {
        "command": {"type": "string"}, "path": {"type": "string"}, "file_text": {"type": "string"},
        "old_str": {"type": "string"}, "new_str": {"type": "string"}, "insert_line": {"type": "integer"},
        "view_range": {"type": "array", "items": {"type": "integer"}}}, "required": ["command", "path"]},
}


def anthropic_error(e: ProxyError) -> dict[str, Any]:
    kind = e.kind if e.kind in _KINDS.values() else _KINDS.get(e.status, "api_error" if e.status >= 500 else
                                                                "invalid_request_error")
    err: dict[str, Any] = {"type": kind, "message": e.message}
    if e.details:
        err["details"] = e.details
    return {"type": "error", "error": err}


def strip_billing_header(text: str) -> str:
    if BILLING_PREFIX not in text:
        return text
    return "\n".join(ln for ln in text.split("\n") if not ln.lstrip().startswith(BILLING_PREFIX)).strip("\n")


def _system_text(system: Any) -> str | None:
    if system is None:
        return None
    if isinstance(system, str):
        return strip_billing_header(system)
    require(isinstance(system, list), "'system' must be a string or a list of text blocks", "system")
    parts = []
    for i, b in enumerate(system):
        require(isinstance(b, dict) and isinstance(b.get("text"), str), f"'system[{i}]' must be a text block",
                f"system[{i}]")
        t = strip_billing_header(b["text"])
        if t:
            parts.append(t)
    return "\n\n".join(parts)


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not tools:
        return []
    require(isinstance(tools, list), "'tools' must be a list", "tools")
    out = []
    for i, t in enumerate(tools):
        require(isinstance(t, dict) and isinstance(t.get("name"), str) and t["name"],
                f"'tools[{i}].name' must be a non-empty string", f"tools[{i}].name")
        schema = t.get("input_schema")
        typ = str(t.get("type") or "custom")
        if schema is None:
            base = next((k for k in _BUILTIN_SCHEMAS if typ.startswith(k)), None)
            require(base is not None or typ == "custom", f"unsupported tool type {typ!r} in 'tools[{i}]'",
                    f"tools[{i}].type")
            schema = _BUILTIN_SCHEMAS.get(base or "", {"type": "object", "properties": {}})
        require(isinstance(schema, dict), f"'tools[{i}].input_schema' must be an object", f"tools[{i}].input_schema")
        desc = t.get("description") or (f"Anthropic-defined tool {typ}" if typ != "custom" else "")
        out.append({"type": "function", "function": {"name": t["name"], "description": str(desc), "parameters": schema}})
    return out


def _messages(messages: Any, system: str | None) -> list[dict[str, Any]]:
    require(isinstance(messages, list) and messages, "'messages' must be a non-empty list", "messages")
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for i, m in enumerate(messages):
        p = f"messages[{i}]"
        require(isinstance(m, dict), f"'{p}' must be an object", p)
        role, content = m.get("role"), m.get("content")
        require(role in ("user", "assistant", "system"), f"unsupported role {role!r} in '{p}.role'", f"{p}.role")
        if role == "system":
            out.append({"role": "system", "content": strip_billing_header(text_of(content, param=f"{p}.content"))})
            continue
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        require(isinstance(blocks, list), f"'{p}.content' must be a string or a list of blocks", f"{p}.content")
        texts: list[str] = []
        tools_out: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        thinking: list[str] = []
        for j, b in enumerate(blocks):
            bp = f"{p}.content[{j}]"
            require(isinstance(b, dict), f"'{bp}' must be an object", bp)
            t = b.get("type")
            if t == "text":
                require(isinstance(b.get("text"), str), f"'{bp}.text' must be a string", f"{bp}.text")
                texts.append(b["text"])
            elif t in ("image", "document"):
                texts.append("[image]" if t == "image" else "[document]")
            elif t == "tool_use" and role == "assistant":
                require(isinstance(b.get("name"), str), f"'{bp}.name' must be a string", f"{bp}.name")
                calls.append({"id": str(b.get("id") or ""), "type": "function",
                              "function": {"name": b["name"], "arguments": b.get("input") or {}}})
            elif t == "tool_result" and role == "user":
                c = text_of(b.get("content"), param=f"{bp}.content", allow=("text",), lenient=True)
                if b.get("is_error") and not c.startswith("Error"):
                    c = f"Error: {c}"
                tools_out.append({"role": "tool", "content": c, "tool_call_id": str(b.get("tool_use_id") or "")})
            elif t == "thinking" and role == "assistant":
                thinking.append(str(b.get("thinking") or ""))
            elif t == "redacted_thinking" and role == "assistant":
                continue
            else:
                raise ProxyError(f"unsupported content block type {t!r} in '{bp}' for role {role!r}", 400,
                                 param=f"{bp}.type")
        if role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
            if thinking and any(thinking):
                msg["reasoning_content"] = "\n".join(thinking)
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        else:
            out.extend(tools_out)
            if texts or not tools_out:
                out.append({"role": "user", "content": "\n".join(texts) if len(texts) > 1 else "".join(texts)})
    return out


def _tool_id(call_id: str) -> str:
    return "toolu_" + call_id[5:] if call_id.startswith("call_") else call_id


class MessagesAdapter:
    api: ClassVar[ServedAPI] = "messages"

    def parse(self, body: dict[str, Any], st: Any = None, *, count_only: bool = False) -> CanonicalRequest:
        fields = check_fields("messages", body)
        model = body.get("model")
        require(isinstance(model, str), "model: Field required (a string)", "model")
        mt = body.get("max_tokens")
        if not count_only:
            require(isinstance(mt, int) and not isinstance(mt, bool) and mt > 0,
                    "max_tokens: Field required (a positive integer)", "max_tokens")
        stream = body.get("stream", False)
        require(isinstance(stream, bool) or stream is None, "'stream' must be a boolean", "stream")
        for k in ("temperature", "top_p"):
            v = body.get(k)
            require(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)), f"'{k}' must be a number", k)
        tools = _tools(body.get("tools"))
        tc = body.get("tool_choice")
        if isinstance(tc, dict) and tc.get("type") == "none":
            tools = []
        return CanonicalRequest(
            api="messages", model=model, messages=_messages(body.get("messages"), _system_text(body.get("system"))),
            tools=tools, tool_choice=tc, max_tokens=mt, stream=bool(stream), temperature=body.get("temperature"),
            top_p=body.get("top_p"), stop=stop_strings(body.get("stop_sequences"), "stop_sequences", most=1000),
            extra={"raw": body, "fields": fields},
        )

    @staticmethod
    def _stop(r: CanonicalResult) -> str:
        if r.stop_sequence is not None:
            return "stop_sequence"
        return {"tool_calls": "tool_use", "length": "max_tokens"}.get(r.finish_reason, "end_turn")

    @staticmethod
    def _usage(r: CanonicalResult) -> dict[str, int]:
        return {"input_tokens": r.prompt_tokens, "output_tokens": r.completion_tokens,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}

    def _blocks(self, r: CanonicalResult) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if r.reasoning:
            blocks.append({"type": "thinking", "thinking": r.reasoning, "signature": ""})
        if r.text or not r.tool_calls:
            blocks.append({"type": "text", "text": r.text})
        for t in r.tool_calls:
            args = t.args_dict()
            blocks.append({"type": "tool_use", "id": _tool_id(t.id), "name": t.name,
                           "input": args if isinstance(args, dict) else {"input": args}})
        return blocks

    def respond(self, req: CanonicalRequest, r: CanonicalResult, st: Any = None) -> dict[str, Any]:
        return {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": req.model,
                "content": self._blocks(r), "stop_reason": self._stop(r), "stop_sequence": r.stop_sequence,
                "usage": self._usage(r)}

    def streamer(self, req: CanonicalRequest, st: Any = None, prompt_tokens: int = 0) -> MessagesStream:
        """A live event writer: :meth:`MessagesStream.open`, then deltas, then :meth:`MessagesStream.close`."""
        return MessagesStream(self, req, prompt_tokens)

    def stream(self, req: CanonicalRequest, r: CanonicalResult, st: Any = None) -> Iterator[bytes]:
        s = self.streamer(req, st, r.prompt_tokens)
        yield s.open()
        yield s.close(r)


def _ev(kind: str, **data: Any) -> bytes:
    return sse(kind, {"type": kind, **data})


class MessagesStream:
    """The event sequence of one streamed message, written as generation goes: the thinking and the
    text block open on their first delta; the rest is written by :meth:`close`."""

    def __init__(self, adapter: MessagesAdapter, req: CanonicalRequest, prompt_tokens: int):
        self.adapter, self.req, self.prompt_tokens = adapter, req, prompt_tokens
        self.opened: list[str] = []  # block kinds in index order
        self.done: set[str] = set()
        self.sent = {"thinking": "", "text": ""}

    def open(self) -> bytes:
        usage = {"input_tokens": self.prompt_tokens, "output_tokens": 1, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        start = {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": self.req.model, "content": [],
                 "stop_reason": None, "stop_sequence": None, "usage": usage}
        return _ev("message_start", message=start) + _ev("ping")

    def _start(self, kind: str, head: dict[str, Any] | None = None) -> bytes:
        self.opened.append(kind)
        head = head or ({"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking"
                        else {"type": "text", "text": ""})
        return _ev("content_block_start", index=len(self.opened) - 1, content_block=head)

    def _delta(self, kind: str, delta: str) -> bytes:
        self.sent[kind] += delta
        d = {"type": "thinking_delta", "thinking": delta} if kind == "thinking" else {"type": "text_delta", "text": delta}
        return _ev("content_block_delta", index=self.opened.index(kind), delta=d)

    def _stop(self, kind: str) -> bytes:
        self.done.add(kind)
        i = self.opened.index(kind)
        out = b""
        if kind == "thinking":
            out = _ev("content_block_delta", index=i, delta={"type": "signature_delta", "signature": ""})
        return out + _ev("content_block_stop", index=i)

    def delta(self, reasoning: str = "", text: str = "") -> bytes:
        out = b""
        if reasoning and "text" not in self.opened:
            if "thinking" not in self.opened:
                out += self._start("thinking")
            out += self._delta("thinking", reasoning)
        if text:
            if "thinking" in self.opened and "thinking" not in self.done:
                out += self._stop("thinking")
            if "text" not in self.opened:
                out += self._start("text")
            out += self._delta("text", text)
        return out

    def fail(self, e: ProxyError) -> bytes:
        """A failure after the response started: an ``error`` event (the SDK raises on it)."""
        return sse("error", anthropic_error(e))

    def close(self, r: CanonicalResult) -> bytes:
        blocks = self.adapter._blocks(r)
        order = {k: i for i, k in enumerate(self.opened)}
        blocks.sort(key=lambda b: order.get(b["type"], len(order)))
        out = []
        for b in blocks:
            kind = b["type"]
            if kind in ("thinking", "text"):
                if kind in self.done:
                    continue
                if kind not in self.opened:
                    out.append(self._start(kind))
                rest = remainder(self.sent[kind], b[kind], kind)
                if rest or (kind == "thinking" and not self.sent[kind]):
                    out.append(self._delta(kind, rest))
                out.append(self._stop(kind))
                continue
            out.append(self._start(b["id"], {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}))
            i = len(self.opened) - 1
            out.append(_ev("content_block_delta", index=i, delta={
                "type": "input_json_delta", "partial_json": json.dumps(b["input"], ensure_ascii=False)}))
            out.append(_ev("content_block_stop", index=i))
        out.append(_ev("message_delta", delta={"stop_reason": self.adapter._stop(r), "stop_sequence": r.stop_sequence},
                       usage={"output_tokens": r.completion_tokens}))
        out.append(_ev("message_stop"))
        return b"".join(out)
