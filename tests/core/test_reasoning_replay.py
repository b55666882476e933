"""``replayed_reasoning``: did a request send an earlier answer's turn back with its reasoning, per wire
API — for a text answer and for a tool-call turn (a Codex-style ``reasoning`` + ``function_call``)."""

from __future__ import annotations

import json

import pytest

from openforge.core.reasoning import replayed_reasoning

TEXT = {"text": "Hello there.", "reasoning": "plan", "tool_calls": []}
TOOL = {"text": "", "reasoning": "plan", "tool_calls": [{"id": "call_1", "name": "bash",
                                                          "arguments": json.dumps({"command": "ls"})}]}
USER = {"role": "user", "content": "hi"}


def _chat(answer: dict, reasoning: bool) -> dict:
    m: dict = {"role": "assistant", "content": answer["text"] or None}
    if answer["tool_calls"]:  # ids rewritten by the harness, arguments re-serialised
        m["tool_calls"] = [{"id": "other-id", "type": "function",
                            "function": {"name": "bash", "arguments": '{"command":"ls"}'}}]
    if reasoning:
        m["reasoning_content"] = "plan"
    return {"messages": [USER, m, {"role": "tool", "tool_call_id": "x", "content": "ok"} if answer["tool_calls"]
                         else USER]}


def _responses(answer: dict, reasoning: bool) -> dict:
    items: list = [USER]
    if reasoning:
        items.append({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}]})
    if answer["text"]:
        items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer["text"]}]})
    if answer["tool_calls"]:
        items.append({"type": "function_call", "call_id": "c9", "name": "bash", "arguments": '{"command": "ls"}'})
        items.append({"type": "function_call_output", "call_id": "c9", "output": "ok"})
    return {"input": [*items, USER]}


def _messages(answer: dict, reasoning: bool) -> dict:
    blocks: list = [{"type": "thinking", "thinking": "plan", "signature": ""}] if reasoning else []
    if answer["text"]:
        blocks.append({"type": "text", "text": answer["text"]})
    if answer["tool_calls"]:
        blocks.append({"type": "tool_use", "id": "toolu_9", "name": "bash", "input": {"command": "ls"}})
    return {"messages": [USER, {"role": "assistant", "content": blocks}, USER]}


@pytest.mark.parametrize("api, make", [("chat", _chat), ("responses", _responses), ("messages", _messages)])
@pytest.mark.parametrize("answer", [TEXT, TOOL], ids=["text", "tool_call"])
def test_intact_stripped_and_absent(api, make, answer):
    assert replayed_reasoning(api, make(answer, True), answer) is True
    assert replayed_reasoning(api, make(answer, False), answer) is False
    other = {"text": "something else entirely", "reasoning": "plan", "tool_calls": []}
    assert replayed_reasoning(api, make(answer, True), other) is None


def test_unknown_api_or_shapes_say_nothing():
    assert replayed_reasoning("completions", {"prompt": "x"}, TEXT) is None
    assert replayed_reasoning("chat", {"messages": "not a list"}, TEXT) is None
    assert replayed_reasoning("responses", {"input": "a plain string"}, TEXT) is None
    assert replayed_reasoning("messages", {"messages": [{"role": "assistant", "content": "Hello there."}]}, TEXT) is False
    assert replayed_reasoning("chat", {"messages": [USER]}, {"text": "", "tool_calls": []}) is None
