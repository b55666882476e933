"""More real harness CLIs (opencode, gemini-cli, qwen-code, crush) end to end against the real
proxy with a scripted policy that makes one shell tool call and then answers, in a loopback-only
sandbox. The same contract as test_e2e_cli.py: the exact calls, the final answer, one segment.

Each test skips with the reason when its CLI is not installed (scripts/test.sh installs them)."""

from __future__ import annotations

import pytest
from e2e import (
    case_id,
    installed_harness,
    shell_call_then_answer,
)

#: harnesses whose npm package fetches its binary from github.com at install time
DOWNLOADS_FROM_GITHUB = {"crush"}

CASES = [
    # (harness, constructor kwargs, expected shell tool name, its command argument, wire api)
    ("opencode", {}, "bash", "command", "chat"),
    ("gemini-cli", {}, "run_shell_command", "command", "gemini"),
    ("qwen-code", {"wire_api": "chat"}, "run_shell_command", "command", "chat"),
    ("qwen-code", {"wire_api": "gemini"}, "run_shell_command", "command", "gemini"),
    # qwen-code's other two wires are `slow` (CI still runs them)
    pytest.param("qwen-code", {"wire_api": "responses"}, "run_shell_command", "command", "responses",
                 marks=pytest.mark.slow),
    pytest.param("qwen-code", {"wire_api": "messages"}, "run_shell_command", "command", "messages",
                 marks=pytest.mark.slow),
    # crush: skips where its binary could not be downloaded (github.com unreachable at install time)
    ("crush", {"wire_api": "chat"}, "bash", "command", "chat"),
    ("crush", {"wire_api": "messages"}, "bash", "command", "messages"),
]


@pytest.mark.parametrize(("name", "kwargs", "tool", "arg", "api"), CASES, ids=[case_id(c) for c in CASES])
async def test_cli_harness_shell_call_then_answer(tmp_path, tokenizer, name, kwargs, tool, arg, api):
    skip_why = "its binary comes from github.com" if name in DOWNLOADS_FROM_GITHUB else None  # CI may not reach it
    h = installed_harness(name, kwargs, skip_why=skip_why)
    run = await shell_call_then_answer(h, name, tool, arg, api, tmp_path=tmp_path, tokenizer=tokenizer)
    assert len(run.traj.segments) == 1, [len(s.call_indices) for s in run.traj.segments]
