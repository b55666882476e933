"""Whose doing a harness's death by signal is, from real processes in a local sandbox: a harness that
crashes by itself (SIGSEGV, abort(), its own CPU-time limit) is a ``harness_error``, not the policy's
failure; a SIGKILL from inside its sandbox still is the policy's; a SIGKILL that was the rollout's memory
cgroup's OOM killer (read from the cgroup's own counter) is the memory limit's, ``infra_error``; and an
agent's own command that blows the memory limit is killed alone, leaving the harness to carry on."""

from __future__ import annotations

import signal
import sys

import pytest
from testdeps import missing

from openforge.core.task import Resources, Task
from openforge.core.types import RolloutStatus as S
from openforge.harness import HarnessResult
from openforge.launchers._isolation import oom_kills
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher


def spec(**res) -> SandboxSpec:
    return SandboxSpec(rollout_id="sig", task=Task(id="t", instruction="x", resources=Resources(**res)),
                       proxy_url="http://127.0.0.1:9", api_key="k")


@pytest.fixture
async def launcher(tmp_path):
    launcher = LocalLauncher(base_dir=tmp_path / "sbx")
    yield launcher
    await launcher.aclose()


async def _harness(launcher, code: str, **res) -> tuple[HarnessResult, object]:
    """Run ``code`` as the harness process (python, in the sandbox) and classify it as a harness does."""
    async with await launcher.start(spec(**res)) as sbx:
        r = await sbx.exec([sys.executable, "-c", code], timeout_s=60)
        return HarnessResult.from_exec(r, harness="h", budget_s=60), (r, sbx.limits)


SEGV = "import ctypes; ctypes.string_at(0)"  # a real fault: reads address 0
ABORT = "import os; os.abort()"  # abort(): a failed assertion in C, an uncaught C++ exception
XCPU = "import resource; resource.setrlimit(resource.RLIMIT_CPU, (1, 2))\nwhile True: pass"  # its own CPU rlimit


@pytest.mark.parametrize(("code", "sig"), [(SEGV, signal.SIGSEGV), (ABORT, signal.SIGABRT), (XCPU, signal.SIGXCPU)],
                         ids=["segv", "abort", "xcpu"])
async def test_a_harness_that_crashes_by_itself_is_a_harness_error(launcher, code, sig):
    res, (r, _) = await _harness(launcher, code)
    assert r.returncode in (-sig, 128 + sig), (r.returncode, r.stderr[-300:])
    assert res.status == S.HARNESS_ERROR and not res.status.trainable, (res.status, res.error)
    assert f"({sig.name})" in res.error and "crashed" in res.error


KILLS_ITS_PARENT = """
import os, subprocess, sys, time
# the agent's command, a child of the harness, kills the harness
subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getppid(), signal.SIG{sig})"])
time.sleep(30)
"""


@pytest.mark.parametrize("sig", ["KILL", "TERM", "INT"])
async def test_a_kill_from_inside_the_sandbox_is_still_the_policys(launcher, sig):
    res, (r, _) = await _harness(launcher, KILLS_ITS_PARENT.replace("{sig}", sig))
    assert res.status == S.POLICY_FAILURE, (res.status, res.error, r.returncode)
    assert "inside its own sandbox" in res.error


HOG = "x = bytearray(400 * 1024 * 1024); print(len(x))"


async def test_a_harness_killed_by_the_memory_cgroup_is_the_limits_doing(launcher):
    res, (r, limits) = await _harness(launcher, HOG, memory_mb=64)
    if limits["memory"] != "cgroup":
        missing("no writable memory cgroup here (the OOM killer's counter needs one)")
    assert r.returncode in (-9, 137) and r.oom_kills >= 1, (r.returncode, r.oom_kills)
    assert res.status == S.INFRA_ERROR and "memory cgroup" in res.error, (res.status, res.error)


async def test_an_agent_command_that_blows_the_memory_limit_is_killed_alone(launcher):
    """The kernel kills the cgroup's largest process: the agent's hog, not the harness, which sees its
    command fail (the policy's tool output) and ends normally."""
    harness = (f"import subprocess, sys\nr = subprocess.run([sys.executable, '-c', {HOG!r}])\n"
               "print('command exit', r.returncode)")
    res, (r, limits) = await _harness(launcher, harness, memory_mb=64)
    if limits["memory"] != "cgroup":
        missing("no writable memory cgroup here (the OOM killer's counter needs one)")
    assert r.returncode == 0 and "command exit -9" in r.stdout, (r.returncode, r.stdout)
    assert res.status is None  # the verifier decides


async def test_an_agent_cannot_pass_its_own_kill_off_as_an_oom(launcher):
    """The agent's hog is OOM-killed (the counter rises), then, seconds later, the agent SIGKILLs its
    harness: only a kill at the moment of the OOM is the memory limit's; this one is the policy's."""
    harness = (f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', {HOG!r}])\ntime.sleep(3)\n"
               "subprocess.run(['kill', '-KILL', str(__import__('os').getpid())])\ntime.sleep(30)")
    res, (r, limits) = await _harness(launcher, harness, memory_mb=64)
    if limits["memory"] != "cgroup":
        missing("no writable memory cgroup here (the OOM killer's counter needs one)")
    assert r.returncode in (-9, 137) and r.oom_kills == 0, (r.returncode, r.oom_kills)
    assert res.status == S.POLICY_FAILURE, (res.status, res.error)


def test_the_oom_kill_counter_of_cgroup_v1_and_v2(tmp_path):
    v2, v1, old, none = (tmp_path / n for n in ("v2", "v1", "old", "none"))
    for d in (v2, v1, old, none):
        d.mkdir()
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n")
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    (old / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")  # v1 before Linux 4.13
    (old / "memory.failcnt").write_text("40\n")  # limit hits, not kills: not read
    assert [oom_kills(d) for d in (v2, v1, old, none)] == [2, 5, None, None]
