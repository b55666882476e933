"""A driver that is uid 0 of a user namespace where no other id exists (``unshare --map-root-user``, as a
normal user's tools often run things) cannot make its agent ``nobody``: its sandboxes take the normal
user's path (a user namespace of their own, the driver's own uid outside) instead of failing to start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from openforge.launchers import _bwrap

#: the driver: a local-launcher sandbox that runs `id -u` and writes in its workdir
DRIVER = r"""
import asyncio, json, os, sys
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.core.task import Task

async def main(base):
    out = {"euid": os.geteuid(), "uid_map": open("/proc/self/uid_map").read().split()}
    launcher = LocalLauncher(base_dir=base)
    try:
        sbx = await launcher.start(SandboxSpec(rollout_id="r0", task=Task(id="t0", instruction="do"), proxy_url="",
                                               api_key=""))
        r = await sbx.exec(["sh", "-c", "id -u; echo written > out.txt"])
        out.update(rc=r.returncode, stdout=r.stdout, stderr=r.stderr[-2000:],
                   file=(await sbx.read_file("out.txt")).decode(), disk=sbx.disk,
                   owner=((await sbx.pull_workdir()) / "out.txt").stat().st_uid)
    finally:
        await launcher.aclose()
    print(json.dumps(out))

asyncio.run(main(sys.argv[1]))
"""


def _map_root(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["unshare", "--user", "--map-root-user", "--net", "--", *argv], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def map_root_works():
    if shutil.which("unshare") is None or _map_root(["true"]).returncode != 0:
        pytest.skip("no `unshare --map-root-user` here (util-linux missing or user namespaces disabled)")
    if not _bwrap.probe_bwrap().ok:
        pytest.skip(f"no bwrap sandbox here: {_bwrap.probe_bwrap().error}")


def test_root_of_a_map_root_namespace_runs_sandboxes_as_a_normal_user(map_root_works, tmp_path):
    r = _map_root([sys.executable, "-c", DRIVER, str(tmp_path / "sandboxes")])
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["euid"] == 0 and rep["uid_map"][2] == "1"  # uid 0, the only id of its namespace
    assert rep["rc"] == 0, rep["stderr"]
    assert rep["stdout"].split() == [str(_bwrap.USERNS_UID)] and rep["file"] == "written\n"
    assert rep["owner"] == 0  # the driver's own uid (the caller outside), not an unmapped `nobody`
    assert rep["disk"] == "private-tmpfs"  # a normal user's driver: the rollout's own sized tmpfs all the same


def test_only_a_namespace_that_has_the_agents_uid_takes_the_root_path(map_root_works):
    r = _map_root([sys.executable, "-c", "from openforge.launchers._bwrap import probe_bwrap; print(probe_bwrap())"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "privileged=False" in r.stdout and "error=None" in r.stdout, r.stdout
    assert _bwrap.can_drop_to_agent() == (os.geteuid() == 0)  # the host's namespace maps every id
