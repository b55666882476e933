"""One rollout, one disk budget, and binds the agent cannot redirect (``_scratch_scenario.py``, run as
root and as a normal user, whose rollout disk is a private area):

* the scratch mounts (``/tmp``, ``/var/tmp``, ``/run``, ``/dev/shm``) are directories of the rollout's own
  tmpfs: with 5 MB in the workdir, holding 1.5 MB in each of the four (11 MB of a ``disk_mb`` of 8) stops
  with ``ENOSPC`` (before, each was a tmpfs of its own of ``disk_mb``/4, and it held all of it);
* each command's scratch is fresh and its space comes back when the command ends;
* a directory the driver binds from the rollout's directory (the workdir at ``/app``, a fresh ``/data``,
  the next command's scratch) that the agent swapped for a link to a host directory is never bound: the
  command does not start (before, the next command showed the host directory's files);
* no descriptor the driver opened to bind reaches the command.
"""

from __future__ import annotations

import pytest

from ._drivers import driver_base, run_driver

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=[False, True], ids=["driver-as-root", "driver-as-user"])
def report(request) -> dict:
    with driver_base("scratch", as_user=request.param) as base:
        return run_driver("_scratch_scenario.py", [str(base)], as_user=request.param)


def test_scratch_and_workdir_share_one_budget(report):
    b = report["budget"]
    if b["disk"] == "file-size":  # pragma: no cover - a root driver mounts, a normal user has a private area
        pytest.skip("no tmpfs of its own for the rollout here")
    assert b["workdir"] == [0, "ok"], b
    rc, said = b["hold"]
    assert rc == 9 and "No space left on device" in said, b
    assert b["leftover"] == [], b  # the command's scratch is removed when it ends


def test_scratch_is_fresh_and_its_space_returns(report):
    f = report["fresh"]
    assert f["first"] == [0, "/tmp took 6 MB"], f  # one scratch mount may use the budget the workdir leaves
    assert f["second"] == [0, "workdir took 6 MB"], f  # gone with its command: /tmp empty, the space back


@pytest.mark.parametrize("plant", ["workdir at /app", "fresh /data", "next scratch"])
def test_a_swapped_bind_source_is_never_bound(report, plant):
    s = report["swaps"][plant]
    assert s["plant"] == [0, "planted"], s
    rc, said = s["after"]
    assert "ANSWER-KEY" not in said, s
    assert rc == 126 and "openforge: cannot prepare the sandbox" in said, s
    assert report["secret_dir_after"] == ["key.txt"], report  # nothing was made or changed there


def test_no_bind_descriptor_reaches_the_command(report):
    fds = report["descriptors"]["fds"][1].splitlines()
    assert fds and all(f == "/dev/null" or f.startswith(("pipe:", "socket:")) for f in fds), fds
