"""The real harness CLIs (Codex, Claude Code, pi, OpenClaw) end to end against the real proxy with a
scripted policy that makes one shell tool call and then answers, in a loopback-only sandbox.

Each test skips with the reason when its CLI is not installed (scripts/test.sh installs them)."""

from __future__ import annotations

import pytest
from e2e import (
    case_id,
    installed_harness,
    shell_call_then_answer,
)

CASES = [
    # (harness, constructor kwargs, expected shell tool name, its command argument, wire api)
    ("codex", {}, "exec_command", "cmd", "responses"),
    ("claude-code", {}, "Bash", "command", "messages"),
    ("pi", {"wire_api": "chat"}, "bash", "command", "chat"),
    ("pi", {"wire_api": "responses"}, "bash", "command", "responses"),
    ("pi", {"wire_api": "messages"}, "bash", "command", "messages"),
    ("openclaw", {"wire_api": "chat"}, "exec", "command", "chat"),
    # OpenClaw takes ~30 s a run on 2 cores: its other two wire APIs are `slow` (CI still runs them)
    pytest.param("openclaw", {"wire_api": "responses"}, "exec", "command", "responses", marks=pytest.mark.slow),
    pytest.param("openclaw", {"wire_api": "messages"}, "exec", "command", "messages", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("name", "kwargs", "tool", "arg", "api"), CASES, ids=[case_id(c) for c in CASES])
async def test_cli_harness_shell_call_then_answer(tmp_path, tokenizer, name, kwargs, tool, arg, api):
    h = installed_harness(name, kwargs)
    await shell_call_then_answer(h, name, tool, arg, api, tmp_path=tmp_path, tokenizer=tokenizer)
