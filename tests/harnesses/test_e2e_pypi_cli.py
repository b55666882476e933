"""The real PyPI CLI harnesses (aider, mini-swe-agent, hermes-agent), each from its own venv, end
to end against the real proxy with a scripted policy: one real shell tool call, then the final
answer, in a loopback-only sandbox. Each skips with the reason when its CLI is not installed
(scripts/test.sh installs them)."""

from __future__ import annotations

from e2e import assert_isolated, describe_failure, run_e2e, tool_calls
from testdeps import missing

from openforge.errors import HarnessError
from openforge.plugins import harness_class


def _harness(name, **kwargs):
    h = harness_class(name)(**kwargs)
    try:
        h.check_installed()
    except HarnessError as e:
        missing(f"{name} is not installed here: {e}")
    return h


async def test_mini_swe_agent_shell_call_then_submit(tmp_path, tokenizer):
    h = _harness("mini-swe-agent")
    marker = "hello-mini-swe-agent"
    submit = "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\nDone: wrote out.txt.\\n'"
    script = {"turns": [{"shell": f"echo {marker} > out.txt"}, {"shell": submit}]}
    run = await run_e2e(h, script, "Write a greeting to out.txt, then submit.", tmp_path=tmp_path,
                        tokenizer=tokenizer, budget_s=180, read=("out.txt",))
    assert run.result.ok, describe_failure(run)
    assert run.files["out.txt"] is not None and run.files["out.txt"].decode().strip() == marker, describe_failure(run)
    calls = tool_calls(run.traj)
    assert calls == [("bash", {"command": f"echo {marker} > out.txt"}), ("bash", {"command": submit})], calls
    assert len(run.traj.calls) == 2 and all(c.api == "chat" for c in run.traj.calls)
    assert run.result.final_text == "Done: wrote out.txt.", describe_failure(run)
    assert len(run.traj.segments) == 1, run.traj.segments
    assert_isolated(run)
