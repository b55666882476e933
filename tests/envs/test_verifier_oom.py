"""Whose failure a verifier that runs out of memory is. By default the verifier's (``env_error``: nothing
tells a leak or a limit set too low from the agent's data). A task whose author says the verifier's memory
grows only with what the agent left (``verify_oom = "agent"``) makes it the agent's (``policy_failure``,
trained): a verifier killed by the memory cgroup's OOM killer (its own counter confirms it), or a Python
verifier that died of ``MemoryError`` where memory is an rlimit (``verify_on_host``). A SIGKILL nothing
counted stays the verifier's failure, opt-in or not, and a verifier that fits its memory scores as usual.
Real sandboxes, real kills."""

from __future__ import annotations

import pytest
from testdeps import missing

from openforge.core.errors import AgentOutputError, ConfigError
from openforge.core.types import RolloutStatus as S
from openforge.envs.taskdir import TaskDirEnvironment, blame_oom
from openforge.envs.verifier_sandbox import VerifierRun

from .test_taskdir import make_task
from .test_taskdir_verdict import _rollout

pytestmark = pytest.mark.timeout(240)

#: Holds 40 copies of the agent's answer file in memory: fine for a small answer, far past 128 MB for 8 MB.
HUNGRY_PY = """
    import json, os, sys
    data = open(os.path.join(sys.argv[1], "answer.txt"), "rb").read()
    copies = [bytes(data) + bytes([i]) for i in range(40)]
    print(json.dumps({"reward": float(data.strip() == b"42")}))
"""
BIG = "head -c 8000000 /dev/zero | tr '\\0' 7 > answer.txt"
SMALL = "echo 42 > answer.txt"
KILLS_ITSELF_PY = """
    import os, signal
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _toml(verify_oom: str | None, *, on_host: bool = False) -> str:
    return ('split = "train"\n' + (f'verify_oom = "{verify_oom}"\n' if verify_oom else "")
            + ("verify_on_host = true\n" if on_host else "") + "[resources]\nmemory_mb = 128\n")


async def _verified(rig, tmp_path, name: str, verify_py: str, agent: str, **toml):
    env = TaskDirEnvironment(make_task(tmp_path / "tasks", name, verify_py=verify_py, toml=_toml(**toml)))
    return await _rollout(rig, env, env.tasks()[0], agent)


def _need_counted_ooms(traj) -> None:
    if "OOM killer" not in (traj.metadata.get("verify_agent_fault") or "") and "exit 137" not in (traj.error or ""):
        missing(f"no memory cgroup killed the verifier here ({traj.status}: {traj.error})")


async def test_an_oom_killed_verifier_is_the_agents_failure_when_the_task_says_so(rig, tmp_path):
    traj = await _verified(rig, tmp_path, "hungry", HUNGRY_PY, BIG, verify_oom="agent")
    _need_counted_ooms(traj)
    assert traj.status == S.POLICY_FAILURE and traj.reward == 0.0 and traj.trainable, (traj.status, traj.error)
    assert "OOM killer" in traj.metadata["verify_agent_fault"], traj.metadata


async def test_by_default_an_oom_killed_verifier_is_its_own_failure(rig, tmp_path):
    traj = await _verified(rig, tmp_path, "hungry", HUNGRY_PY, BIG, verify_oom=None)
    _need_counted_ooms(traj)
    assert traj.status == S.ENV_ERROR and not traj.trainable, (traj.status, traj.error)
    assert "limited to the task's memory" in traj.error


async def test_a_verifier_that_fits_its_memory_scores_as_usual(rig, tmp_path):
    traj = await _verified(rig, tmp_path, "hungry", HUNGRY_PY, SMALL, verify_oom="agent")
    assert traj.status == S.SUCCESS and traj.reward == 1.0, (traj.status, traj.error)


async def test_a_sigkill_no_cgroup_counted_is_never_the_agents(rig, tmp_path):
    """The opt-in blames only a confirmed OOM: a verifier killed otherwise (here by itself) stays env_error."""
    traj = await _verified(rig, tmp_path, "killed", KILLS_ITSELF_PY, SMALL, verify_oom="agent")
    assert traj.status == S.ENV_ERROR and not traj.trainable, (traj.status, traj.error)


async def test_a_host_verifiers_memory_error_under_its_rlimit_is_the_agents(rig, tmp_path):
    """verify_on_host: memory is an rlimit, so the Python verifier gets MemoryError, not a SIGKILL."""
    traj = await _verified(rig, tmp_path, "hungry-host", HUNGRY_PY, BIG, verify_oom="agent", on_host=True)
    assert traj.status == S.POLICY_FAILURE and traj.trainable, (traj.status, traj.error)
    assert "MemoryError" in traj.metadata["verify_agent_fault"], traj.metadata
    default = await _verified(rig, tmp_path, "hungry-host-default", HUNGRY_PY, BIG, verify_oom=None, on_host=True)
    assert default.status == S.ENV_ERROR and "MemoryError" in default.error, (default.status, default.error)


TRACE = "Traceback (most recent call last):\n  File \"verify.py\", line 3, in <module>\n"


@pytest.mark.parametrize(("run", "blamed"), [
    (VerifierRun("", "", 137, oom_killed=True), True),
    (VerifierRun("", TRACE + "MemoryError\n", 1), True),
    (VerifierRun("", TRACE + "MemoryError: cannot allocate\n", 1), True),
    (VerifierRun("", "", 137), False),  # a SIGKILL no counter confirmed
    (VerifierRun("", TRACE + "KeyError: 'count'\n", 1), False),  # the verifier's own bug
    (VerifierRun("", "MemoryError\n", 1), False),  # no traceback: printed, not raised
    (VerifierRun("", TRACE + "MemoryError\n", 0, verdict='{"reward": 1}'), False),  # it recovered and judged
])
def test_what_counts_as_running_out_of_memory(run, blamed):
    if blamed:
        with pytest.raises(AgentOutputError, match='verify_oom = "agent"'):
            blame_oom("t", run)
    else:
        blame_oom("t", run)


def test_verify_oom_takes_env_or_agent(tmp_path):
    with pytest.raises(ConfigError, match="verify_oom must be one of 'env', 'agent'"):
        TaskDirEnvironment(make_task(tmp_path / "tasks", "bad", verify_py=HUNGRY_PY, toml='verify_oom = "policy"\n'))
