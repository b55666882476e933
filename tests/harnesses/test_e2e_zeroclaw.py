"""ZeroClaw end to end — only where a binary exists (no registry here ships one: set ZEROCLAW_BIN)."""

from __future__ import annotations

import pytest
from e2e import assert_isolated, describe_failure, run_e2e, tool_calls

from openforge.core.errors import HarnessError
from openforge.core.types import RolloutStatus
from openforge.harnesses.zeroclaw import ZeroClawHarness


async def test_zeroclaw_shell_call_then_answer(tmp_path, tokenizer):
    h = ZeroClawHarness()
    try:
        h.check_installed()
    except HarnessError as e:
        pytest.skip(f"no ZeroClaw binary: {e}")
    script = {"turns": [{"shell": "echo hello-zeroclaw > out.txt"}, {"text": "Done."}]}
    run = await run_e2e(h, script, "Write hello-zeroclaw to out.txt.", tmp_path=tmp_path, tokenizer=tokenizer,
                        budget_s=180, read=("out.txt",))
    assert run.result.ok, describe_failure(run)
    assert run.files["out.txt"] == b"hello-zeroclaw\n"
    assert len(tool_calls(run.traj)) == 1
    assert_isolated(run)


async def test_zeroclaw_without_binary_is_a_clear_harness_error(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setenv("ZEROCLAW_BIN", str(tmp_path / "zeroclaw"))  # does not exist
    run = await run_e2e(ZeroClawHarness(), [{"text": "hi"}], "hi", tmp_path=tmp_path, tokenizer=tokenizer)
    assert run.traj.status == RolloutStatus.HARNESS_ERROR
    assert "zeroclaw is not installed" in run.traj.error and "ZEROCLAW_BIN" in run.traj.error
