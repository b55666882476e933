"""OpenAI Chat Completions wire adapter: request → canonical, result → JSON or SSE chunks.

Owns: :class:`ChatAdapter`, :class:`ChatStream` (the live chunk writer). Streams the full chunk sequence (role chunk, reasoning/content deltas,
tool-call deltas, finish chunk, usage chunk when ``stream_options.include_usage``, ``[DONE]``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, ClassVar

from ..core.errors import ProxyError
from ..core.types import ServedAPI
from .canonical import (
    CanonicalRequest,
    CanonicalResult,
    new_id,
    parse_arguments,
    require,
    stop_strings,
    text_of,
)
from .sse import sse_data
from .stream import remainder
from .wire_fields import check_fields

__all__ = ["ChatAdapter", "ChatStream", "openai_error"]

def openai_error(e: ProxyError) -> dict[str, Any]:
    return {"error": {"message": e.message, "type": e.kind, "param": e.param, "code": e.code}}


def convert_tools(tools: Any, param: str = "tools") -> list[dict[str, Any]]:
    if tools is None:
        return []
    require(isinstance(tools, list), f"'{param}' must be a list", param)
    out = []
    for i, t in enumerate(tools):
        require(isinstance(t, dict), f"'{param}[{i}]' must be an object", f"{param}[{i}]")
        require(t.get("type", "function") == "function",
                f"unsupported tool type {t.get('type')!r} in '{param}[{i}]' (only 'function')", f"{param}[{i}].type")
        fn = t.get("function")
        require(isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"] != "",
                f"'{param}[{i}].function.name' must be a non-empty string", f"{param}[{i}].function.name")
        params = fn.get("parameters")
        require(params is None or isinstance(params, dict), f"'{param}[{i}].function.parameters' must be an object",
                f"{param}[{i}].function.parameters")
        entry = {"name": fn["name"], "description": str(fn.get("description") or ""),
                 "parameters": params or {"type": "object", "properties": {}}}
        out.append({"type": "function", "function": entry})
    return out


def _convert_messages(messages: Any) -> list[dict[str, Any]]:
    require(isinstance(messages, list) and messages, "'messages' must be a non-empty list", "messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        p = f"messages[{i}]"
        require(isinstance(m, dict), f"'{p}' must be an object", p)
        role = m.get("role")
        if role in ("system", "developer"):
            out.append({"role": "system", "content": text_of(m.get("content"), param=f"{p}.content")})
        elif role == "user":
            out.append({"role": "user", "content": text_of(m.get("content"), param=f"{p}.content")})
        elif role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": text_of(m.get("content"), param=f"{p}.content")}
            reasoning = m.get("reasoning_content") or m.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                msg["reasoning_content"] = reasoning
            calls = m.get("tool_calls")
            if calls:
                require(isinstance(calls, list), f"'{p}.tool_calls' must be a list", f"{p}.tool_calls")
                tcs = []
                for j, tc in enumerate(calls):
                    fn = tc.get("function") if isinstance(tc, dict) else None
                    require(isinstance(fn, dict) and isinstance(fn.get("name"), str),
                            f"'{p}.tool_calls[{j}].function.name' must be a string", f"{p}.tool_calls[{j}]")
                    tcs.append({"id": str(tc.get("id") or ""), "type": "function",
                                "function": {"name": fn["name"], "arguments": parse_arguments(fn.get("arguments"))}})
                msg["tool_calls"] = tcs
            out.append(msg)
        elif role in ("tool", "function"):
            out.append({"role": "tool", "content": text_of(m.get("content"), param=f"{p}.content", lenient=True),
                        "tool_call_id": str(m.get("tool_call_id") or m.get("name") or "")})
        else:
            raise ProxyError(f"unsupported role {role!r} in '{p}.role'", 400, param=f"{p}.role")
    return out


class ChatAdapter:
    api: ClassVar[ServedAPI] = "chat"

    def parse(self, body: dict[str, Any], st: Any = None) -> CanonicalRequest:
        fields = check_fields("chat", body)
        model = body.get("model")
        require(isinstance(model, str), "'model' must be a string", "model")
        mt = body.get("max_completion_tokens", body.get("max_tokens"))
        require(mt is None or (isinstance(mt, int) and not isinstance(mt, bool) and mt > 0),
                "'max_completion_tokens' must be a positive integer", "max_completion_tokens")
        stream = body.get("stream", False)
        require(isinstance(stream, bool) or stream is None, "'stream' must be a boolean", "stream")
        for k in ("temperature", "top_p"):
            v = body.get(k)
            require(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)), f"'{k}' must be a number", k)
        so = body.get("stream_options") or {}
        require(isinstance(so, dict), "'stream_options' must be an object", "stream_options")
        tools = convert_tools(body.get("tools"))
        if body.get("tool_choice") == "none":
            tools = []
        return CanonicalRequest(
            api="chat", model=model, messages=_convert_messages(body.get("messages")), tools=tools,
            tool_choice=body.get("tool_choice"), max_tokens=mt, stream=bool(stream),
            temperature=body.get("temperature"), top_p=body.get("top_p"),
            response_format=body.get("response_format"), stop=stop_strings(body.get("stop"), "stop", most=4),
            extra={"fields": fields, "include_usage": bool(so.get("include_usage")), "raw": body, "logprobs": body.get("logprobs") is True},
        )

    @staticmethod
    def _usage(r: CanonicalResult) -> dict[str, int]:
        return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                "total_tokens": r.prompt_tokens + r.completion_tokens}

    @staticmethod
    def _logprobs(r: CanonicalResult) -> dict[str, Any] | None:
        if r.token_logprobs is None:
            return None
        return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                            for t, lp in r.token_logprobs], "refusal": None}

    def respond(self, req: CanonicalRequest, r: CanonicalResult, st: Any = None) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": r.text if (r.text or not r.tool_calls) else None}
        if r.reasoning:
            msg["reasoning_content"] = r.reasoning
        if r.tool_calls:
            msg["tool_calls"] = [{"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.arguments}}
                                 for t in r.tool_calls]
        return {"id": new_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()),
                "model": req.model, "system_fingerprint": "openforge",
                "choices": [{"index": 0, "message": msg, "logprobs": self._logprobs(r), "finish_reason": r.finish_reason}],
                "usage": self._usage(r)}

    def streamer(self, req: CanonicalRequest, st: Any = None, prompt_tokens: int = 0) -> ChatStream:
        """A live chunk writer: :meth:`ChatStream.open`, then deltas, then :meth:`ChatStream.close`."""
        return ChatStream(self, req)

    def stream(self, req: CanonicalRequest, r: CanonicalResult, st: Any = None) -> Iterator[bytes]:
        s = self.streamer(req, st, r.prompt_tokens)
        yield s.open()
        yield s.close(r)


class ChatStream:
    """The chunk sequence of one streamed chat completion, written as generation goes."""

    def __init__(self, adapter: ChatAdapter, req: CanonicalRequest):
        self.adapter, self.req = adapter, req
        self.base = {"id": new_id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()),
                     "model": req.model, "system_fingerprint": "openforge"}
        self.reasoning = self.text = ""

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse_data({**self.base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                   "finish_reason": finish}]})

    def open(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def delta(self, reasoning: str = "", text: str = "") -> bytes:
        out = b""
        if reasoning:
            self.reasoning += reasoning
            out += self._chunk({"reasoning_content": reasoning})
        if text:
            self.text += text
            out += self._chunk({"content": text})
        return out

    def fail(self, e: ProxyError) -> bytes:
        """A failure after the response started: an ``error`` data frame (the SDKs raise on it)."""
        return sse_data(openai_error(e))

    def close(self, r: CanonicalResult) -> bytes:
        out = []
        if r.token_logprobs is not None:  # one chunk carrying every generated token's logprob
            out.append(sse_data({**self.base, "choices": [{"index": 0, "delta": {},
                                                           "logprobs": self.adapter._logprobs(r),
                                                           "finish_reason": None}]}))
        rest = remainder(self.reasoning, r.reasoning, "reasoning")
        if rest:
            out.append(self._chunk({"reasoning_content": rest}))
        rest = remainder(self.text, r.text, "text")
        if rest:
            out.append(self._chunk({"content": rest}))
        for i, t in enumerate(r.tool_calls):
            out.append(self._chunk({"tool_calls": [{"index": i, "id": t.id, "type": "function",
                                                    "function": {"name": t.name, "arguments": ""}}]}))
            out.append(self._chunk({"tool_calls": [{"index": i, "function": {"arguments": t.arguments}}]}))
        out.append(self._chunk({}, r.finish_reason))
        if self.req.extra.get("include_usage"):
            out.append(sse_data({**self.base, "choices": [], "usage": self.adapter._usage(r)}))
        out.append(sse_data("[DONE]"))
        return b"".join(out)
