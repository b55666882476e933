"""Hostile files where a verifier reads: the agent leaves a FIFO, a socket, a directory, a symlink (to
``/etc/shadow``, to a driver-only file, as a parent directory, as the workdir itself) or a 4 GB sparse
file at the path a verifier reads, and the driver's one reader (``launchers._hostile_read``) must
answer promptly with :class:`SandboxFileRefused`, never block a driver thread, never follow the link,
never read the file whole; and the rollout is the policy's failure (reward 0, trained).

The same through ``Sandbox.read_file`` of the local launcher, a claw check, the workdir copy of a host
verifier, and the Kubernetes pod agent (run locally by the emulated cluster). The agent's actions are
real commands in its own sandbox; every read is bounded by a timeout so that a regression fails
instead of hanging, and a reader blocked on a FIFO is released afterwards by opening it for writing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import time
import tracemalloc
import uuid
from pathlib import Path

import pytest

from openforge.core.errors import SandboxError, SandboxFileNotFound, SandboxFileRefused
from openforge.core.task import Resources, Task
from openforge.core.types import RolloutStatus as S
from openforge.environment import Environment, VerifyResult
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.runner.rollout import run_rollout

REPO = Path(__file__).resolve().parents[2]
TASK = Task(id="answer", instruction="write 42 to answer.txt", environment="answers", timeout_s=30,
            resources=Resources(disk_mb=8192))  # RLIMIT_FSIZE: a 4 GB sparse file must be possible
PROMPT_S = 10.0

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
async def sbx(tmp_path):
    la = LocalLauncher(base_dir=tmp_path / "sbx", grace_s=1.0)
    if la.isolation != "bwrap":  # pragma: no cover - auto refuses without bwrap
        pytest.skip("needs the bwrap sandbox")
    s = await la.start(SandboxSpec(rollout_id="hostile", task=TASK, proxy_url="", api_key=""))
    yield s
    _unblock(s.workdir)
    await s.close()
    await la.aclose()


def _unblock(where: Path) -> None:
    """Release any driver thread still blocked opening a FIFO under ``where`` (only on a regression)."""
    for _ in range(3):
        for d, _dirs, files in os.walk(where):  # errors (a dir removed meanwhile) are skipped
            for name in files:
                with contextlib.suppress(OSError):
                    if stat.S_ISFIFO(os.lstat(os.path.join(d, name)).st_mode):
                        os.close(os.open(os.path.join(d, name), os.O_WRONLY | os.O_NONBLOCK))
        time.sleep(0.1)


async def agent(sandbox, script: str) -> None:
    r = await sandbox.exec(["sh", "-c", script], timeout_s=60)
    assert r.returncode == 0, r.stderr


async def refused(coro, what: str) -> SandboxFileRefused:
    t0 = time.monotonic()
    try:
        await asyncio.wait_for(coro, PROMPT_S)
    except SandboxFileRefused as e:
        assert time.monotonic() - t0 < PROMPT_S
        return e
    except asyncio.TimeoutError:
        pytest.fail(f"reading {what} blocked the driver for {PROMPT_S:.0f}s")
    pytest.fail(f"{what} was read")


# -- Sandbox.read_file on the local launcher ----------------------------------------------------------

async def test_a_fifo_answers_promptly_with_a_distinct_error(sbx):
    await agent(sbx, "mkfifo answer.txt")
    e = await refused(sbx.read_file("answer.txt"), "a FIFO")
    assert isinstance(e, SandboxError) and not isinstance(e, SandboxFileNotFound)
    assert e.path == "answer.txt" and "FIFO" in str(e)


async def test_many_fifos_do_not_exhaust_the_driver_threads(sbx):
    """More FIFOs than the default executor has threads (2 cores: 6), read at once: every read
    answers, and the executor still runs other work afterwards."""
    n = (os.cpu_count() or 1) + 8
    await agent(sbx, " ".join(["mkfifo"] + [f"a{i}.txt" for i in range(n)]))
    reads = [asyncio.wait_for(sbx.read_file(f"a{i}.txt"), PROMPT_S) for i in range(n)]
    got = await asyncio.gather(*reads, return_exceptions=True)
    assert all(isinstance(g, SandboxFileRefused) for g in got), [type(g).__name__ for g in got]
    assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), 5) == 42, "the driver's threads are all blocked"


async def test_a_4g_sparse_file_is_refused_without_being_read(sbx):
    await agent(sbx, "truncate -s 4G answer.txt")
    tracemalloc.start()
    try:
        e = await refused(sbx.read_file("answer.txt"), "a 4 GB sparse file")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"the driver held {peak >> 20} MB"
    assert "4294967296 bytes" in e.why


async def test_max_bytes_sets_the_cap(sbx):
    await agent(sbx, "head -c 3000 /dev/zero > answer.txt")
    await refused(sbx.read_file("answer.txt", max_bytes=2999), "a file one byte over max_bytes")
    assert len(await sbx.read_file("answer.txt", max_bytes=3000)) == 3000
    assert len(await sbx.read_file("answer.txt")) == 3000  # the default cap (16 MiB) is far above


@pytest.fixture
def driver_file():
    """A driver-only file outside ``/tmp`` (which every sandbox masks)."""
    d = REPO / ".pytest-security" / f"hostile-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    d.chmod(0o700)
    (d / "secret.txt").write_text("driver secret\n")
    yield d / "secret.txt"
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("script, read, why", [
    ("ln -s /etc/shadow answer.txt", "answer.txt", "symbolic link"),
    ("ln -s {driver_file} answer.txt", "answer.txt", "symbolic link"),
    ("echo 42 > ../home/a; ln -s ../home/a answer.txt", "answer.txt", "symbolic link"),  # even inside the sandbox
    ("ln -s /etc etc", "etc/shadow", "symbolic link"),
    ("ln -s {driver_dir} d", "d/secret.txt", "symbolic link"),
    ("w=$PWD; cd ..; mv \"$w\" \"$w.old\"; mkdir fake; echo 42 > fake/answer.txt; ln -s \"$PWD/fake\" \"$w\"",
     "answer.txt", "symbolic link"),  # the workdir itself swapped for a link
    ("mkdir answer.txt", "answer.txt", "directory"),
    ("python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('answer.txt')\"", "answer.txt", "socket"),
])
async def test_links_and_irregular_files_are_refused(sbx, driver_file, script, read, why):
    await agent(sbx, script.format(driver_file=driver_file, driver_dir=driver_file.parent))
    e = await refused(sbx.read_file(read), script)
    assert why in e.why and "driver secret" not in str(e)


async def test_a_plain_file_and_a_missing_one_are_unchanged(sbx):
    await agent(sbx, "mkdir -p sub && echo 42 > sub/answer.txt")
    assert await sbx.read_file("sub/answer.txt") == b"42\n"
    assert await sbx.read_file(sbx.workdir / "sub" / "answer.txt") == b"42\n"
    with pytest.raises(SandboxFileNotFound):
        await sbx.read_file("nope.txt")
    with pytest.raises(SandboxFileNotFound):  # under a file, not a folder: not there either
        await sbx.read_file("sub/answer.txt/x")


# -- the rollout's outcome ------------------------------------------------------------------------------

class Answers(Environment):
    name = "answers"

    def tasks(self, split=None):
        return [TASK]

    async def verify(self, task, sandbox):
        return VerifyResult(reward=float((await sandbox.read_file("answer.txt")).strip() == b"42"))


class Shell(Harness):
    name = "shell"

    def __init__(self, command: str):
        self.command = command

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        return HarnessResult.from_exec(await ctx.exec(["sh", "-c", self.command]), harness=self.name)


@pytest.mark.parametrize("command", ["mkfifo answer.txt", "truncate -s 4G answer.txt", "ln -s /etc/shadow answer.txt"])
async def test_the_rollout_is_the_policys_failure(rig, command):
    proxy, launcher, store = await rig({"turns": [{"text": "ok"}]})

    async def rescue() -> None:  # a regression must fail, not hang: free a read blocked on the FIFO
        while not any(Path(launcher.base_dir).glob("*/work/answer.txt")):
            await asyncio.sleep(0.2)
        await asyncio.sleep(PROMPT_S)
        while True:
            await asyncio.to_thread(_unblock, Path(launcher.base_dir))
            await asyncio.sleep(0.5)

    rescuer = asyncio.ensure_future(rescue())
    try:
        traj = await run_rollout(harness=Shell(command), environment=Answers(), task=TASK, launcher=launcher,
                                 proxy=proxy, store=store)
    finally:
        rescuer.cancel()
    assert traj.metrics["verify_s"] < PROMPT_S, "the verifier's read blocked"
    assert traj.status == S.POLICY_FAILURE and traj.reward == 0.0 and traj.trainable, (traj.status, traj.error)
    assert traj.metadata["verify_refused_file"] == "answer.txt"
    assert "refused" in traj.metadata["verify_detail"]


# -- a claw check and the workdir copy of a host verifier ----------------------------------------------

@pytest.mark.parametrize("script", ["mkfifo hello.txt", "truncate -s 4G hello.txt", "ln -s /etc/hostname hello.txt",
                                    "echo 'hello world' > real.txt; ln -s real.txt hello.txt"])
async def test_a_claw_check_reads_through_the_same_reader(tmp_path, script):
    from openforge.envs.claw import ClawEnvironment

    la = LocalLauncher(base_dir=tmp_path / "sbx")
    env = ClawEnvironment()
    task = env.task("files-create-hello")
    task = task.model_copy(update={"resources": task.resources.model_copy(update={"disk_mb": 8192})})
    s = await la.start(SandboxSpec(rollout_id="claw", task=task, proxy_url="", api_key="k"))
    try:
        await env.setup(task, s)
        await agent(s, script)
        res = await asyncio.wait_for(env.verify(task, s), PROMPT_S)
        assert res.reward == 0.0, res
    finally:
        _unblock(s.workdir)
        await env.teardown(task, s)
        await s.close()
        await la.aclose()


def test_the_workdir_copy_follows_no_link(tmp_path):
    """``copy_as_data`` (a host verifier's copy): a workdir replaced by a link is copied empty, a link
    inside is left out, a FIFO is skipped without blocking, a regular file is copied."""
    from openforge.launchers._verifier import copy_as_data

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "answer.txt").write_text("not the agent's\n")
    (tmp_path / "rollout").mkdir()
    work = tmp_path / "rollout" / "work"
    work.symlink_to(elsewhere)
    rep = copy_as_data(work, tmp_path / "copy1", max_bytes=1 << 20)
    assert not any((tmp_path / "copy1").iterdir()) and rep.files == 0

    work.unlink()
    work.mkdir()
    (work / "answer.txt").write_text("42\n")
    (work / "sub").symlink_to(elsewhere)
    os.mkfifo(work / "pipe")
    rep = copy_as_data(work, tmp_path / "copy2", max_bytes=1 << 20)
    assert sorted(p.name for p in (tmp_path / "copy2").iterdir()) == ["answer.txt"] and rep.skipped == 2


# -- the Kubernetes pod agent ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("kmock")
    from launchers.kcluster import Cluster

    with Cluster() as c:
        yield c


@pytest.mark.parametrize("script, read, why", [
    ("mkfifo answer.txt", "answer.txt", "FIFO"), ("truncate -s 4G answer.txt", "answer.txt", "bytes"),
    ("ln -s /etc/hostname answer.txt", "answer.txt", "symbolic link"), ("ln -s /etc etc", "etc/hostname", "symbolic link"),
])
async def test_the_pod_agent_refuses_the_same(cluster, tmp_path, script, read, why):
    from openforge.launchers.kubernetes import KubernetesLauncher

    la = KubernetesLauncher(host=cluster.url, run_id=f"k-hostile-{len(script)}", workdir=str(tmp_path / "pods/{pod}/work"),
                            home=str(tmp_path / "pods/{pod}/home"))
    s = await la.start(SandboxSpec(rollout_id=f"r-hostile-{len(script)}", task=TASK, proxy_url="http://127.0.0.1:9",
                                   api_key="k"))
    try:
        await agent(s, script)
        e = await refused(s.read_file(read), f"{script} in a pod")
        assert why in e.why
        await agent(s, "echo 42 > plain.txt")
        assert await s.read_file("plain.txt") == b"42\n"
        await refused(s.read_file("plain.txt", max_bytes=2), "a file over max_bytes in a pod")
        with pytest.raises(SandboxFileNotFound):
            await s.read_file("nope.txt")
    finally:
        _unblock(tmp_path / "pods")
        await s.close()
        await la.aclose()


# -- a normal-user driver: the agent is the driver's own uid and can take its own file's read bit -------

READ_AS_USER = """
import sys
ns = {"__name__": "hostile_read"}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), ns)
for rel in sys.argv[3:]:
    try:
        ns["read_hostile"](rel, root=sys.argv[2], max_bytes=100)
        print(rel, "read")
    except ns["FileRefused"] as e:
        print(rel, "refused:", e.why)
"""


def test_a_file_made_unreadable_is_refused_not_an_error_for_a_normal_user_driver():
    """Under a non-root driver, ``chmod 000`` is the agent's to do: a refusal (its failure), not an
    ``OSError`` that would make the rollout the environment's."""
    import subprocess

    from .test_sandbox_escapes import TEST_UID, _user_python

    py = _user_python()
    if py is None or os.geteuid() != 0:
        pytest.skip("needs root and a system Python of this version to run as a normal user")
    base = REPO / ".pytest-security" / f"hread-{uuid.uuid4().hex[:8]}"
    try:
        (base / "d").mkdir(parents=True)
        (base / "answer.txt").write_text("42\n")
        (base / "ok.txt").write_text("42\n")
        (base / "d" / "x.txt").write_text("42\n")
        for p in (base, base / "d", base / "answer.txt", base / "ok.txt", base / "d" / "x.txt"):
            os.chown(p, TEST_UID, TEST_UID)
        (base / "answer.txt").chmod(0)
        (base / "d").chmod(0)
        src = Path(__file__).resolve().parents[2] / "openforge" / "launchers" / "_hostile_read.py"
        r = subprocess.run(["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}", "--clear-groups", py, "-I", "-S",
                            "-c", READ_AS_USER, str(src), str(base), "answer.txt", "d/x.txt", "ok.txt"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith("answer.txt refused: not readable") and lines[1].startswith("d/x.txt refused:")
        assert lines[2] == "ok.txt read"
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
