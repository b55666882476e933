"""OpenAI Responses wire adapter: request → canonical, result → JSON or the SSE event sequence.

Owns: :class:`ResponsesAdapter`, :class:`ResponsesStream` (the live event writer). Input items: role messages (``developer``/``system`` → system),
``function_call`` / ``function_call_output``, ``custom_tool_call`` / ``custom_tool_call_output``,
``reasoning``; ``instructions``; ``previous_response_id`` (kept per rollout). Tools: ``function``,
``custom`` (freeform: rendered as a function with one string parameter ``input``), ``namespace``
(its functions flattened; calls come back with ``namespace`` set); hosted tools (``web_search``,
``tool_search``, …) are accepted and not offered to the policy. Streams ``response.created,
response.in_progress, output_item.added, … deltas …, output_item.done, response.completed``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, ClassVar

from ..core.errors import ProxyError
from ..core.types import ServedAPI
from .canonical import CanonicalRequest, CanonicalResult, new_id, parse_arguments, require, text_of
from .sse import sse
from .stream import remainder
from .wire_fields import check_fields

__all__ = ["ResponsesAdapter", "ResponsesStream"]

_ASSISTANT_ITEMS = {"function_call", "custom_tool_call", "reasoning"}


def _tools(tools: Any) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, str]]:
    if not tools:
        return [], {}, {}
    require(isinstance(tools, list), "'tools' must be a list", "tools")
    out: list[dict[str, Any]] = []
    custom: dict[str, str] = {}
    namespace: dict[str, str] = {}

    def add(t: dict[str, Any], p: str, ns: str | None) -> None:
        typ = t.get("type")
        if typ == "function":
            require(isinstance(t.get("name"), str) and t["name"], f"'{p}.name' must be a non-empty string", f"{p}.name")
            params = t.get("parameters") or {"type": "object", "properties": {}}
            require(isinstance(params, dict), f"'{p}.parameters' must be an object", f"{p}.parameters")
            out.append({"type": "function", "function": {"name": t["name"], "description": str(t.get("description") or ""),
                                                         "parameters": params}})
            if ns:
                namespace[t["name"]] = ns
        elif typ == "custom":
            require(isinstance(t.get("name"), str) and t["name"], f"'{p}.name' must be a non-empty string", f"{p}.name")
            fmt = t.get("format") or {}
            hint = f" Input format ({fmt.get('syntax', fmt.get('type', 'text'))}): {fmt.get('definition', '')}".rstrip(": ")
            out.append({"type": "function", "function": {
                "name": t["name"], "description": str(t.get("description") or "") + (hint if fmt else ""),
                "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}}})
            custom[t["name"]] = t["name"]
        elif typ == "namespace":
            inner = t.get("tools") or []
            require(isinstance(inner, list), f"'{p}.tools' must be a list", f"{p}.tools")
            for j, it in enumerate(inner):
                require(isinstance(it, dict), f"'{p}.tools[{j}]' must be an object", f"{p}.tools[{j}]")
                add(it, f"{p}.tools[{j}]", str(t.get("name") or ""))
        elif isinstance(typ, str):
            return  # hosted tools (web_search, tool_search, file_search, ...) are not offered to the policy
        else:
            raise ProxyError(f"'{p}.type' must be a string", 400, param=f"{p}.type")

    for i, t in enumerate(tools):
        require(isinstance(t, dict), f"'tools[{i}]' must be an object", f"tools[{i}]")
        add(t, f"tools[{i}]", None)
    return out, custom, namespace


def _input(items: Any) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    require(isinstance(items, list), "'input' must be a string or a list of items", "input")
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None  # the open assistant turn

    def assistant() -> dict[str, Any]:
        nonlocal cur
        if cur is None:
            cur = {"role": "assistant", "content": ""}
            out.append(cur)
        return cur

    for i, it in enumerate(items):
        p = f"input[{i}]"
        require(isinstance(it, dict), f"'{p}' must be an object", p)
        typ = it.get("type") or ("message" if "role" in it else None)
        if typ not in _ASSISTANT_ITEMS and not (typ == "message" and it.get("role") == "assistant"):
            cur = None
        if typ == "message":
            role = it.get("role")
            text = text_of(it.get("content"), param=f"{p}.content")
            if role in ("system", "developer"):
                out.append({"role": "system", "content": text})
            elif role == "user":
                out.append({"role": "user", "content": text})
            elif role == "assistant":
                a = assistant()
                if a.get("tool_calls"):  # text after a call in one turn: start a new turn
                    cur = None
                    a = assistant()
                a["content"] += text
            else:
                raise ProxyError(f"unsupported role {role!r} in '{p}.role'", 400, param=f"{p}.role")
        elif typ == "reasoning":
            parts = [s.get("text", "") for s in (it.get("content") or it.get("summary") or []) if isinstance(s, dict)]
            a = assistant()
            a["reasoning_content"] = (a.get("reasoning_content", "") + "\n".join(parts)).strip() or None
            if a["reasoning_content"] is None:
                del a["reasoning_content"]
        elif typ in ("function_call", "custom_tool_call"):
            require(isinstance(it.get("name"), str), f"'{p}.name' must be a string", f"{p}.name")
            args = parse_arguments(it.get("arguments")) if typ == "function_call" else {"input": str(it.get("input", ""))}
            assistant().setdefault("tool_calls", []).append(
                {"id": str(it.get("call_id") or it.get("id") or ""), "type": "function",
                 "function": {"name": it["name"], "arguments": args}})
        elif typ in ("function_call_output", "custom_tool_call_output"):
            out.append({"role": "tool", "content": text_of(it.get("output"), param=f"{p}.output", lenient=True),
                        "tool_call_id": str(it.get("call_id") or "")})
        else:
            raise ProxyError(f"unsupported input item type {typ!r} in '{p}'", 400, param=f"{p}.type")
    return out


class ResponsesAdapter:
    api: ClassVar[ServedAPI] = "responses"

    def parse(self, body: dict[str, Any], st: Any = None) -> CanonicalRequest:
        fields = check_fields("responses", body)
        model = body.get("model")
        require(isinstance(model, str), "'model' must be a string", "model")
        mt = body.get("max_output_tokens")
        require(mt is None or (isinstance(mt, int) and not isinstance(mt, bool) and mt > 0),
                "'max_output_tokens' must be a positive integer", "max_output_tokens")
        stream = body.get("stream", False)
        require(isinstance(stream, bool) or stream is None, "'stream' must be a boolean", "stream")
        for k in ("temperature", "top_p"):
            v = body.get(k)
            require(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)), f"'{k}' must be a number", k)
        require("input" in body or body.get("previous_response_id"), "'input' is required", "input")
        messages: list[dict[str, Any]] = []
        prev = body.get("previous_response_id")
        if prev:
            conv = st.responses.get(prev) if st is not None else None
            if conv is None:
                raise ProxyError(f"Previous response with id '{prev}' not found.", 400, param="previous_response_id")
            messages = list(conv)  # instructions are not carried over (they are not stored)
        instr = body.get("instructions")
        require(instr is None or isinstance(instr, (str, list)), "'instructions' must be a string", "instructions")
        if instr:
            messages.insert(0, {"role": "system", "content": text_of(instr, param="instructions")})
        messages += _input(body.get("input", []))
        require(bool(messages), "'input' must not be empty", "input")
        tools, custom, namespace = _tools(body.get("tools"))
        if body.get("tool_choice") == "none":
            tools = []
        return CanonicalRequest(
            api="responses", model=model, messages=messages, tools=tools, tool_choice=body.get("tool_choice"),
            max_tokens=mt, stream=bool(stream), temperature=body.get("temperature"), top_p=body.get("top_p"),
            response_format=(body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None,
            extra={"fields": fields, "custom": custom, "namespace": namespace, "previous_response_id": prev, "raw": body,
                   "has_instructions": bool(instr)},
        )

    # -- output ----------------------------------------------------------------------------------
    def _items(self, req: CanonicalRequest, r: CanonicalResult,
               ids: dict[str, str] | None = None) -> list[dict[str, Any]]:
        ids = ids or {}
        items: list[dict[str, Any]] = []
        if r.reasoning:
            items.append({"type": "reasoning", "id": ids.get("reasoning") or new_id("rs_"), "summary": [{"type": "summary_text", "text": r.reasoning}],
                          "content": [{"type": "reasoning_text", "text": r.reasoning}], "encrypted_content": None})
        if r.text or not r.tool_calls:
            items.append({"type": "message", "id": ids.get("message") or new_id("msg_"), "role": "assistant", "status": "completed",
                          "content": [{"type": "output_text", "text": r.text, "annotations": [], "logprobs": []}]})
        for t in r.tool_calls:
            if t.name in req.extra.get("custom", {}):
                args = t.args_dict()
                inp = args.get("input", "") if isinstance(args, dict) else str(args)
                items.append({"type": "custom_tool_call", "id": new_id("ctc_"), "call_id": t.id, "name": t.name,
                              "input": inp if isinstance(inp, str) else str(inp), "status": "completed"})
            else:
                item = {"type": "function_call", "id": new_id("fc_"), "call_id": t.id, "name": t.name,
                        "arguments": t.arguments, "status": "completed"}
                ns = req.extra.get("namespace", {}).get(t.name)
                if ns:
                    item["namespace"] = ns
                items.append(item)
        return items

    def _response(self, req: CanonicalRequest, r: CanonicalResult, rid: str, output: list[dict[str, Any]],
                  status: str) -> dict[str, Any]:
        raw = req.extra.get("raw", {})
        return {
            "id": rid, "object": "response", "created_at": int(time.time()), "status": status, "model": req.model,
            "output": output, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if r.finish_reason == "length" and status != "in_progress" else None,
            "instructions": raw.get("instructions") if isinstance(raw.get("instructions"), str) else None,
            "metadata": raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {},
            "parallel_tool_calls": bool(raw.get("parallel_tool_calls", True)),
            "previous_response_id": req.extra.get("previous_response_id"),
            "temperature": req.temperature, "top_p": req.top_p, "tool_choice": req.tool_choice or "auto",
            "tools": raw.get("tools") if isinstance(raw.get("tools"), list) else [],
            "max_output_tokens": req.max_tokens, "store": bool(raw.get("store", False)),
            "text": {"format": {"type": "text"}}, "truncation": "disabled",
            "usage": None if status == "in_progress" else {
                "input_tokens": r.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": r.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": r.prompt_tokens + r.completion_tokens},
        }

    def _remember(self, req: CanonicalRequest, r: CanonicalResult, rid: str, st: Any) -> None:
        if st is not None:
            conv = req.messages[1:] if req.extra.get("has_instructions") else req.messages
            st.remember_response(rid, [*conv, r.assistant_message()])

    def respond(self, req: CanonicalRequest, r: CanonicalResult, st: Any = None) -> dict[str, Any]:
        rid = new_id("resp_")
        self._remember(req, r, rid, st)
        return self._response(req, r, rid, self._items(req, r), "completed")

    def streamer(self, req: CanonicalRequest, st: Any = None, prompt_tokens: int = 0) -> ResponsesStream:
        """A live event writer: :meth:`ResponsesStream.open`, then deltas, then :meth:`ResponsesStream.close`."""
        return ResponsesStream(self, req, st)

    def stream(self, req: CanonicalRequest, r: CanonicalResult, st: Any = None) -> Iterator[bytes]:
        s = self.streamer(req, st, r.prompt_tokens)
        yield s.open()
        yield s.close(r)


class ResponsesStream:
    """The event sequence of one streamed response, written as generation goes: the reasoning item
    and the message item open on their first delta; the rest is written by :meth:`close`."""

    def __init__(self, adapter: ResponsesAdapter, req: CanonicalRequest, st: Any):
        self.adapter, self.req, self.st = adapter, req, st
        self.rid = new_id("resp_")
        self.ids = {"reasoning": new_id("rs_"), "message": new_id("msg_")}
        self.seq = 0
        self.opened: list[str] = []  # item kinds opened while streaming, in output order
        self.done: set[str] = set()
        self.sent = {"reasoning": "", "message": ""}

    def _ev(self, kind: str, **data: Any) -> bytes:
        self.seq += 1
        return sse(kind, {"type": kind, "sequence_number": self.seq - 1, **data})

    def open(self) -> bytes:
        pending = self.adapter._response(self.req, CanonicalResult(), self.rid, [], "in_progress")
        return self._ev("response.created", response=pending) + self._ev("response.in_progress", response=pending)

    def _start(self, kind: str) -> bytes:
        oi, iid = len(self.opened), self.ids[kind]
        self.opened.append(kind)
        if kind == "reasoning":
            item = {"type": "reasoning", "id": iid, "summary": [], "content": [], "encrypted_content": None}
            return (self._ev("response.output_item.added", output_index=oi, item=item)
                    + self._ev("response.reasoning_summary_part.added", item_id=iid, output_index=oi, summary_index=0,
                               part={"type": "summary_text", "text": ""}))
        item = {"type": "message", "id": iid, "role": "assistant", "status": "in_progress", "content": []}
        part0 = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return (self._ev("response.output_item.added", output_index=oi, item=item)
                + self._ev("response.content_part.added", item_id=iid, output_index=oi, content_index=0, part=part0))

    def _text_delta(self, kind: str, delta: str) -> bytes:
        self.sent[kind] += delta
        oi, iid = self.opened.index(kind), self.ids[kind]
        if kind == "reasoning":
            return self._ev("response.reasoning_summary_text.delta", item_id=iid, output_index=oi, summary_index=0,
                            delta=delta)
        return self._ev("response.output_text.delta", item_id=iid, output_index=oi, content_index=0, delta=delta,
                        logprobs=[])

    def _finish(self, item: dict[str, Any]) -> bytes:
        kind = item["type"]
        self.done.add(kind)
        oi, iid = self.opened.index(kind), item["id"]
        if kind == "reasoning":
            text = item["summary"][0]["text"]
            return (self._ev("response.reasoning_summary_text.done", item_id=iid, output_index=oi, summary_index=0,
                             text=text)
                    + self._ev("response.reasoning_summary_part.done", item_id=iid, output_index=oi, summary_index=0,
                               part={"type": "summary_text", "text": text})
                    + self._ev("response.output_item.done", output_index=oi, item=item))
        text = item["content"][0]["text"]
        return (self._ev("response.output_text.done", item_id=iid, output_index=oi, content_index=0, text=text,
                         logprobs=[])
                + self._ev("response.content_part.done", item_id=iid, output_index=oi, content_index=0,
                           part=item["content"][0])
                + self._ev("response.output_item.done", output_index=oi, item=item))

    def delta(self, reasoning: str = "", text: str = "") -> bytes:
        out = b""
        if reasoning and "message" not in self.opened:
            if "reasoning" not in self.opened:
                out += self._start("reasoning")
            out += self._text_delta("reasoning", reasoning)
        if text:
            if "reasoning" in self.opened and "reasoning" not in self.done:  # reasoning is complete
                r = self.sent["reasoning"]
                out += self._finish({"type": "reasoning", "id": self.ids["reasoning"],
                                     "summary": [{"type": "summary_text", "text": r}],
                                     "content": [{"type": "reasoning_text", "text": r}], "encrypted_content": None})
            if "message" not in self.opened:
                out += self._start("message")
            out += self._text_delta("message", text)
        return out

    def fail(self, e: ProxyError) -> bytes:
        """A failure after the response started: ``response.failed`` with the error."""
        resp = self.adapter._response(self.req, CanonicalResult(), self.rid, [], "failed")
        resp["error"] = {"code": "server_error" if e.status >= 500 else e.kind, "message": e.message}
        return self._ev("response.failed", response=resp)

    def close(self, r: CanonicalResult) -> bytes:
        self.adapter._remember(self.req, r, self.rid, self.st)
        items = self.adapter._items(self.req, r, self.ids)
        order = {k: i for i, k in enumerate(self.opened)}
        items.sort(key=lambda it: order.get(it["type"], len(order)))  # stable: items opened live come first
        out = []
        for item in items:
            typ = item["type"]
            if typ in ("reasoning", "message"):
                if typ in self.done:
                    continue
                if typ not in self.opened:
                    out.append(self._start(typ))
                final = item["summary"][0]["text"] if typ == "reasoning" else item["content"][0]["text"]
                rest = remainder(self.sent[typ], final, typ)
                if rest:
                    out.append(self._text_delta(typ, rest))
                out.append(self._finish(item))
                continue
            oi = len(self.opened)
            self.opened.append(item["id"])
            iid = item["id"]
            if typ == "function_call":
                out.append(self._ev("response.output_item.added", output_index=oi,
                                    item={**item, "arguments": "", "status": "in_progress"}))
                out.append(self._ev("response.function_call_arguments.delta", item_id=iid, output_index=oi,
                                    delta=item["arguments"]))
                out.append(self._ev("response.function_call_arguments.done", item_id=iid, output_index=oi,
                                    name=item["name"], arguments=item["arguments"]))
            else:  # custom_tool_call
                out.append(self._ev("response.output_item.added", output_index=oi,
                                    item={**item, "input": "", "status": "in_progress"}))
                out.append(self._ev("response.custom_tool_call_input.delta", item_id=iid, output_index=oi,
                                    delta=item["input"]))
                out.append(self._ev("response.custom_tool_call_input.done", item_id=iid, output_index=oi,
                                    input=item["input"]))
            out.append(self._ev("response.output_item.done", output_index=oi, item=item))
        out.append(self._ev("response.completed",
                            response=self.adapter._response(self.req, r, self.rid, items, "completed")))
        return b"".join(out)
