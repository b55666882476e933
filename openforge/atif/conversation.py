"""Recorded calls read back as conversations: each call's wire request parsed into canonical messages and
tools, and a rollout's calls grouped into agents (the main agent and each sub-agent).

Owns: :func:`parse_call` and :func:`group_agents`. A call's ``request`` is the body the harness sent
(Chat Completions, Responses or Messages); the proxy's own wire adapters parse it, so the messages are the
ones the policy was conditioned on, in one form whatever the harness spoke.

Grouping is by conversation, not by tokens: a call belongs to the agent whose last request its messages
extend (the longest such), else to the agent whose opening (leading system messages and first user message)
it repeats (that agent's history was rewritten, e.g. compacted), else it starts a new agent (a sub-agent).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.types import ModelCall

__all__ = ["Agent", "ParsedCall", "group_agents", "parse_call"]


@dataclass
class ParsedCall:
    """One call with its request parsed: ``messages`` is None when the request could not be parsed
    (a legacy ``completions`` call, a refused body)."""

    call: ModelCall
    messages: list[dict[str, Any]] | None
    tools: list[dict[str, Any]]


@dataclass
class Agent:
    """The calls of one conversation, in order."""

    calls: list[ParsedCall] = field(default_factory=list)

    @property
    def first_index(self) -> int:
        return self.calls[0].call.index


def _adapter(api: str) -> Any:
    from ..proxy.wire_chat import ChatAdapter
    from ..proxy.wire_messages import MessagesAdapter
    from ..proxy.wire_responses import ResponsesAdapter

    return {"chat": ChatAdapter, "responses": ResponsesAdapter, "messages": MessagesAdapter}.get(api)


def parse_call(call: ModelCall, previous: ParsedCall | None = None) -> ParsedCall:
    """``call``'s request as canonical messages and tools. A Responses request that continues an earlier
    response (``previous_response_id``) gets ``previous``'s conversation and answer in front of its input."""
    cls = _adapter(call.api)
    body = call.request
    if cls is None or not isinstance(body, dict) or not body:
        return ParsedCall(call, None, [])
    head: list[dict[str, Any]] = []
    if call.api == "responses" and body.get("previous_response_id"):
        body = {k: v for k, v in body.items() if k != "previous_response_id"}
        if previous is not None and previous.messages is not None:
            head = [*previous.messages, assistant_message(previous.call)]
    try:
        req = cls().parse(body)
    except Exception:  # a body the proxy refused: recorded, but it is no conversation
        return ParsedCall(call, None, [])
    return ParsedCall(call, head + req.messages, list(req.tools))


def assistant_message(call: ModelCall) -> dict[str, Any]:
    """The call's answer as a canonical assistant message."""
    from ..proxy.canonical import parse_arguments

    resp = call.response or {}
    msg: dict[str, Any] = {"role": "assistant", "content": resp.get("text") or ""}
    if resp.get("tool_calls"):
        msg["tool_calls"] = [{"id": tc.get("id") or "", "type": "function",
                              "function": {"name": tc.get("name"), "arguments": parse_arguments(tc.get("arguments"))}}
                             for tc in resp["tool_calls"]]
    return msg


def message_key(m: dict[str, Any]) -> tuple[Any, ...]:
    """What must match for a message to count as the same turn. An assistant turn sent back is compared by
    its tool calls' names only: harnesses re-serialise its text and arguments (and drop its reasoning)."""
    if m.get("role") == "assistant":
        return ("assistant", tuple(tc.get("function", {}).get("name") for tc in m.get("tool_calls") or []))
    content = m.get("content")
    return (m.get("role"), content if isinstance(content, str) else json.dumps(content, sort_keys=True),
            m.get("tool_call_id", ""))


def opening_len(messages: Sequence[dict[str, Any]]) -> int:
    """Length of the conversation's opening: its leading system messages and the first message after them."""
    n = 0
    while n < len(messages) and messages[n].get("role") == "system":
        n += 1
    return min(n + 1, len(messages))


def extends(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> bool:
    """``new`` starts with every message of ``old``."""
    return len(new) >= len(old) and all(message_key(a) == message_key(b) for a, b in zip(old, new))


def _pick(agents: list[Agent], pc: ParsedCall) -> Agent | None:
    msgs = pc.messages
    if msgs is None:  # no conversation to compare: it belongs with the agent that spoke last
        return max(agents, key=lambda a: a.calls[-1].call.index, default=None)
    best, best_len = None, -1
    for a in agents:
        last = next((c.messages for c in reversed(a.calls) if c.messages is not None), None)
        if last is not None and extends(last, msgs) and len(last) > best_len:
            best, best_len = a, len(last)
    if best is not None:
        return best
    for a in agents:
        first = next((c.messages for c in a.calls if c.messages is not None), None)
        if first and extends(first[:opening_len(first)], msgs):
            return a
    return None


def group_agents(calls: Sequence[ModelCall]) -> list[Agent]:
    """The rollout's calls (in index order) grouped into agents; the first agent is the one that made the
    first call (the main agent)."""
    agents: list[Agent] = []
    for call in sorted(calls, key=lambda c: c.index):
        prev_same_api = None
        target = None
        if call.api == "responses" and (call.request or {}).get("previous_response_id"):
            target = max(agents, key=lambda a: a.calls[-1].call.index, default=None)
            prev_same_api = target.calls[-1] if target is not None else None
        pc = parse_call(call, prev_same_api)
        if target is None:
            target = _pick(agents, pc)
        if target is None:
            target = Agent()
            agents.append(target)
        target.calls.append(pc)
    return agents
