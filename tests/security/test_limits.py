"""Resource limits hold against an agent: a fork bomb stops at the task's process limit and a busy
loop is throttled to the task's CPU share. Each test fails when its limit is not applied."""

from __future__ import annotations

import sys

import pytest
from testdeps import missing

from openforge.core.task import Resources, Task
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher


def spec(**res) -> SandboxSpec:
    return SandboxSpec(rollout_id="lim", task=Task(id="t", instruction="x", resources=Resources(**res)),
                       proxy_url="http://127.0.0.1:9", api_key="k")


@pytest.fixture
async def launcher(tmp_path):
    launcher = LocalLauncher(base_dir=tmp_path / "sbx")
    yield launcher
    await launcher.aclose()


FORK = """
import os, time
n = 0
for _ in range(200):
    try:
        if os.fork() == 0:
            time.sleep(120); os._exit(0)  # hold the pid: the limit, not timing, must stop the loop
        n += 1
    except OSError:
        break
print(n)
"""


async def test_fork_bomb_stops_at_the_process_limit(launcher):
    async with await launcher.start(spec(max_processes=24)) as sbx:
        r = await sbx.exec([sys.executable, "-c", FORK], timeout_s=60)
        started = int(r.stdout.strip().splitlines()[-1])
        assert started < 24, (started, sbx.limits, r.stderr[-500:])


BUSY = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 2.5: pass\nprint(time.process_time())\n"


async def test_busy_loop_is_throttled_to_the_cpu_share(launcher):
    async with await launcher.start(spec(cpu=0.1)) as sbx:
        if sbx.limits["cpu"] != "cgroup":
            missing("no writable cpu cgroup here (the CPU share needs one)")
        cpu_dir = next(p for p in sbx.cgroups.paths if (p / "cpu.stat").exists())
        r = await sbx.exec([sys.executable, "-c", BUSY], timeout_s=60)
        assert r.returncode == 0, r.stderr
        stat = dict(line.split() for line in (cpu_dir / "cpu.stat").read_text().splitlines())
        throttled = int(stat.get("nr_throttled", 0))
        used_s = float(r.stdout.split()[-1])  # the loop's own CPU time
        assert throttled > 0, stat  # the kernel held the loop back: the quota is enforced
        assert used_s < 0.6, used_s  # ~0.25 s of CPU in 2.5 s at a 0.1 share (unthrottled: ~2.5 s)
