"""A device=cpu veRL run lives in a loopback-only network namespace (openforge.train.verl.netns): nothing
outside reaches the ports its processes open, nothing inside reaches out; the run keeps its user's own uid
there, so its sandboxes start for a normal user as for root. No verl needed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from security._drivers import driver_base
from security.test_sandbox_escapes import REPO, TEST_UID, _user_python

from openforge.config import RunConfig
from openforge.core.errors import ConfigError
from openforge.train.verl import netns
from openforge.train.verl.launch import network_prefix

PREFIX, WHY = netns.loopback_prefix()
#: CI (CI=true) runs as root with util-linux: there a missing namespace is a failure, not a skip
needs_netns = pytest.mark.skipif(not PREFIX and os.environ.get("CI") != "true",
                                 reason=f"no network namespace here: {WHY}")

#: the child: listens on every interface, says its port and interfaces, tries to reach the address it is
#: given, then waits for a line on stdin (so the parent can knock on its port meanwhile)
CHILD = r"""
import socket, sys
srv = socket.socket(); srv.bind(("0.0.0.0", 0)); srv.listen()
own = socket.create_connection(("127.0.0.1", srv.getsockname()[1]), timeout=5)  # loopback works inside
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); out = "reached"
except OSError as e:
    out = type(e).__name__
print(srv.getsockname()[1], ",".join(n for _, n in socket.if_nameindex()), out, flush=True)
sys.stdin.readline()
"""


def _host_address() -> str | None:
    """An address of this machine that is not loopback (None where it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


@needs_netns
def test_a_job_in_the_namespace_sees_only_loopback_and_nothing_crosses_either_way():
    host = _host_address() or "127.0.0.1"
    outside = socket.socket()
    outside.bind(("0.0.0.0", 0))
    outside.listen()
    child = subprocess.Popen([*PREFIX, sys.executable, "-c", CHILD, host, str(outside.getsockname()[1])],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port, names, reached = child.stdout.readline().split()
        assert names == "lo"
        assert reached != "reached", "a listener on the host was reachable from inside the namespace"
        with pytest.raises(OSError):  # its port, bound on 0.0.0.0 inside, is not the host's
            socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()
    finally:
        child.communicate("\n", timeout=30)
        outside.close()
    assert child.returncode == 0


@needs_netns
def test_the_job_keeps_its_callers_uid_and_gid_and_no_capability():
    r = subprocess.run([*PREFIX, sys.executable, "-c", "import os; print(os.geteuid(), os.getegid(), "
                        "[l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])"],
                       capture_output=True, text=True, timeout=60)
    uid, gid, caps = r.stdout.split()
    assert (int(uid), int(gid)) == (os.geteuid(), os.getegid())
    assert os.geteuid() == 0 or int(caps, 16) == 0, "a normal user's job holds capabilities in the namespace"


def test_a_namespace_that_cannot_be_made_is_refused_saying_why_and_nothing_runs(monkeypatch):
    def denied() -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(netns, "_enter", denied)
    monkeypatch.setattr(netns.os, "execvp", lambda *a: pytest.fail("ran the command without a namespace"))
    fix = "CAP_SYS_ADMIN" if os.geteuid() == 0 else "user namespaces look disabled"
    with pytest.raises(SystemExit, match=rf"unshare\(2\) failed: Operation not permitted; .*{fix}"):
        netns.main(["true"])


def test_the_entry_point_needs_a_command():
    r = subprocess.run([sys.executable, "-m", "openforge.train.verl.netns"], capture_output=True, text=True)
    assert r.returncode != 0 and "usage:" in r.stderr


def _cfg(**verl) -> RunConfig:
    return RunConfig.model_validate({"trainer": {"backend": "verl", "verl": {"loss_agg": "token-mean", **verl}}})


@needs_netns
def test_a_cpu_run_goes_into_the_namespace_and_others_stay_on_the_host():
    assert network_prefix(_cfg(device="cpu")) == PREFIX
    assert network_prefix(_cfg(device="cuda")) == []
    assert network_prefix(_cfg(device="cpu", network="host")) == []
    assert network_prefix(_cfg(device="cuda", network="loopback")) == PREFIX


def test_where_no_namespace_can_be_made_loopback_refuses_and_auto_warns(monkeypatch, capsys):
    monkeypatch.setattr(netns, "loopback_prefix", lambda: ([], "user namespaces are disabled"))
    with pytest.raises(ConfigError, match=r"user namespaces are disabled.*trainer\.verl\.network=host"):
        network_prefix(_cfg(device="cpu", network="loopback"))
    assert network_prefix(_cfg(device="cpu")) == []
    assert "every interface: user namespaces are disabled" in capsys.readouterr().err


@needs_netns
def test_a_cpu_launch_writes_the_namespace_into_its_command(tmp_path):
    from openforge.core.task import Task
    from openforge.train.verl.launch import launch

    res = launch(_cfg(device="cpu"), tmp_path, [Task(id="t0", instruction="do", environment="claw")], dry_run=True)
    assert res["command"][:len(PREFIX)] == PREFIX and res["command"][len(PREFIX) + 1:][:2] == ["-m", "verl.trainer.main_ppo"]
    script = (tmp_path / "verl" / "command.sh").read_text()
    assert "openforge.train.verl.netns" in script


def _as_user(cmd: list[str]) -> tuple[list[str], dict[str, str], int]:
    """``cmd`` as a normal user: through ``setpriv`` as :data:`TEST_UID` (this Python replaced by a system one
    it can run) when this is root, else as is; with its environment and the uid it runs as."""
    env = dict(os.environ)
    if os.geteuid() != 0:
        return cmd, env, os.geteuid()
    py = _user_python()
    if py is None:
        pytest.skip("needs a system Python of this version to run a normal-user driver")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])
    return ["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}", "--clear-groups",
            *(py if c == sys.executable else c for c in cmd)], env, TEST_UID


@needs_netns
@pytest.mark.parametrize("who", ["root", "user"])
def test_a_cpu_launch_runs_sandboxed_rollouts_in_the_namespace_for_root_and_a_normal_user(who):
    """The veRL launch path, cut short of ``main_ppo`` (``_netns_driver.py``): in the namespace, the launcher
    the agent loop gets starts a sandbox, which runs a command and writes in its workdir; the job sees
    loopback only. Under ``--map-root-user`` a normal user's run was uid 0 there, and no sandbox could drop
    to ``nobody``."""
    if who == "root" and os.geteuid() != 0:
        pytest.skip("needs root")
    outside = socket.socket()
    outside.bind(("0.0.0.0", 0))
    outside.listen()
    cmd = [sys.executable, str(Path(__file__).with_name("_netns_driver.py")), "launch", "BASE",
           _host_address() or "127.0.0.1", str(outside.getsockname()[1])]
    cmd, env, uid = _as_user(cmd) if who == "user" else (cmd, dict(os.environ), 0)
    try:
        with driver_base("verl-netns", as_user=uid == TEST_UID) as base:
            cmd[cmd.index("BASE")] = str(base)
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=str(base))
    finally:
        outside.close()
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert "error" not in rep, rep["error"]
    assert rep["rc"] == 0 and rep["driver_uid"] == rep["ns_uid"] == uid, rep
    assert rep["ns_interfaces"] == ["lo"] and rep["reached_host"] is not True
    assert rep["sandbox_rc"] == 0, rep["sandbox_stderr"]
    assert rep["file"] == "written\n"
    # the agent: `nobody` under a root driver; the driver's own uid (1000 in its user namespace) otherwise
    assert rep["file_owner"] == (65534 if uid == 0 else uid)
    assert rep["sandbox_stdout"].split() == ["65534" if uid == 0 else "1000"]


#: Ray as veRL starts it, on loopback; a task reports the uid and interfaces it runs with
RAY = r"""
import os, socket, ray
ray.init(num_cpus=1, include_dashboard=False, object_store_memory=80 << 20, _node_ip_address="127.0.0.1")
print(*ray.get(ray.remote(lambda: (os.geteuid(), ",".join(n for _, n in socket.if_nameindex()))).remote()))
ray.shutdown()
"""


@needs_netns
@pytest.mark.slow
def test_ray_runs_in_the_namespace_as_a_normal_user(tmp_path_factory):
    pytest.importorskip("ray")
    cmd, env, uid = _as_user([sys.executable, "-m", "openforge.train.verl.netns", sys.executable, "-c", RAY])
    with driver_base("verl-ray", as_user=uid == TEST_UID) as base:
        tmp = Path(f"/tmp/of-ray-{os.getpid()}")  # Ray's socket paths must fit AF_UNIX's 107 bytes
        tmp.mkdir()
        try:
            if os.geteuid() == 0:
                os.chown(tmp, uid, uid)
            r = subprocess.run(cmd, env={**env, "HOME": str(base), "TMPDIR": str(tmp)}, capture_output=True,
                               text=True, timeout=300, cwd=str(base))
        finally:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split()[-2:] == [str(uid), "lo"]
