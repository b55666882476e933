"""Readable views of recorded calls for the trajectory viewer of the HTML report.

Owns: :class:`Entry` (one displayable message part), :func:`request_entries` /
:func:`response_entries` (wire JSON of chat, responses, messages or gemini → entries),
:func:`new_request_entries` (only what a call added to the conversation since the call before),
and :func:`token_runs` (a segment's tokens as runs of trained / context tokens, decoded when a
tokenizer is available). Pure functions; no HTML here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.errors import ProxyError
from ..core.gemini_contents import gemini_messages
from ..core.types import ModelCall, Segment

__all__ = ["Entry", "TokenRun", "new_request_entries", "request_entries", "response_entries", "token_runs"]


@dataclass(frozen=True)
class Entry:
    role: str  # system | developer | user | assistant | tool
    kind: str  # text | reasoning | tool_call | tool_result | image
    text: str
    name: str | None = None  # tool name for tool_call
    error: bool | None = None  # tool_result is_error when the wire says


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(p) for p in content if not (isinstance(p, dict) and p.get("type") in
                                                            ("tool_use", "tool_result", "thinking")))
    if isinstance(content, dict):
        if "text" in content:
            return str(content["text"])
        if content.get("type") in ("image", "input_image", "image_url"):
            return "[image]"
        if "content" in content:
            return _text(content["content"])
        return json.dumps(content, ensure_ascii=False)
    return str(content)


def _args(raw: Any) -> str:
    if isinstance(raw, str):
        try:
            return json.dumps(json.loads(raw), ensure_ascii=False, indent=1)
        except ValueError:
            return raw
    return json.dumps(raw, ensure_ascii=False, indent=1)


def _chat_message(msg: dict[str, Any]) -> list[Entry]:
    role = str(msg.get("role", "user"))
    out = []
    if role == "tool":
        return [Entry("tool", "tool_result", _text(msg.get("content")))]
    for key in ("reasoning_content", "reasoning"):
        if isinstance(msg.get(key), str) and msg[key]:
            out.append(Entry(role, "reasoning", msg[key]))
    text = _text(msg.get("content"))
    if text:
        out.append(Entry(role, "text", text))
    for tc in msg.get("tool_calls") or []:
        fn = tc.get("function") or {}
        out.append(Entry(role, "tool_call", _args(fn.get("arguments")), name=str(fn.get("name", ""))))
    return out


def _responses_item(item: Any) -> list[Entry]:
    if isinstance(item, str):
        return [Entry("user", "text", item)]
    if not isinstance(item, dict):
        return []
    kind = item.get("type", "message")
    if kind == "message":
        return [Entry(str(item.get("role", "user")), "text", _text(item.get("content")))]
    if kind == "function_call":
        return [Entry("assistant", "tool_call", _args(item.get("arguments")), name=str(item.get("name", "")))]
    if kind == "custom_tool_call":
        return [Entry("assistant", "tool_call", str(item.get("input", "")), name=str(item.get("name", "")))]
    if kind == "local_shell_call":
        return [Entry("assistant", "tool_call", _args((item.get("action") or {}).get("command")), name="local_shell")]
    if str(kind).endswith("_call_output"):
        return [Entry("tool", "tool_result", _text(item.get("output")))]
    if kind == "reasoning":
        summary = item.get("summary") or item.get("content") or []
        return [Entry("assistant", "reasoning", _text(summary))]
    return [Entry("assistant", "text", json.dumps(item, ensure_ascii=False))]


def _messages_message(msg: dict[str, Any]) -> list[Entry]:
    role = str(msg.get("role", "user"))
    content = msg.get("content")
    if not isinstance(content, list):
        return [Entry(role, "text", _text(content))]
    out = []
    for b in content:
        if not isinstance(b, dict):
            continue
        t = b.get("type")
        if t == "text":
            out.append(Entry(role, "text", str(b.get("text", ""))))
        elif t in ("thinking", "redacted_thinking"):
            out.append(Entry(role, "reasoning", str(b.get("thinking", "") or "[redacted]")))
        elif t in ("tool_use", "server_tool_use"):
            out.append(Entry(role, "tool_call", _args(b.get("input")), name=str(b.get("name", ""))))
        elif t == "tool_result":
            err = b.get("is_error")
            out.append(Entry("tool", "tool_result", _text(b.get("content")), error=bool(err) if err is not None else None))
        elif t == "image":
            out.append(Entry(role, "image", "[image]"))
    return out


def _gemini_messages(req: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        return gemini_messages(req)
    except ProxyError:
        return []


def request_entries(call: ModelCall) -> list[Entry]:
    """The conversation a call sent, as entries (system prompt first)."""
    req = call.request or {}
    out: list[Entry] = []
    if call.api == "gemini" or "contents" in req:
        for m in _gemini_messages(req):
            out += _chat_message(m)
        return out
    if call.api == "messages" or "system" in req:
        if req.get("system"):
            out.append(Entry("system", "text", _text(req["system"])))
        for m in req.get("messages") or []:
            if isinstance(m, dict):
                out += _messages_message(m)
        return out
    if call.api == "responses" or "input" in req:
        if req.get("instructions"):
            out.append(Entry("system", "text", str(req["instructions"])))
        items = req.get("input")
        for it in items if isinstance(items, list) else [items] if items else []:
            out += _responses_item(it)
        return out
    for m in req.get("messages") or []:
        if isinstance(m, dict):
            out += _chat_message(m)
    return out


def response_entries(call: ModelCall) -> list[Entry]:
    """What the policy answered in a call."""
    resp = call.response or {}
    if "tool_calls" in resp or "text" in resp:  # the proxy's canonical record
        out = []
        if resp.get("reasoning"):
            out.append(Entry("assistant", "reasoning", str(resp["reasoning"])))
        if resp.get("text"):
            out.append(Entry("assistant", "text", str(resp["text"])))
        for tc in resp.get("tool_calls") or []:
            if isinstance(tc, dict):
                out.append(Entry("assistant", "tool_call", _args(tc.get("arguments")), name=str(tc.get("name", ""))))
        return out
    if isinstance(resp.get("choices"), list) and resp["choices"]:
        return _chat_message({"role": "assistant", **(resp["choices"][0].get("message") or {})})
    if isinstance(resp.get("output"), list):
        return [e for it in resp["output"] for e in _responses_item(it)]
    if isinstance(resp.get("content"), list):
        return _messages_message({"role": "assistant", "content": resp["content"]})
    return []


def new_request_entries(call: ModelCall, previous: ModelCall | None) -> tuple[list[Entry], bool]:
    """Entries this call added since ``previous`` (its prompt + answer), and whether the history
    was rewritten (the previous conversation is not a prefix of this one)."""
    cur = request_entries(call)
    if previous is None:
        return cur, False
    before = request_entries(previous) + response_entries(previous)
    n = 0
    while n < min(len(before), len(cur)) and before[n].kind == cur[n].kind and before[n].text == cur[n].text:
        n += 1
    if n == len(before):
        return cur[n:], False
    prev_prompt = request_entries(previous)
    if cur[: len(prev_prompt)] == prev_prompt:
        return cur[len(prev_prompt):], False
    return cur, True


@dataclass(frozen=True)
class TokenRun:
    trained: bool
    count: int
    text: str  # decoded text, or the ids joined by spaces when no tokenizer
    decoded: bool


def token_runs(seg: Segment, detokenize: Callable[[Sequence[int]], str] | None = None) -> list[TokenRun]:
    """Maximal runs of equal loss-mask value, decoded with ``detokenize`` when given."""
    runs: list[TokenRun] = []
    ids, mask = seg.input_ids, seg.loss_mask
    i = 0
    while i < len(ids):
        j = i
        while j < len(ids) and mask[j] == mask[i]:
            j += 1
        chunk = ids[i:j]
        if detokenize is not None:
            text, decoded = detokenize(chunk), True
        else:
            text, decoded = " ".join(map(str, chunk)), False
        runs.append(TokenRun(trained=bool(mask[i]), count=j - i, text=text, decoded=decoded))
        i = j
    return runs
