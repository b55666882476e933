"""Failure modes with real CLI harnesses: a hang past the budget (pi blocked in its bash tool) is a
``timeout`` and leaves no process behind; a harness that cannot authenticate (Codex with a refused
key) exits non-zero → ``harness_error``. (Codex itself does not hang on a long command: its
``exec_command`` yields after a few seconds and the turn goes on.)"""

from __future__ import annotations

from e2e import describe_failure, run_e2e
from testdeps import missing

from openforge.core.errors import HarnessError
from openforge.core.types import RolloutStatus
from openforge.harnesses.codex import CodexHarness
from openforge.harnesses.pi import PiHarness


def _installed(h):
    try:
        h.check_installed()
    except HarnessError as e:
        missing(f"{h.name} is not installed here: {e}")
    return h


async def test_pi_hang_past_budget_is_timeout_without_leftovers(tmp_path, tokenizer):
    run = await run_e2e(_installed(PiHarness()), [{"shell": "sleep 600"}], "Wait for a long time.", tmp_path=tmp_path,
                        tokenizer=tokenizer, budget_s=12)
    assert run.result.status == RolloutStatus.TIMEOUT, describe_failure(run)
    assert run.traj.status == RolloutStatus.TIMEOUT and "budget" in run.traj.error
    assert run.leftover == []
    assert len(run.traj.calls) == 1  # the call that started the hanging command was recorded


async def test_codex_refused_key_is_harness_error(tmp_path, tokenizer):
    run = await run_e2e(_installed(CodexHarness(env={"OPENFORGE_API_KEY": "sk-wrong"})), [{"text": "hi"}], "Say hi.",
                        tmp_path=tmp_path, tokenizer=tokenizer, budget_s=90)
    assert run.result.status == RolloutStatus.HARNESS_ERROR, describe_failure(run)
    assert run.traj.status == RolloutStatus.HARNESS_ERROR and "codex crashed (exit code" in run.traj.error
    assert run.traj.calls == [] and run.leftover == []
