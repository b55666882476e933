"""Tool-call extraction across the three wire APIs, and the failed-result rule."""

from __future__ import annotations

import json

import pytest

from openforge.core.types import CallStatus, ModelCall
from openforge.readings.steps import extract_steps, is_error_result, shell_command

from .factory import BUILDERS, traj

STEPS = [
    ("bash", {"command": "echo hi > out.txt"}, "(no output)"),
    ("read", {"path": "out.txt"}, "hi"),
]


@pytest.mark.parametrize("canonical", [False, True], ids=["wire-response", "canonical-response"])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_extracts_steps_with_results_in_order(api: str, canonical: bool) -> None:
    t = traj(STEPS, api=api, canonical=canonical)
    steps = extract_steps(t.calls)
    assert [(s.name, s.arguments, s.result) for s in steps] == [
        ("bash", {"command": "echo hi > out.txt"}, "(no output)"),
        ("read", {"path": "out.txt"}, "hi"),
    ]
    assert [s.call_index for s in steps] == [0, 1]
    assert [s.index for s in steps] == [0, 1]
    assert steps[0].is_shell and not steps[1].is_shell
    assert steps[0].command == "echo hi > out.txt"
    assert all(s.api == api for s in steps)
    assert not any(s.error for s in steps)


def test_step_without_result_has_none() -> None:
    t = traj([("bash", {"command": "ls"}, None)])
    (step,) = extract_steps(t.calls)
    assert step.result is None and step.error is False


def test_codex_custom_tool_and_local_shell() -> None:
    t = traj([("apply_patch", "*** Begin Patch\n*** Add File: a.py\n+x\n*** End Patch", "Done")], api="responses")
    (step,) = extract_steps(t.calls)
    assert step.name == "apply_patch" and step.arguments.startswith("*** Begin Patch") and step.result == "Done"
    call = ModelCall(index=0, api="responses", response={"output": [
        {"type": "local_shell_call", "call_id": "c1", "action": {"command": ["bash", "-lc", "pytest -q"]}}]})
    nxt = ModelCall(index=1, api="responses", request={"input": [
        {"type": "local_shell_call_output", "call_id": "c1", "output": '{"output": "1 failed", "metadata": {"exit_code": 1}}'}]})
    (s,) = extract_steps([nxt, call])  # order comes from index, not list position
    assert s.name == "local_shell" and s.command == "pytest -q" and s.result == "1 failed" and s.error


def test_rewritten_ids_still_match() -> None:
    """OpenClaw sends call ids back without punctuation (call_99d4 -> call99d4)."""
    c0 = ModelCall(index=0, response={"choices": [{"message": {"tool_calls": [
        {"id": "call_99d4", "function": {"name": "exec", "arguments": '{"command":"ls"}'}}]}}]})
    c1 = ModelCall(index=1, request={"messages": [{"role": "tool", "tool_call_id": "call99d4", "content": "a b"}]})
    (s,) = extract_steps([c0, c1])
    assert s.result == "a b" and s.is_shell


def test_failed_call_emits_nothing() -> None:
    c0 = ModelCall(index=0, status=CallStatus.ERROR, response={"choices": [{"message": {"tool_calls": [
        {"id": "x", "function": {"name": "bash", "arguments": "{}"}}]}}]})
    assert extract_steps([c0]) == []


def test_messages_is_error_flag_decides() -> None:
    t = traj([("Bash", {"command": "false"}, "Exit code 0", True), ("Bash", {"command": "x"}, "Error: boom", False)],
             api="messages")
    s = extract_steps(t.calls)
    assert s[0].error is True and s[1].error is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Process exited with code 0\nOutput:\nError: looks bad but exit 0 wins", False),
        ("Chunk ID: 1\nProcess exited with code 2\nOutput:\n", True),
        ("exit status 1", True),
        ("bash: foo: command not found", True),
        ("cat: x: No such file or directory", True),
        ("Traceback (most recent call last):\n  File ...", True),
        ("ValueError: bad", True),
        ("Error: the file is missing", True),
        ("all good, no errors found", False),
        ("the word error in a sentence", False),
        ("", False),
    ],
)
def test_is_error_result(text: str, expected: bool) -> None:
    assert is_error_result(text) is expected


def test_shell_command_shapes() -> None:
    assert shell_command({"cmd": "ls -la"}) == "ls -la"
    assert shell_command({"command": ["bash", "-lc", "make test"]}) == "make test"
    assert shell_command({"command": ["ls", "-l"]}) == "ls -l"
    assert shell_command("raw") == "raw"
    assert shell_command({"other": 1}) is None


def test_all_builders_cover_all_apis() -> None:
    assert set(BUILDERS) == {"chat", "responses", "messages"}


def test_browser_use_actions_are_steps() -> None:
    answer = json.dumps({"thinking": "go", "action": [{"navigate": {"url": "http://127.0.0.1:1/a"}},
                                                      {"click": {"index": 3}}]})
    chat = ModelCall(index=0, response={"choices": [{"message": {"role": "assistant", "content": answer}}]})
    canonical = ModelCall(index=0, response={"text": answer, "tool_calls": []})
    msgs = ModelCall(index=0, api="messages", response={"content": [
        {"type": "tool_use", "id": "toolu_1", "name": "AgentOutput", "input": json.loads(answer)}]})
    for call in (chat, canonical, msgs):
        steps = extract_steps([call])
        assert [(s.name, s.arguments) for s in steps] == [("navigate", {"url": "http://127.0.0.1:1/a"}),
                                                         ("click", {"index": 3})]
    plain = ModelCall(index=0, response={"text": '{"answer": 42}', "tool_calls": []})
    assert extract_steps([plain]) == []


def test_answer_tools_are_not_steps() -> None:
    t = traj([("shell", {"command": "ls"}, "a"), ("finish", {"answer": "a"}, None)])
    assert [s.name for s in extract_steps(t.calls)] == ["shell"]
