"""An agent that kills its own harness from inside the sandbox must not escape training: with
``harness_error`` (never trained) a policy could make its failures vanish from the data, exactly the
bias GRPO learns to exploit. The real react harness process in a local sandbox (bwrap as ``nobody``
when the driver is root), driven through the real proxy by a scripted policy whose tool call kills
the harness's own process with a signal only another process sends; and an ordinary harness crash, which
stays ``harness_error`` (a fault or abort() of the harness's own: ``test_harness_signals.py``)."""

from __future__ import annotations

import signal

import pytest

from openforge.core.types import RolloutStatus as S

pytest.importorskip("openai")


async def _rollout(rig, script, **kw):
    from openforge.envs.claw import ClawEnvironment
    from openforge.harnesses.react import ReactHarness
    from openforge.runner.rollout import run_rollout

    env = ClawEnvironment()
    proxy, launcher, store = await rig(script)
    return await run_rollout(harness=ReactHarness(max_turns=4), environment=env, task=env.task("files-create-hello"),
                             launcher=launcher, proxy=proxy, store=store, **kw)


@pytest.mark.parametrize("sig", ["KILL", "TERM", "INT", "HUP"])
async def test_an_agent_that_kills_its_own_harness_is_trained_as_a_failure(rig, sig):
    # the shell tool's bash is a child of the harness: $PPID is the harness process itself
    traj = await _rollout(rig, {"turns": [{"shell": f"echo hello world > hello.txt; kill -{sig} $PPID"}]})
    assert traj.status == S.POLICY_FAILURE and traj.trainable and traj.reward == 0.0, (traj.status, traj.error)
    assert "killed by signal" in traj.error and "inside its own sandbox" in traj.error
    num = getattr(signal, f"SIG{sig}")
    assert traj.metadata["harness_exit_code"] in (-num, 128 + num)  # direct, or via the sandbox's init
    assert traj.segments and traj.calls[0].index in {ci for s in traj.segments for ci in s.call_indices}


async def test_a_harness_that_crashes_by_itself_is_still_a_harness_error(rig):
    """Control: a non-zero exit that is no signal (the harness's own failure) is not blamed on the policy."""
    from openforge.harness import Harness, HarnessResult

    class Crashes(Harness):
        name = "crashes"

        async def run(self, ctx):
            res = await ctx.exec(["python3", "-c", "import sys; sys.exit(1)"])
            return HarnessResult.from_exec(res, harness=self.name)

    from openforge.envs.claw import ClawEnvironment
    from openforge.runner.rollout import run_rollout

    env = ClawEnvironment()
    proxy, launcher, store = await rig({"turns": []})
    traj = await run_rollout(harness=Crashes(), environment=env, task=env.task("files-create-hello"),
                             launcher=launcher, proxy=proxy, store=store)
    assert traj.status == S.HARNESS_ERROR and not traj.trainable, (traj.status, traj.error)
