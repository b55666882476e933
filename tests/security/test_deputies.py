"""Nothing outside the sandbox acts on the agent's behalf: each test plays an agent (or a hostile
client) against a driver-side helper — the fault forwarder, the services' sockets, the fault
shims' evidence, the rule for a service that died — and checks that the helper does only what it
was set up to do. (Attacks on the driver's resources: ``test_driver_resources.py``.)

The attacks run from inside real bubblewrap sandboxes (``LocalLauncher``); the confused-deputy and
forged-evidence scenarios run as their own driver process, as root and as a normal user
(``_deputy.py``, ``_evidence.py``); the others with the test runner as the driver.
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from openforge.core.task import Task
from openforge.faults.forwarder import FaultForwarder
from openforge.faults.spec import ServiceFault
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.plugins import make_environment

from ._drivers import driver_base, run_driver

pytestmark = pytest.mark.timeout(300)
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the agent is another uid only under a root driver")


async def http_server(path: Path, body: bytes) -> asyncio.AbstractServer:
    """A minimal HTTP server on a Unix socket that answers every request with ``body``."""

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while await r.readline() not in (b"\r\n", b"\n", b""):
                pass
            w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                    % (len(body), body))
            await w.drain()
        finally:
            w.close()

    return await asyncio.start_unix_server(handle, str(path))


def spec(rollout_id: str, task: Task) -> SandboxSpec:
    return SandboxSpec(rollout_id=rollout_id, task=task, proxy_url="http://127.0.0.1:9", api_key="k")


@pytest.fixture
async def launcher(tmp_path):
    launcher = LocalLauncher(base_dir=tmp_path / "sbx")
    yield launcher
    await launcher.aclose()


@pytest.mark.parametrize("as_user", [False, True], ids=["driver-as-root", "driver-as-user"])
def test_fault_forwarder_is_no_confused_deputy(as_user):
    """Under a service fault the agent swaps its service's socket for a symlink — to the driver's
    private 0700 socket, then to a concurrent rollout's service — and calls through the forwarder
    (``_deputy.py``). The driver's socket must stay unreached and the victim, who did nothing, must
    not score."""
    with driver_base("dep", as_user=as_user) as base:
        rep = run_driver("_deputy.py", [str(base)], as_user=as_user)
    out = rep["out"]
    assert "DRIVER-PRIVATE" not in out, out
    assert "SWAPPED" not in out, out  # the socket's path is not the agent's to replace
    assert rep["own_is_socket"], "the service's socket was replaced"
    assert rep["victim_reward"] < 1.0, "a rollout that did nothing scored through another's forwarder"
    # The attacker's own request reached its own service (the attack was real, not a dead end).
    assert rep["own_reward"] == 1.0, out


async def test_forwarder_connects_to_the_socket_it_was_given(tmp_path):
    """The forwarder pins its service's socket at start: a path swapped afterwards (a symlink to
    another socket) does not redirect it."""
    import httpx

    (tmp_path / "svc").mkdir()
    real = await http_server(tmp_path / "svc" / "real.sock", b"REAL")
    other = await http_server(tmp_path / "other.sock", b"OTHER")
    fwd = await FaultForwarder(ServiceFault(kind="service_unavailable", calls=1), tmp_path / "svc" / "real.sock",
                               tmp_path / "fwd.sock").start()
    try:
        os.rename(tmp_path / "svc" / "real.sock", tmp_path / "svc" / "moved.sock")
        os.symlink(tmp_path / "other.sock", tmp_path / "svc" / "real.sock")
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=fwd.uds), base_url="http://x") as c:
            assert (await c.get("/")).text == "REAL"
    finally:
        await fwd.stop()
        real.close()
        other.close()


async def test_forwarder_refuses_a_symlink_for_a_socket(tmp_path):
    from openforge.core.errors import EnvironmentError_

    other = await http_server(tmp_path / "other.sock", b"OTHER")
    os.symlink(tmp_path / "other.sock", tmp_path / "svc.sock")
    with pytest.raises(EnvironmentError_, match="not a Unix socket"):
        await FaultForwarder(ServiceFault(kind="service_unavailable"), tmp_path / "svc.sock",
                             tmp_path / "fwd.sock").start()
    other.close()


OTHER_UID = 23456  # a local user that is neither the driver nor the agent


def _connects_as(uid: int, path: str) -> str:
    import subprocess
    import sys

    probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect(sys.argv[1]); print('connected')\nexcept OSError as e:\n    print('denied', e)\n")
    r = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-I", "-S",
                        "-c", probe, path], capture_output=True, text=True, timeout=30)
    return (r.stdout + r.stderr).strip()


@ROOT_ONLY
async def test_service_sockets_admit_the_agent_only(launcher, tmp_path):
    """The claw services' socket and a task service's bridge: the agent (in the sandbox) connects,
    another local user does not, and the agent cannot change who may."""
    from openforge.envs.services import expose_tcp

    env = make_environment("claw")
    task = env.task("issues-close")
    sbx = await launcher.start(spec("svc", task))
    tcp = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    sock_dir = Path(__import__("tempfile").mkdtemp(prefix="ofsv-", dir="/tmp"))
    try:
        await env.setup(task, sbx)
        claw = env._servers[id(sbx)][0].uds
        _, bridge = await expose_tcp(sbx, "mail", tcp.sockets[0].getsockname()[1], sock_dir)
        for path in (claw, str(sock_dir / "mail.sock")):
            st = os.stat(path)
            assert st.st_mode & 0o007 == 0, f"{path} is open to every local user: {oct(st.st_mode)}"
            assert st.st_uid == os.geteuid(), "the agent must not own (and so re-open) the socket"
            assert _connects_as(OTHER_UID, path).startswith("denied"), path
        r = await sbx.exec(["sh", "-c", "curl -s -o /dev/null -w '%{http_code}' $CLAW_API/issues"],
                           env=env.harness_env(task, sbx), timeout_s=30)
        assert r.stdout == "200", (r.stdout, r.stderr)  # the agent itself still gets through
        bridge.close()
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
        tcp.close()
        __import__("shutil").rmtree(sock_dir, ignore_errors=True)


class Upstream:
    """A service on a Unix socket that records every request it got; ``/stream`` answers in two
    chunks, the second only once :attr:`go` is set."""

    def __init__(self) -> None:
        self.got: list[tuple[str, bytes]] = []
        self.go = asyncio.Event()

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            head = (await r.readuntil(b"\r\n\r\n")).decode("latin-1")
            length = next((int(ln.split(":", 1)[1]) for ln in head.split("\r\n")
                           if ln.lower().startswith("content-length:")), 0)
            body = await r.readexactly(length)
            path = head.split(" ", 2)[1]
            self.got.append((path, body))
            if path == "/stream":
                w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
                await w.drain()
                await self.go.wait()
                w.write(b"4\r\nlast\r\n0\r\n\r\n")
            else:
                w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()


@pytest.fixture
async def forwarder(tmp_path):
    up = Upstream()
    server = await asyncio.start_unix_server(up.handle, str(tmp_path / "up.sock"))
    fwd = await FaultForwarder(ServiceFault(kind="service_unavailable"), tmp_path / "up.sock", tmp_path / "f.sock",
                               max_body=4096).start()  # not armed: every request is forwarded
    yield fwd, up
    await fwd.stop()
    server.close()


async def test_forwarder_refuses_an_oversized_body(forwarder):
    import httpx

    fwd, up = forwarder
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=fwd.uds), base_url="http://x") as c:
        assert (await c.post("/small", content=b"x" * 100)).status_code == 200
        assert (await c.post("/big", content=b"x" * 5000)).status_code == 413

        async def chunks():  # no content-length: the bound holds while reading
            for _ in range(10):
                yield b"y" * 1000

        assert (await c.post("/chunked", content=chunks())).status_code == 413
    assert [p for p, _ in up.got] == ["/small"], up.got


async def test_forwarder_forwards_nothing_of_a_truncated_body(forwarder):
    fwd, up = forwarder
    _, w = await asyncio.open_unix_connection(fwd.uds)
    w.write(b"POST /cut HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
            b'{"to": "boss", "subject": "only half')
    await w.drain()
    await asyncio.sleep(0.3)
    w.close()  # the client leaves mid-body
    await asyncio.sleep(0.5)
    assert up.got == [], "a truncated request reached the service"


async def test_forwarder_streams_the_response(forwarder):
    import httpx

    fwd, up = forwarder
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=fwd.uds), base_url="http://x") as c, \
            c.stream("GET", "/stream") as resp:
        it = resp.aiter_raw()
        # the first chunk arrives while the service still holds the rest: nothing is buffered whole
        first = await asyncio.wait_for(it.__anext__(), 10)
        up.go.set()
        rest = b"".join([chunk async for chunk in it])
    assert first + rest == b"firstlast"


FRAGILE = '''
import os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/crash":  # a request that kills the service
            os._exit(3)
        self.send_response(200); self.send_header("content-length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass

if os.environ.get("DIE_ALONE_AFTER"):
    threading.Thread(target=lambda: (time.sleep(float(os.environ["DIE_ALONE_AFTER"])), os._exit(4)), daemon=True).start()
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
'''


def _fragile_task(root: Path, die_alone_after: float | None = None) -> Path:
    d = root / "tasks" / "fragile"
    (d / "services").mkdir(parents=True)
    (d / "services" / "svc.py").write_text(FRAGILE)
    env = f"DIE_ALONE_AFTER={die_alone_after} " if die_alone_after else ""
    (d / "task.toml").write_text(f'timeout_s = 60\n\n[[services]]\nname = "fragile"\n'
                                 f'command = "{env}python3 $OPENFORGE_TASK_DIR/services/svc.py"\n')
    (d / "instruction.md").write_text("Do not break the service.\n")
    (d / "verify.py").write_text("import json; print(json.dumps({'reward': 1.0}))\n")
    return d.parent


FINISH = {"tool": {"name": "finish", "arguments": {"answer": "done"}}}


async def _roll_fragile(rig, tasks: Path, turns: list) -> object:
    from openforge.harnesses.react import ReactHarness
    from openforge.runner.rollout import run_rollout

    env = make_environment(str(tasks))
    proxy, launcher, store = await rig({"turns": [*turns, FINISH]})
    return await run_rollout(harness=ReactHarness(max_turns=4), environment=env, task=env.task("fragile"),
                             launcher=launcher, proxy=proxy, store=store)


async def test_a_policy_that_crashes_a_service_is_trained_on(rig, tmp_path):
    """The agent's request kills the task's service: ``policy_failure`` with reward 0 (trained), not
    an ``env_error`` a policy could seek out to keep its failures out of the data."""
    from openforge.core.types import RolloutStatus

    traj = await _roll_fragile(rig, _fragile_task(tmp_path), [{"shell": "curl -s $FRAGILE_URL/crash; echo rc=$?"}])
    assert traj.status == RolloutStatus.POLICY_FAILURE and traj.reward == 0.0, (traj.status, traj.error)
    assert "after the agent's requests" in (traj.error or ""), traj.error


async def test_a_service_that_dies_on_its_own_is_not_the_policys(rig, tmp_path):
    """The service exits by itself while the agent never touched it: ``env_error`` as before."""
    from openforge.core.types import RolloutStatus

    traj = await _roll_fragile(rig, _fragile_task(tmp_path, die_alone_after=1.0), [{"shell": "sleep 3; echo idle"}])
    assert traj.status == RolloutStatus.ENV_ERROR, (traj.status, traj.error)


@pytest.mark.parametrize("as_user", [False, True], ids=["driver-as-root", "driver-as-user"])
def test_fault_evidence_cannot_be_forged(as_user):
    """The agent tries every way to make a command fault look met without running the command (a
    log in HOME, a log or a new shim next to the shims, the oracle's socket asked directly, a copy of
    the shim, a shell holding the shim open): the record stays empty. Then it runs the command: the
    failure is served and recorded, once (``_evidence.py``)."""
    with driver_base("ev", as_user=as_user) as base:
        rep = run_driver("_evidence.py", [str(base)], as_user=as_user)
    out = rep["attack"]
    assert "WROTE-SHIM-DIR" not in out and "REPLACED-SHIM" not in out, out
    assert "direct: pass" in out and "held: pass" in out, out  # asked, but not by a shim being run
    assert rep["after_attack"]["injected"][0]["fired"] == 0, rep
    assert rep["after_attack"]["evidence"] == "driver" and rep["after_attack"]["refused_calls"] >= 3, rep
    assert "resource temporarily unavailable" in rep["ran_stderr"] and rep["ran_stdout"] == "a\nb\n", rep
    assert rep["after_run"]["injected"][0]["fired"] == 1, rep
