"""The canonical request/result every wire adapter converts to and from.

Owns: :class:`CanonicalRequest` (HF-chat-form messages + function tools + what the wire asked for),
:class:`CanonicalResult` (text, reasoning, tool calls, finish reason, token counts), id helpers and
small content-flattening helpers shared by the three adapters, and :func:`to_openai_messages`
(canonical messages → OpenAI Chat Completions messages: the pass-through back-end's upstream
request and the SFT chat rows).

Messages are plain dicts in the form transformers chat templates expect: ``role`` (system | user |
assistant | tool), ``content`` (str), assistant ``tool_calls`` = ``[{"id", "type": "function",
"function": {"name", "arguments": dict | str}}]`` (arguments parsed to a dict — pitfall: a JSON string
would be re-quoted by ``tojson``), assistant ``reasoning_content``, tool ``tool_call_id``.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ProxyError
from ..core.types import ServedAPI

__all__ = [
    "CanonicalRequest",
    "CanonicalResult",
    "ToolCallOut",
    "forced_tool",
    "new_id",
    "parse_arguments",
    "require",
    "stop_strings",
    "to_openai_messages",
    "to_openai_tool_call",
]

IMAGE_PLACEHOLDER = "[image]"


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def parse_arguments(args: Any) -> Any:
    """Tool-call arguments as a dict when they are a JSON object string; else as given."""
    if isinstance(args, str):
        try:
            v = json.loads(args)
        except ValueError:
            return args
        return v if isinstance(v, dict) else args
    return args if args is not None else {}


def forced_tool(tool_choice: Any, tools: list[dict[str, Any]]) -> str | None:
    """The tool a request forces: a name, ``""`` for "some tool" (required / any), None when free.
    Understands the Chat (``{"type": "function", "function": {"name"}}``), Responses (``{"type":
    "function"|"custom", "name"}``) and Messages (``{"type": "tool", "name"}`` / ``{"type": "any"}``) forms."""
    if not tools or tool_choice is None:
        return None
    if tool_choice == "required":
        return ""
    if not isinstance(tool_choice, dict):
        return None
    typ = tool_choice.get("type")
    if typ == "any":
        return ""
    name = None
    if typ == "function" and isinstance(tool_choice.get("function"), dict):
        name = tool_choice["function"].get("name")
    elif typ in ("function", "custom", "tool"):
        name = tool_choice.get("name")
    if not isinstance(name, str):
        return None
    if name not in {t["function"]["name"] for t in tools}:
        raise ProxyError(f"'tool_choice' names tool {name!r}, which is not in 'tools'", 400, param="tool_choice")
    return name


def require(cond: bool, message: str, param: str | None = None) -> None:
    if not cond:
        raise ProxyError(message, 400, param=param)


def stop_strings(value: Any, param: str, *, most: int) -> list[str]:
    """The stop strings of ``stop`` / ``stop_sequences``: a string or a list of non-empty strings."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    require(isinstance(items, list) and len(items) <= most and all(isinstance(s, str) and s for s in items),
            f"'{param}' must be a non-empty string or a list of at most {most} non-empty strings", param)
    return list(items)


@dataclass
class CanonicalRequest:
    api: ServedAPI
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = None
    max_tokens: int | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    response_format: Any = None
    stop: list[str] = field(default_factory=list)  # stop strings (Chat ``stop``, Messages ``stop_sequences``)
    # adapter-specific bookkeeping (custom/namespace tool maps, include_usage, previous_response_id ...)
    extra: dict[str, Any] = field(default_factory=dict)

    def requested_sampling(self) -> dict[str, Any]:
        d = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        return {k: v for k, v in d.items() if v is not None}


@dataclass
class ToolCallOut:
    id: str
    name: str
    arguments: str  # JSON text as the wire APIs carry it

    def args_dict(self) -> Any:
        return parse_arguments(self.arguments)


@dataclass
class CanonicalResult:
    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCallOut] = field(default_factory=list)
    finish_reason: str = "stop"  # stop | length | tool_calls
    stop_sequence: str | None = None  # the request's stop string that ended the output
    prompt_tokens: int = 0
    completion_tokens: int = 0
    call_index: int = -1
    replayed: bool = False
    # per generated token (text, behaviour logprob), filled when the request asks for logprobs
    token_logprobs: list[tuple[str, float]] | None = None

    def assistant_message(self) -> dict[str, Any]:
        """The assistant turn in canonical message form (for history splicing)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.args_dict()}}
                for t in self.tool_calls
            ]
        return msg

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "reasoning": self.reasoning,
            "tool_calls": [t.__dict__ for t in self.tool_calls],
            "finish_reason": self.finish_reason,
            **({"stop_sequence": self.stop_sequence} if self.stop_sequence is not None else {}),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


def text_of(content: Any, *, param: str, allow: tuple[str, ...] = ("text", "input_text", "output_text"),
            lenient: bool = False) -> str:
    """Flatten string-or-parts content into text; images become a placeholder."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        raise ProxyError(f"'{param}' must be a string or a list of content parts", 400, param=param)
    out: list[str] = []
    for i, part in enumerate(content):
        if isinstance(part, str):
            out.append(part)
            continue
        if not isinstance(part, dict):
            raise ProxyError(f"'{param}[{i}]' must be an object", 400, param=f"{param}[{i}]")
        t = part.get("type")
        if t in allow or (t is None and "text" in part):
            txt = part.get("text", "")
            if not isinstance(txt, str):
                raise ProxyError(f"'{param}[{i}].text' must be a string", 400, param=f"{param}[{i}].text")
            out.append(txt)
        elif t in ("image_url", "input_image", "image", "input_file", "file", "document"):
            out.append(IMAGE_PLACEHOLDER)
        elif t == "refusal":
            out.append(str(part.get("refusal", "")))
        elif lenient:  # tool output: keep going, show the model what kind of part it was
            out.append(f"[{t}]")
        else:
            raise ProxyError(f"unsupported content part type {t!r} in '{param}[{i}]'", 400, param=f"{param}[{i}].type")
    return "".join(out) if all(p != IMAGE_PLACEHOLDER for p in out) else "\n".join(out)


def to_openai_tool_call(name: Any, arguments: Any, call_id: Any, index: int) -> dict[str, Any]:
    """One tool call in OpenAI form: ``arguments`` as a JSON string, an id even when none was given."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id or f"call_{index}", "type": "function", "function": {"name": name, "arguments": args}}


def to_openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Canonical (HF-chat-form) messages as OpenAI Chat Completions messages: tool-call arguments as
    JSON strings, ``content: null`` beside tool calls when empty, ``tool_call_id`` on tool results."""
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": m["role"], "content": m.get("content", "")}
        if m.get("tool_calls"):
            msg["tool_calls"] = [to_openai_tool_call(tc["function"]["name"], tc["function"]["arguments"], tc.get("id"), i)
                                 for i, tc in enumerate(m["tool_calls"])]
            msg["content"] = m.get("content") or None
        if m["role"] == "tool":
            msg["tool_call_id"] = m.get("tool_call_id", "")
        out.append(msg)
    return out
