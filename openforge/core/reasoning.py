"""Whether a recorded request replayed an earlier answer's reasoning, in each wire API's own form.

Owns: :func:`replayed_reasoning`. Pure, no I/O; reads the raw request bodies the proxy records
(``ModelCall.request``) and the canonical answer it recorded (``ModelCall.response``).

:func:`~openforge.core.trajectory.build_segments` uses it to tell who dropped a ``<think>`` block from the
history: the harness (it sent the turn back without its reasoning: ``thinking_stripped``) or the chat
template (the harness sent the reasoning, the template does not render past reasoning:
``template_drift``). The assistant turn that carried the answer is found by its text and its tool calls
(name and arguments; ids are ignored, harnesses rewrite them). Reasoning counts as replayed when that
turn carries, non-empty:

- chat: ``reasoning_content`` (or ``reasoning``) on the assistant message;
- responses: a ``reasoning`` item (summary or content text, or ``encrypted_content``) in the run of
  assistant items (``reasoning`` / assistant ``message`` / ``function_call``) holding the answer;
- messages: a ``thinking`` (or ``redacted_thinking``) block in the assistant message;
- gemini: a ``thought`` text part in the model turn (consecutive model contents are one turn, as the
  proxy renders them: :func:`~openforge.core.gemini_contents.gemini_messages`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .errors import ProxyError
from .gemini_contents import gemini_messages

__all__ = ["replayed_reasoning"]

Turn = tuple[str, frozenset[tuple[str, str]], bool]  # (text, tool calls as (name, canonical args), has reasoning)


def replayed_reasoning(api: str, request: dict[str, Any], answer: dict[str, Any]) -> bool | None:
    """True when ``request`` replays ``answer``'s assistant turn with reasoning, False when it replays
    it without, None when the turn is not found (or the API is not one the proxy serves)."""
    turns = _TURNS.get(api)
    if turns is None or not isinstance(request, dict) or not isinstance(answer, dict):
        return None
    text = _norm_text(answer.get("text"))
    calls = frozenset(_call_key(c.get("name"), c.get("arguments")) for c in answer.get("tool_calls") or ()
                      if isinstance(c, dict))
    if not text and not calls:
        return None
    found = None
    for t_text, t_calls, has in turns(request):
        if (text and t_text == text) or (calls and calls <= t_calls):
            found = has  # the last matching turn: the most recent replay of it
    return found


def _norm_text(text: Any) -> str:
    return text.strip() if isinstance(text, str) else ""


def _call_key(name: Any, arguments: Any) -> tuple[str, str]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    return str(name), json.dumps(arguments, sort_keys=True)


def _texts(content: Any, kinds: Iterable[str]) -> str:
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    kinds = set(kinds)
    return "".join(str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") in kinds).strip()


def _nonempty(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _chat_turns(request: dict[str, Any]) -> Iterable[Turn]:
    for m in request.get("messages") or ():
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        calls = frozenset(_call_key((tc.get("function") or {}).get("name"), (tc.get("function") or {}).get("arguments"))
                          for tc in m.get("tool_calls") or () if isinstance(tc, dict))
        yield (_texts(m.get("content"), ("text",)), calls,
               _nonempty(m.get("reasoning_content")) or _nonempty(m.get("reasoning")))


def _responses_reasoning(item: dict[str, Any]) -> bool:
    parts = [*(item.get("summary") or ()), *(item.get("content") or ())]
    return any(isinstance(p, dict) and _nonempty(p.get("text")) for p in parts) or _nonempty(item.get("encrypted_content"))


def _responses_turns(request: dict[str, Any]) -> Iterable[Turn]:
    items = request.get("input")
    if not isinstance(items, list):
        return
    text: list[str] = []
    calls: set[tuple[str, str]] = set()
    has, open_ = False, False
    for it in [*items, None]:
        typ = it.get("type", "message") if isinstance(it, dict) else None
        role = it.get("role") if isinstance(it, dict) else None
        assistant = typ in ("reasoning", "function_call", "custom_tool_call") or (typ == "message" and role == "assistant")
        if not assistant:
            if open_:
                yield "".join(text).strip(), frozenset(calls), has
            text, calls, has, open_ = [], set(), False, False
            continue
        assert isinstance(it, dict)
        open_ = True
        if typ == "reasoning":
            has = has or _responses_reasoning(it)
        elif typ == "message":
            text.append(_texts(it.get("content"), ("output_text", "text", "input_text")))
        else:
            calls.add(_call_key(it.get("name"), it.get("arguments") if typ == "function_call"
                                else {"input": str(it.get("input", ""))}))


def _messages_turns(request: dict[str, Any]) -> Iterable[Turn]:
    for m in request.get("messages") or ():
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        calls = frozenset(_call_key(b.get("name"), b.get("input")) for b in blocks
                          if isinstance(b, dict) and b.get("type") == "tool_use")
        has = any(isinstance(b, dict) and ((b.get("type") == "thinking" and _nonempty(b.get("thinking")))
                                           or b.get("type") == "redacted_thinking") for b in blocks)
        yield _texts(content, ("text",)), calls, has


def _gemini_turns(request: dict[str, Any]) -> Iterable[Turn]:
    try:
        messages = gemini_messages(request)
    except ProxyError:
        return
    yield from _chat_turns({"messages": messages})


_TURNS = {"chat": _chat_turns, "responses": _responses_turns, "messages": _messages_turns, "gemini": _gemini_turns}
