"""react end to end: the real react process (real openai SDK) against the real proxy with a scripted
policy, in a loopback-only sandbox; plus the failure modes (crash, hang, not installed)."""

from __future__ import annotations

import pytest
from e2e import assert_isolated, describe_failure, run_e2e, tool_calls

from openforge.core.types import RolloutStatus
from openforge.harnesses.react import ReactHarness


async def test_react_shell_tool_writes_file(tmp_path, tokenizer):
    script = {"turns": [{"shell": "echo hello-react > out.txt"}, {"tool": {"name": "finish",
                                                                           "arguments": {"answer": "wrote it"}}}]}
    run = await run_e2e(ReactHarness(), script, "Write hello-react to out.txt", tmp_path=tmp_path,
                        tokenizer=tokenizer, read=("out.txt",))
    assert run.result.ok, describe_failure(run)
    assert run.files["out.txt"] == b"hello-react\n"
    assert run.result.final_text == "wrote it"
    assert tool_calls(run.traj) == [("shell", {"command": "echo hello-react > out.txt"}),
                                    ("finish", {"answer": "wrote it"})]
    tool_msg = run.traj.calls[1].request["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["content"].startswith("exit code 0")
    assert len(run.traj.calls) == 2 and all(c.exact for c in run.traj.calls)
    assert run.traj.segments and sum(sum(s.loss_mask) for s in run.traj.segments) == sum(
        len(c.output_ids) for c in run.traj.calls)
    assert_isolated(run)


async def test_react_hang_past_budget_is_timeout_and_leaves_nothing(tmp_path, tokenizer):
    run = await run_e2e(ReactHarness(), [{"shell": "sleep 600"}], "wait", tmp_path=tmp_path,
                        tokenizer=tokenizer, budget_s=4)
    assert run.result.status == RolloutStatus.TIMEOUT, describe_failure(run)
    assert run.traj.status == RolloutStatus.TIMEOUT and "budget" in run.result.error
    assert run.leftover == []


async def test_react_crash_is_harness_error(tmp_path, tokenizer):
    # the model API refuses a wrong key: react exits 3 with a clear message
    class WrongKey(ReactHarness):
        def environment(self, ctx):
            return {"OPENAI_API_KEY": "sk-not-this-rollout"}

    run = await run_e2e(WrongKey(), [{"text": "hi"}], "say hi", tmp_path=tmp_path, tokenizer=tokenizer)
    assert run.result.status == RolloutStatus.HARNESS_ERROR
    assert "react crashed (exit code 3)" in run.result.error and "model API call failed" in run.result.error
    assert run.traj.status == RolloutStatus.HARNESS_ERROR and run.leftover == []


@pytest.mark.parametrize("missing", ["codex"])
async def test_not_installed_gives_harness_error_trajectory(tmp_path, tokenizer, monkeypatch, missing):
    from openforge.plugins import harness_class

    monkeypatch.setenv("OPENFORGE_CODEX_BIN", str(tmp_path / "no-codex"))
    run = await run_e2e(harness_class(missing)(), [{"text": "hi"}], "say hi", tmp_path=tmp_path, tokenizer=tokenizer)
    assert run.traj.status == RolloutStatus.HARNESS_ERROR and "codex is not installed" in run.traj.error
    assert run.traj.calls == []
