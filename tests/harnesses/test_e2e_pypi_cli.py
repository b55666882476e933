"""The real PyPI CLI harnesses (aider, mini-swe-agent, hermes-agent), each from its own venv, end
to end against the real proxy with a scripted policy: one real shell tool call, then the final
answer, in a loopback-only sandbox. Each skips with the reason when its CLI is not installed
(scripts/test.sh installs them)."""

from __future__ import annotations

import json

from e2e import assert_isolated, describe_failure, run_e2e, tool_calls
from testdeps import missing

from openforge.core.errors import HarnessError
from openforge.core.types import BreakReason
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


async def test_aider_reflects_a_failed_edit_then_runs_the_shell_command(tmp_path, tokenizer):
    """Call 1: a SEARCH/REPLACE edit that does not apply (aider reflects the error back); call 2: a
    ```bash block aider runs (its prompts take their default, Yes, at stdin EOF) and the final answer."""
    h = _harness("aider")
    marker = "hello-aider"
    bad_edit = ("greeting.txt\n```\n<<<<<<< SEARCH\nno such line\n=======\nhello\n>>>>>>> REPLACE\n```\n")
    answer = f"Writing it with the shell.\n\n```bash\necho {marker} > out.txt\n```\n\nDone: wrote out.txt."
    script = {"turns": [{"text": bad_edit}, {"text": answer}]}
    run = await run_e2e(h, script, "Write a greeting to out.txt, then say done.", tmp_path=tmp_path,
                        tokenizer=tokenizer, budget_s=180, read=("out.txt", "greeting.txt"),
                        workdir_files={"greeting.txt": "hi\n"})
    assert run.result.ok, describe_failure(run)
    assert run.files["out.txt"] is not None and run.files["out.txt"].decode().strip() == marker, describe_failure(run)
    assert run.files["greeting.txt"] == b"hi\n"  # the failed edit changed nothing
    assert len(run.traj.calls) == 2 and all(c.api == "chat" for c in run.traj.calls), describe_failure(run)
    second = json.dumps(run.traj.calls[1].request)
    assert "SearchReplaceNoExactMatch" in second or "failed to match" in second, second[-2000:]
    assert run.result.final_text and "Done: wrote out.txt." in run.result.final_text, describe_failure(run)
    assert f"Running echo {marker} > out.txt" in run.result.stdout, describe_failure(run)
    # aider re-renders its prompt each call (the format reminder moves to the newest user message,
    # the files block changes): the history does not allow one segment, each call is its own
    assert [s.call_indices for s in run.traj.segments] == [[0], [1]], run.traj.segments
    assert run.traj.segments[1].break_reason == BreakReason.HISTORY_REWRITTEN
    assert_isolated(run)


async def test_hermes_agent_shell_call_then_answer(tmp_path, tokenizer):
    h = _harness("hermes-agent")
    marker = "hello-hermes-agent"
    script = {"turns": [{"shell": f"echo {marker} > out.txt"}, {"text": "Done: wrote out.txt."}]}
    run = await run_e2e(h, script, "Write a greeting to out.txt, then say done.", tmp_path=tmp_path,
                        tokenizer=tokenizer, budget_s=180, read=("out.txt",))
    assert run.result.ok, describe_failure(run)
    assert run.files["out.txt"] is not None and run.files["out.txt"].decode().strip() == marker, describe_failure(run)
    calls = tool_calls(run.traj)
    assert calls[0][0] == "terminal" and calls[0][1]["command"] == f"echo {marker} > out.txt", calls
    assert len(calls) == 1 and len(run.traj.calls) == 2, describe_failure(run)
    assert all(c.api == "chat" for c in run.traj.calls)
    assert run.result.final_text == "Done: wrote out.txt.", describe_failure(run)
    assert len(run.traj.segments) == 1, run.traj.segments
    assert_isolated(run)
