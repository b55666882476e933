"""Nothing an agent does to its own rollout's resources fails the driver, another rollout or a later
run: directories nested 1,500 deep (and leftovers like them), gigabytes printed at the driver, a
disk filled, no space left before the agent ran. Each scenario runs as root and, where the driver's
uid matters, as a normal user (``_drivers.run_driver``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openforge.core.task import Task
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

from ._drivers import driver_base, run_driver

pytestmark = pytest.mark.timeout(300)
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a rollout's tmpfs needs a root driver")


def spec(rollout_id: str, task: Task) -> SandboxSpec:
    return SandboxSpec(rollout_id=rollout_id, task=task, proxy_url="http://127.0.0.1:9", api_key="k")


@pytest.mark.parametrize("as_user", [False, True], ids=["driver-as-root", "driver-as-user"])
def test_deep_directories_neither_fail_cleanup_nor_later_runs(tmp_path, as_user):
    """1,500 nested directories (some 000) in a rollout, and leftovers like it from a driver that
    died (one with a FIFO for its owner file): the sandbox closes and is gone, and a new launcher on
    the same base directory starts, runs, and removes the leftovers."""
    with driver_base("deep", as_user=as_user) as base:
        report = run_driver("_deep.py", [str(base)], as_user=as_user)
        assert report["agent"] == "nested 1500", report
        assert report["close"] == "ok" and not report["rollout_dir_left"], report
        assert report["later_launcher"] == "ok" and report["later_exec"] == "fine", report
        assert report["stale_left"] == ["stale-fifo"], report  # the FIFO's dir has no owner to trust: kept


def test_watchdog_removes_a_deep_tree(tmp_path):
    """The watchdog (``_reaper.py``, what cleans up after a killed driver) removes 1,500 nested dirs."""
    import subprocess
    import sys

    from openforge.launchers import local

    d = tmp_path / "rollout"
    d.mkdir()
    fd = os.open(d, os.O_RDONLY)
    for _ in range(1500):
        os.mkdir("d" * 100, dir_fd=fd)  # 150 kB of path: longer than any PATH_MAX
        sub = os.open("d" * 100, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.symlink("/etc", "etc-link", dir_fd=fd)  # never followed
    os.close(fd)
    try:
        r = subprocess.run([sys.executable, "-I", "-S", local._REAPER], input=f"+dir {d}\n", text=True,
                           capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert not d.exists() and Path("/etc/passwd").exists()
    finally:  # pytest's own clean-up of old temp dirs would die on what a failed run leaves
        subprocess.run(["rm", "-rf", str(d)], check=False)


@pytest.mark.parametrize("as_user", [False, True], ids=["driver-as-root", "driver-as-user"])
def test_harness_output_does_not_grow_the_driver(as_user):
    """600 MB printed (half of it into the parent's stdout): the driver keeps a bounded head and
    tail, says how much it dropped, and its peak memory stays far below what was printed."""
    with driver_base("out", as_user=as_user) as base:
        report = run_driver("_output.py", [str(base)], as_user=as_user)
    assert report["rc"] == 0 and report["tail"].endswith("END\n") and report["head"] == "aaaaa", report
    assert report["says_dropped"] and report["dropped"] > 290_000_000, report  # /proc/$PPID/fd/1: where allowed
    assert report["stdout_len"] < 10_000_000, report
    assert report["rss_peak_mb"] - report["rss_before_mb"] < 150, report


@ROOT_ONLY
async def test_one_agent_filling_the_disk_cannot_fail_another(tmp_path):
    """The sandboxes' base directory sits on a small file system (the host's disk, scaled down). One
    agent writes until it cannot; a concurrent rollout still writes its 40 MB result and the host
    file system keeps its free space: the filler hit its own quota (``disk_mb``), not the disk."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200m", "hostdisk", str(disk)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    launcher = LocalLauncher(base_dir=disk / "sbx")
    task = Task(id="t", instruction="x", resources={"disk_mb": 64})
    try:
        filler, victim = await launcher.start(spec("filler", task)), await launcher.start(spec("victim", task))
        assert filler.disk == victim.disk == "tmpfs"
        r = await filler.exec(["sh", "-c", "dd if=/dev/zero of=fill bs=1M count=1000 2>&1; "
                                           "dd if=/dev/zero of=$HOME/fill bs=1M count=1000 2>&1; echo done"],
                              timeout_s=120)
        assert "No space left on device" in r.stdout, r.stdout
        free_mb = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize // 2**20
        assert free_mb > 120, f"the filler took the host's disk: {free_mb} MB left"
        w = await victim.exec(["sh", "-c", "dd if=/dev/zero of=result.bin bs=1M count=40 2>&1 && echo WROTE"],
                              timeout_s=60)
        assert "WROTE" in w.stdout, w.stdout
        await filler.close()
        await victim.close()
        assert not any((disk / "sbx").iterdir()), "a rollout's tmpfs or dir was left behind"
    finally:
        await launcher.aclose()
        subprocess.run(["umount", "-l", str(disk)], check=False)


@ROOT_ONLY
async def test_without_a_tmpfs_no_single_file_outgrows_the_quota(tmp_path):
    """Where the rollout cannot have its own tmpfs (a non-root driver), RLIMIT_FSIZE still stops
    any one file at ``disk_mb``."""
    launcher = LocalLauncher(base_dir=tmp_path / "sbx", disk_quota=False)
    try:
        sbx = await launcher.start(spec("big", Task(id="t", instruction="x", resources={"disk_mb": 16})))
        assert sbx.disk == "file-size"
        r = await sbx.exec(["sh", "-c", "dd if=/dev/zero of=big bs=1M count=100 2>&1; wc -c < big"], timeout_s=60)
        assert int(r.stdout.split()[-1]) <= 16 * 2**20 * 2, r.stdout  # bash counts 1024-byte blocks: at most 2x
        await sbx.close()
    finally:
        await launcher.aclose()


@ROOT_ONLY
async def test_no_space_in_setup_is_infra_not_the_task(rig):
    """``No space left on device`` before the agent ran (setup) is the machine's: ``infra_error``
    (retried), never ``env_error`` nor a score."""
    from openforge.core.types import RolloutStatus
    from openforge.environment import Environment, VerifyResult
    from openforge.harnesses.react import ReactHarness
    from openforge.runner.rollout import run_rollout

    task = Task(id="t", instruction="x", resources={"disk_mb": 8})

    class FullDisk(Environment):
        name = "fulldisk"

        def tasks(self, split=None):
            return [task]

        async def setup(self, task, sandbox):
            await sandbox.write_file("data.bin", b"\0" * (16 * 2**20))

        async def verify(self, task, sandbox):
            return VerifyResult(reward=1.0)

    proxy, launcher, store = await rig({"turns": [{"text": "hi"}]})
    traj = await run_rollout(harness=ReactHarness(max_turns=1), environment=FullDisk(), task=task,
                             launcher=launcher, proxy=proxy, store=store)
    assert traj.status == RolloutStatus.INFRA_ERROR, (traj.status, traj.error)
    assert "No space left on device" in (traj.error or "")


@ROOT_ONLY
async def test_a_relative_base_dir_leaves_no_mount_behind(tmp_path, monkeypatch):
    """The rollout's tmpfs is unmounted at close, whatever form the base directory was given in."""
    monkeypatch.chdir(tmp_path)
    launcher = LocalLauncher(base_dir="sbx")
    try:
        sbx = await launcher.start(spec("rel", Task(id="t", instruction="x", resources={"disk_mb": 8})))
        assert sbx.disk == "tmpfs"
        assert (await sbx.exec(["sh", "-c", "echo ok > f; cat f"], timeout_s=30)).stdout == "ok\n"
        await sbx.close()
    finally:
        await launcher.aclose()
    assert str(tmp_path / "sbx") not in Path("/proc/self/mounts").read_text()
    assert not any((tmp_path / "sbx").iterdir())


@ROOT_ONLY
def test_watchdog_unmounts_a_dead_drivers_rollout_tmpfs(tmp_path):
    """A driver killed with rollouts open leaves their tmpfs mounts to the watchdog: unmounted, removed."""
    import subprocess
    import sys

    from openforge.launchers import _reaper, local

    d = tmp_path / "rollout"
    d.mkdir()
    assert _reaper.mount_quota(d, 8)
    (d / "f").write_text("x")
    try:
        r = subprocess.run([sys.executable, "-I", "-S", local._REAPER], input=f"+dir {d}\n+mnt {d}\n", text=True,
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        assert str(d) not in Path("/proc/self/mounts").read_text() and not d.exists()
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True, check=False)


def test_a_normal_user_drivers_filler_cannot_fail_its_sibling():
    """The same attack under a normal-user driver (which cannot mount on the host): two rollouts at
    once on a 200 MB file system, the filler writes 16 MB files until it cannot; its private area
    (a sized tmpfs in a user namespace of the driver's) stops it at ``disk_mb``, so the host file
    system keeps its space and the victim's correct solution (40 MB, then a file the driver reads back,
    a copy for a host-side check and a verifier's view) succeeds. The driver's writes into the area
    follow no link the agent left there."""
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("needs root to mount the small file system and run the driver as a normal user")
    with driver_base("fill", as_user=True) as base:
        from .test_sandbox_escapes import TEST_UID

        opts = f"size=200m,uid={TEST_UID},gid={TEST_UID},mode=0755"
        if subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "hostdisk", str(base)]).returncode != 0:
            pytest.skip("cannot mount a tmpfs here")
        try:
            report = run_driver("_fill.py", [str(base)], as_user=True)
        finally:
            subprocess.run(["umount", "-l", str(base)], check=False)
    assert report["disk"] == ["private-tmpfs", "private-tmpfs"], report
    assert report["free_mb_after_fill"] > 150, report  # the filler took its area, not the disk
    assert "WROTE" in report["victim"] and "No space left" not in report["victim"], report
    assert report["read_back"] == "done\n", report
    assert report["link_writes"] == ["refused", "refused"], report  # no write through the agent's links
    assert {"answer.txt", "given.txt", "result.bin"} <= set(report["pulled"]), report
    assert report["verifier_sees"] == ["done", str(40 << 20)], report
    assert report["left"] == [] and report["free_mb_after_close"] > 190, report


def test_a_harbor_task_installs_and_verifies_under_a_normal_user_driver():
    """A Harbor task whose Dockerfile `pip install`s a wheel, under a normal-user driver (each rollout's
    disk a private area the host does not see): the verifier's sandbox still gets what the RUN step
    installed, so the oracle succeeds (the verifier looked for that directory on the host and left it out)."""
    with driver_base("harbor", as_user=True) as base:
        report = run_driver("_harbor_driver.py", [str(base)], as_user=True)
    assert report["disk"] == "private-tmpfs", report
    assert report["solve_rc"] == 0 and report["reward"] == 1.0, report
