"""More real harness CLIs (cline, kilocode, continue) end to end against the real
proxy with a scripted policy that makes one shell tool call and then answers, in a loopback-only
sandbox. The same contract as test_e2e_cli.py: the exact calls, the final answer, one segment.

Each test skips with the reason when its CLI is not installed (scripts/test.sh installs them)."""

from __future__ import annotations

import pytest
from e2e import assert_isolated, describe_failure, run_e2e, tool_calls
from testdeps import missing

from openforge.errors import HarnessError
from openforge.plugins import harness_class

CASES = [
    # (harness, constructor kwargs, expected shell tool name, its command argument, wire api)
    ("kilocode", {}, "bash", "command", "chat"),
    ("continue", {}, "Bash", "command", "chat"),
]


def _harness(name, kwargs):
    h = harness_class(name)(**kwargs)
    try:
        h.check_installed()
    except HarnessError as e:
        missing(f"{name} is not installed here: {e}")
    return h


def _id(case) -> str:
    values = case.values if hasattr(case, "values") else case
    return f"{values[0]}-{values[4]}"


@pytest.mark.parametrize(("name", "kwargs", "tool", "arg", "api"), CASES, ids=[_id(c) for c in CASES])
async def test_cli_harness_shell_call_then_answer(tmp_path, tokenizer, name, kwargs, tool, arg, api):
    h = _harness(name, kwargs)
    marker = f"hello-{name}-{api}"
    script = {"turns": [{"shell": f"echo {marker} > out.txt"}, {"text": "Done: wrote out.txt."}]}
    run = await run_e2e(h, script, "Write a greeting to out.txt, then say done.", tmp_path=tmp_path,
                        tokenizer=tokenizer, budget_s=180, read=("out.txt",))
    assert run.result.ok, describe_failure(run)
    assert run.files["out.txt"] is not None and run.files["out.txt"].decode().strip() == marker, describe_failure(run)
    calls = tool_calls(run.traj)
    assert calls[0][0] == tool and calls[0][1][arg] == f"echo {marker} > out.txt", calls
    assert len(calls) == 1, calls
    assert all(c.api == api for c in run.traj.calls), [c.api for c in run.traj.calls]
    assert len(run.traj.calls) >= 2 and (run.traj.calls[-1].response or {}).get("text") == "Done: wrote out.txt."
    assert run.result.final_text and "Done" in run.result.final_text, describe_failure(run)
    assert len(run.traj.segments) == 1, [len(s.call_indices) for s in run.traj.segments]
    assert_isolated(run)
