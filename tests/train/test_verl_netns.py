"""A device=cpu veRL run lives in a loopback-only network namespace (openforge.train.verl.netns): nothing
outside reaches the ports its processes open, nothing inside reaches out. No verl needed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from openforge.config import RunConfig
from openforge.errors import ConfigError
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


def test_the_entry_point_refuses_to_run_in_the_hosts_own_namespace():
    if netns.interfaces() == ["lo"]:
        pytest.skip("this machine's own namespace has only loopback")
    r = subprocess.run([sys.executable, "-m", "openforge.train.verl.netns", "true"], capture_output=True, text=True)
    assert r.returncode != 0 and "not a fresh network namespace" in r.stderr


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
    from openforge.task import Task
    from openforge.train.verl.launch import launch

    res = launch(_cfg(device="cpu"), tmp_path, [Task(id="t0", instruction="do", environment="claw")], dry_run=True)
    assert res["command"][:len(PREFIX)] == PREFIX and res["command"][len(PREFIX) + 1:][:2] == ["-m", "verl.trainer.main_ppo"]
    script = (tmp_path / "verl" / "command.sh").read_text()
    assert "unshare" in script and "openforge.train.verl.netns" in script
