"""Readable views of recorded calls (what the report's trajectory viewer shows)."""

from __future__ import annotations

import pytest

from openforge.analysis.view import new_request_entries, request_entries, response_entries, token_runs
from openforge.core.types import BreakReason, ModelCall, Segment

from .factory import traj

STEPS = [("bash", {"command": "ls"}, "a.txt"), ("read", {"path": "a.txt"}, "hello")]


@pytest.mark.parametrize("canonical", [False, True])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_each_call_shows_only_what_it_added(api: str, canonical: bool) -> None:
    calls = traj(STEPS, api=api, canonical=canonical).calls
    first, rewritten = new_request_entries(calls[0], None)
    assert [(e.role, e.kind, e.text) for e in first] == [("user", "text", "do the task")] and not rewritten
    second, rewritten = new_request_entries(calls[1], calls[0])
    assert [(e.kind, e.text) for e in second] == [("tool_result", "a.txt")] and not rewritten
    out = response_entries(calls[1])
    assert [(e.kind, e.name) for e in out] == [("tool_call", "read")] and '"path": "a.txt"' in out[0].text
    assert [(e.kind, e.text) for e in response_entries(calls[2])] == [("text", "done")]


def test_rewritten_history_is_flagged_and_shown_whole() -> None:
    calls = traj(STEPS).calls
    compacted = calls[2].model_copy(update={"request": {"messages": [
        {"role": "system", "content": "summary of earlier work"}, {"role": "user", "content": "continue"}]}})
    entries, rewritten = new_request_entries(compacted, calls[1])
    assert rewritten and [e.text for e in entries] == ["summary of earlier work", "continue"]


def test_messages_system_and_is_error_and_thinking() -> None:
    call = ModelCall(index=0, api="messages", request={"system": [{"type": "text", "text": "be brief"}], "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": True}]}]},
        response={"content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "ok"}]})
    assert [(e.role, e.kind, e.error) for e in request_entries(call)] == [
        ("system", "text", None), ("tool", "tool_result", True)]
    assert [(e.kind, e.text) for e in response_entries(call)] == [("reasoning", "hmm"), ("text", "ok")]


def test_responses_instructions_and_custom_tool() -> None:
    call = ModelCall(index=0, api="responses", request={"instructions": "sys", "input": "hi"},
                     response={"output": [{"type": "custom_tool_call", "call_id": "c", "name": "apply_patch",
                                           "input": "*** Begin Patch"}]})
    assert [(e.role, e.text) for e in request_entries(call)] == [("system", "sys"), ("user", "hi")]
    assert [(e.name, e.text) for e in response_entries(call)] == [("apply_patch", "*** Begin Patch")]


def test_token_runs_follow_the_mask() -> None:
    seg = Segment(input_ids=[1, 2, 3, 4, 5, 6], loss_mask=[0, 0, 1, 1, 0, 1], logprobs=[0, 0, -1, -1, 0, -1],
                  call_indices=[0, 1], break_reason=BreakReason.FIRST)
    runs = token_runs(seg)
    assert [(r.trained, r.count, r.text) for r in runs] == [(False, 2, "1 2"), (True, 2, "3 4"), (False, 1, "5"),
                                                           (True, 1, "6")]
    decoded = token_runs(seg, lambda ids: "".join(chr(96 + i) for i in ids))
    assert [r.text for r in decoded] == ["ab", "cd", "e", "f"] and all(r.decoded for r in decoded)
