"""Local launcher: isolation, budgets, limits and no leaks — all with real subprocesses."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openforge.core.errors import SandboxError, SandboxFileRefused
from openforge.core.task import Resources, Task
from openforge.launchers._isolation import detect_isolation
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

ISOLATION = detect_isolation()[0]
needs_ns = pytest.mark.skipif(ISOLATION == "none", reason=f"no namespaces here: {detect_isolation()[1]}")
DRIVER = str(Path(__file__).with_name("_driver.py"))


def spec(rid: str = "r1", *, uds: str | None = None, **res) -> SandboxSpec:
    task = Task(id="t", instruction="x", resources=Resources(**res) if res else Resources())
    return SandboxSpec(rollout_id=rid, task=task, proxy_url="http://127.0.0.1:9", api_key="k", proxy_uds=uds,
                       env={"FROM_SPEC": "yes"})


@pytest.fixture
async def launcher(tmp_path):
    launcher = LocalLauncher(base_dir=tmp_path / "sbx")
    yield launcher
    await launcher.aclose()


async def _http_uds_server(path: str, body: bytes):
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await w.drain()
        w.close()

    return await asyncio.start_unix_server(handle, path)


async def test_env_is_scrubbed_and_home_private(launcher, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "host-secret")
    async with await launcher.start(spec()) as sbx:
        r = await sbx.exec(["sh", "-c", "env; pwd"], env={"EXTRA": "1"})
        assert r.returncode == 0, r.stderr
        assert "host-secret" not in r.stdout
        assert f"HOME={sbx.home}" in r.stdout and "FROM_SPEC=yes" in r.stdout and "EXTRA=1" in r.stdout
        assert r.stdout.strip().endswith(str(sbx.workdir))
        assert sbx.home.is_dir() and sbx.workdir.is_dir()


@needs_ns
async def test_network_reaches_proxy_socket_and_nothing_else(launcher, tmp_path):
    sock = str(tmp_path / "proxy.sock")
    server = await _http_uds_server(sock, b"proxy-ok")
    host_tcp = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = host_tcp.sockets[0].getsockname()[1]
    try:
        async with await launcher.start(spec(uds=sock)) as sbx:
            assert sbx.proxy_url.startswith("http://127.0.0.1:") and sbx.proxy_url != "http://127.0.0.1:9"
            code = (
                "import urllib.request,socket,sys\n"
                "print(urllib.request.urlopen(sys.argv[1]+'/v1/models').read().decode())\n"
                "s=socket.socket()\n"
                "try:\n s.connect(('127.0.0.1',int(sys.argv[2]))); print('HOST-REACHED')\n"
                "except OSError as e: print('refused', e.errno)\n"
            )
            r = await sbx.exec([sys.executable, "-c", code, sbx.proxy_url, str(port)])
            assert r.returncode == 0, r.stderr
            assert "proxy-ok" in r.stdout and "HOST-REACHED" not in r.stdout and "refused" in r.stdout
    finally:
        server.close()
        host_tcp.close()


async def test_named_weak_mode_warns_what_an_agent_can_do_and_forwards(tmp_path, caplog):
    sock = str(tmp_path / "p.sock")
    server = await _http_uds_server(sock, b"hello")
    launcher = LocalLauncher(base_dir=tmp_path / "sbx", isolation="none")
    try:
        assert "nothing is isolated" in caplog.text and "forge its reward" in caplog.text
        async with await launcher.start(spec(uds=sock)) as sbx:
            url = await sbx.expose(sock)
            r = await sbx.exec([sys.executable, "-c", f"import urllib.request;print(urllib.request.urlopen('{url}').read())"])
            assert "hello" in r.stdout, r.stderr
    finally:
        server.close()
        await launcher.aclose()


def test_unknown_isolation_is_a_clear_error(tmp_path):
    with pytest.raises(SandboxError, match="unknown isolation"):
        LocalLauncher(base_dir=tmp_path, isolation="docker")


async def test_budget_kills_the_whole_process_group(launcher):
    async with await launcher.start(spec()) as sbx:
        t0 = time.monotonic()
        r = await sbx.exec(["sh", "-c", "(trap '' TERM; sleep 307) & echo $! > bg; sleep 307"], timeout_s=1.0)
        assert r.timed_out and r.returncode is None
        assert time.monotonic() - t0 < 1.0 + launcher.grace_s + 3
        out = await sbx.exec(["sh", "-c", "ps -eo pid,comm | grep -c sleep || true"])
        assert out.stdout.strip() == "0"
    assert subprocess.run(["pgrep", "-f", "sleep 307"], capture_output=True).stdout == b""


async def test_rlimits_and_cgroups(launcher):
    async with await launcher.start(spec(max_open_files=64, memory_mb=64, max_processes=32)) as sbx:
        r = await sbx.exec(["sh", "-c", "ulimit -n"])
        assert r.stdout.strip() == "64"
        hog = "b=bytearray(400*1024*1024); b[::4096]=b'x'*len(b[::4096]); print('survived')"
        r = await sbx.exec([sys.executable, "-c", hog], timeout_s=30)
        assert "survived" not in r.stdout and r.returncode != 0, (sbx.limits, r)


async def test_read_file_refuses_symlink_escape(launcher):
    async with await launcher.start(spec()) as sbx:
        await sbx.exec(["ln", "-s", "/etc/hostname", "leak"])
        with pytest.raises(SandboxFileRefused, match="symbolic link"):  # never followed, wherever it points
            await sbx.read_file("leak")
        with pytest.raises(SandboxError, match="outside the sandbox"):
            await sbx.read_file("/etc/hostname")
        await sbx.write_file("sub/x.txt", b"data")
        assert await sbx.read_file(sbx.workdir / "sub" / "x.txt") == b"data"


@needs_ns
async def test_hidden_paths_are_invisible(launcher, tmp_path):
    secret = tmp_path / "answers"
    secret.mkdir()
    (secret / "key.txt").write_text("42")
    s = spec()
    s.hidden_paths.append(str(secret))
    async with await launcher.start(s) as sbx:
        r = await sbx.exec(["sh", "-c", f"cat {secret}/key.txt"])
        assert "42" not in r.stdout


async def test_cancel_kills_processes_and_close_removes_dir(launcher):
    sbx = await launcher.start(spec())
    task = asyncio.create_task(sbx.exec(["sh", "-c", "echo $$ > pid; exec sleep 307"], timeout_s=300))
    while not (sbx.workdir / "pid").exists():
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await sbx.close()
    await sbx.close()  # idempotent
    assert not sbx.root.exists()
    assert subprocess.run(["pgrep", "-f", "sleep 307"], capture_output=True).stdout == b""


def _no_sleepers() -> bool:
    return subprocess.run(["pgrep", "-f", "sleep 1013"], capture_output=True).stdout == b""


@pytest.mark.parametrize("how", ["sigkill", "sigint", "raise"])
def test_driver_death_leaves_nothing_behind(tmp_path, how):
    base = tmp_path / "sbx"
    proc = subprocess.Popen([sys.executable, DRIVER, str(base), how], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    root = proc.stdout.readline().strip()
    assert root, proc.stderr.read() if proc.stderr else ""
    assert Path(root).exists() and not _no_sleepers()
    if how == "sigkill":
        proc.send_signal(signal.SIGKILL)
    elif how == "sigint":
        proc.send_signal(signal.SIGINT)
    proc.wait(30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (Path(root).exists() or not _no_sleepers()):
        time.sleep(0.1)
    assert not Path(root).exists(), f"{root} left behind after {how}"
    assert _no_sleepers(), f"processes left behind after {how}"
    assert not [p for p in Path("/sys/fs/cgroup/pids").glob("openforge-leak-*")]


def test_stale_dirs_of_dead_drivers_are_swept(tmp_path):
    base = tmp_path / "sbx"
    stale = base / "old-abc"
    stale.mkdir(parents=True)
    (stale / ".owner").write_text("999999999")
    mine = base / "mine"
    mine.mkdir()
    (mine / ".owner").write_text(str(os.getpid()))
    LocalLauncher(base_dir=base)
    assert not stale.exists() and mine.exists()


@needs_ns
async def test_tcp_only_proxy_is_bridged_and_other_ports_stay_closed(launcher):
    async def handle(r, w):
        await r.readuntil(b"\r\n\r\n")
        w.write(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\ntcp-ok")
        await w.drain()
        w.close()

    proxy = await asyncio.start_server(handle, "127.0.0.1", 0)
    other = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port, other_port = proxy.sockets[0].getsockname()[1], other.sockets[0].getsockname()[1]
    s = spec()
    s.proxy_url = f"http://127.0.0.1:{port}"
    try:
        async with await launcher.start(s) as sbx:
            assert sbx.proxy_url != s.proxy_url
            r = await sbx.exec(["sh", "-c", f"curl -s {sbx.proxy_url}/; echo; curl -s -m 2 http://127.0.0.1:{other_port}/ "
                                            f"|| echo refused; curl -s -m 2 http://127.0.0.1:{port}/ || echo refused"])
            assert r.stdout.split() == ["tcp-ok", "refused", "refused"], r
    finally:
        proxy.close()
        other.close()


async def test_nothing_the_agent_starts_outlives_its_command(launcher):
    """What ``Sandbox.end_agent`` relies on locally: a double-forked, setsid'd process the agent starts
    is gone once the command that started it returned (the command's pid namespace ends with it), so
    nothing of the agent's runs while its verifier reads the workdir."""
    import uuid

    if launcher.isolation != "bwrap":
        pytest.skip("only bwrap gives each command its own pid namespace")
    marker = f"leftover-{uuid.uuid4().hex}"
    script = ("import os, sys, time\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              f"        os.execvp(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])\n"
              "    os._exit(0)\n"
              "time.sleep(0.5)\n")
    sbx = await launcher.start(spec("r-left"))
    try:
        r = await sbx.exec([sys.executable, "-c", script], timeout_s=30)
        assert r.returncode == 0, r.stderr
        await sbx.end_agent()
        await asyncio.sleep(0.2)
        alive = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
        assert not alive, f"the agent's process {alive} outlived its command"
    finally:
        await sbx.close()
