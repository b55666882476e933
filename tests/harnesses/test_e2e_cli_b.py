"""More real harness CLIs (cline, kilocode, continue) end to end against the real
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

CASES = [
    # (harness, constructor kwargs, expected shell tool name, its command argument, wire api)
    ("kilocode", {}, "bash", "command", "chat"),
    ("continue", {}, "Bash", "command", "chat"),
]


@pytest.mark.parametrize(("name", "kwargs", "tool", "arg", "api"), CASES, ids=[case_id(c) for c in CASES])
async def test_cli_harness_shell_call_then_answer(tmp_path, tokenizer, name, kwargs, tool, arg, api):
    h = installed_harness(name, kwargs)
    run = await shell_call_then_answer(h, name, tool, arg, api, tmp_path=tmp_path, tokenizer=tokenizer)
    assert len(run.traj.segments) == 1, [len(s.call_indices) for s in run.traj.segments]
