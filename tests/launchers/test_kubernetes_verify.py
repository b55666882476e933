"""The Kubernetes launcher's verifier side (emulated cluster, ``kcluster``): a task directory's
verifier runs in the rollout's pod, in the pod's workdir, never on a copy pulled to the driver; and
what ``pull_workdir`` does copy out of a pod is bounded, packed and unpacked (more is the agent's failure:
it left a workdir too large to check)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openforge.core.task import Resources, Task
from openforge.environment import Environment, VerifyResult
from openforge.envs.taskdir import TaskDirEnvironment
from openforge.launchers._verifier import WorkdirTooLarge
from openforge.launchers.base import SandboxSpec
from openforge.runner.rollout_steps import _verify

from .kcluster import Cluster

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster():
    with Cluster() as c:
        yield c


def make_launcher(cluster, tmp_path, run_id, **kw):
    from openforge.launchers.kubernetes import KubernetesLauncher

    return KubernetesLauncher(host=cluster.url, run_id=run_id, workdir=str(tmp_path / "pods/{pod}/work"),
                              home=str(tmp_path / "pods/{pod}/home"), **kw)


VIEW_PY = """
import json, os, sys
print(json.dumps({"reward": float(open("out.txt").read().strip() == "42"), "cwd": os.getcwd(),
                  "workdir": os.environ["OPENFORGE_WORKDIR"], "task_dir": os.environ["OPENFORGE_TASK_DIR"],
                  "home": os.environ["HOME"], "pythonpath": os.environ.get("PYTHONPATH"),
                  "pod_env": [k for k in os.environ if k.startswith("OPENFORGE_") and "DIR" not in k
                              and k not in ("OPENFORGE_VERDICT", "OPENFORGE_UNTRUSTED", "OPENFORGE_UNTRUSTED_WEAK_OK")],
                  "seed": open(os.path.join(os.environ["OPENFORGE_TASK_DIR"], "seed.txt")).read().strip()}))
"""


async def test_task_dir_verifier_runs_in_the_pod(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep + "/nonexistent")
    d = tmp_path / "tasks" / "inpod"
    d.mkdir(parents=True)
    (d / "task.toml").write_text('split = "train"\n')
    (d / "instruction.md").write_text("Write 42 to out.txt.\n")
    (d / "verify.py").write_text(VIEW_PY)
    (d / "seed.txt").write_text("from the task dir\n")
    env = TaskDirEnvironment(d)
    task = env.tasks()[0]
    la = make_launcher(cluster, tmp_path, "k-vfy")
    sbx = await la.start(SandboxSpec(rollout_id="r-inpod", task=task, proxy_url="http://127.0.0.1:9", api_key="k"))
    try:
        r = await sbx.exec(["sh", "-c", "echo 42 > out.txt"], timeout_s=30)
        assert r.returncode == 0, r.stderr
        res = await env.verify(task, sbx)
        m = res.metadata
        assert res.reward == 1.0 and m["cwd"] == m["workdir"] == str(sbx.workdir), "the pod's own workdir"
        assert sbx._local is None, "nothing was pulled to the driver"
        assert m["task_dir"] != str(d) and m["task_dir"].startswith("/tmp/openforge-verify-"), "a copy in the pod"
        assert m["seed"] == "from the task dir" and m["pythonpath"] is None
        assert m["pod_env"] == [], "nothing of the pod's environment (its API key) reaches the verifier"
        assert not Path(m["task_dir"]).exists(), "the verifier's copy is removed from the pod afterwards"
    finally:
        await sbx.close()
        await la.aclose()


class _PullsWorkdir(Environment):
    """A file-checking environment: its verifier copies the workdir out of the pod."""

    name = "pulls-workdir"

    def tasks(self):
        return []

    async def verify(self, task, sandbox):
        await sandbox.pull_workdir()
        return VerifyResult(reward=1.0)


@pytest.mark.parametrize("what, cmd, where", [
    ("incompressible", "head -c 3000000 /dev/urandom > big.bin", "as sent"),  # never read whole
    ("a small archive of zeros", "head -c 30000000 /dev/zero > zeros.bin", "unpacked"),
])
async def test_pull_workdir_is_bounded(cluster, tmp_path, what, cmd, where):
    la = make_launcher(cluster, tmp_path, f"k-cap-{len(what)}", max_workdir_mb=1)
    task = Task(id="t", instruction="x", resources=Resources(cpu=1, memory_mb=512))
    sbx = await la.start(SandboxSpec(rollout_id=f"r-cap-{len(what)}", task=task, proxy_url="http://127.0.0.1:9",
                                     api_key="k"))
    try:
        assert (await sbx.exec(["sh", "-c", cmd], timeout_s=60)).returncode == 0
        with pytest.raises(WorkdirTooLarge, match=rf"\({where}\) is larger than 1 MB"):
            await sbx.pull_workdir()
        assert not list((sbx._local or tmp_path / "none").rglob("*.bin")), f"{what}: nothing unpacked"
        # what the agent left is too large to check: its failure, trained (not a discarded env_error)
        verdict, status, _ = await _verify(_PullsWorkdir(), task, sbx, meta := {}, {})
        assert status is None and verdict.reward == 0.0 and "larger than 1 MB" in meta["verify_agent_fault"]
    finally:
        await sbx.close()
        await la.aclose()


# -- the agent cannot reach its verifier (issue 34) ------------------------------------------------------

VERIFY_42 = """
import json, sys
print(json.dumps({"reward": float(open("out.txt").read().strip() == "42")}))
"""

#: Left running by the agent (setsid, its own session): ignores SIGTERM/SIGHUP/SIGINT, moves to a new pid
#: every few rounds (fork, parent exits), and rewrites the verifier's unpacked files (verify.py, and a
#: json.py beside it for ``import json``) whenever they appear; a heartbeat file says it is alive.
LEFTOVER = r"""
import glob, os, signal, sys, time
mark, alive = sys.argv[1], sys.argv[2]
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(s, signal.SIG_IGN)
forged = "import sys\nprint('{\"reward\": 1.0}')\nsys.exit(0)\n"
n = 0
while True:
    n += 1
    if n % 20 == 0 and os.fork():
        os._exit(0)
    with open(alive, "w") as f:
        f.write(f"{os.getpid()} {n}")
    for d in glob.glob("/tmp/openforge-verify-*/ro0"):
        if os.path.exists(os.path.join(d, mark)):
            for name in ("verify.py", "json.py"):
                try:
                    with open(os.path.join(d, f".{name}.{n}"), "w") as f:
                        f.write(forged)
                    os.replace(os.path.join(d, f".{name}.{n}"), os.path.join(d, name))
                except OSError:
                    pass
    time.sleep(0.001)
"""


def _verify_task(tmp_path, name: str):
    import uuid

    d = tmp_path / "tasks" / name
    d.mkdir(parents=True)
    (d / "task.toml").write_text('split = "train"\n')
    (d / "instruction.md").write_text("Write 42 to out.txt.\n")
    (d / "verify.py").write_text(VERIFY_42)
    mark = f"mark-{uuid.uuid4().hex}"  # so the leftover touches this test's copy only (/tmp is the host's here)
    (d / mark).write_text("")
    env = TaskDirEnvironment(d)
    return env, env.tasks()[0], mark


async def _beats(path: Path, within_s: float) -> bool:
    import asyncio

    first = path.read_text() if path.exists() else None
    end = asyncio.get_running_loop().time() + within_s
    while asyncio.get_running_loop().time() < end:
        await asyncio.sleep(0.05)
        if path.exists() and path.read_text() != first:
            return True
    return False


async def test_a_process_the_agent_left_cannot_touch_the_verifier(cluster, tmp_path):
    """A setsid'd, pid-hopping leftover that rewrites verify.py and drops json.py beside it in a loop:
    the verdict is the real one (the agent wrote the wrong answer), and the leftover is dead after."""
    env, task, mark = _verify_task(tmp_path, "leftover")
    la = make_launcher(cluster, tmp_path, "k-left")
    sbx = await la.start(SandboxSpec(rollout_id="r-left", task=task, proxy_url="http://127.0.0.1:9", api_key="k"))
    try:
        await sbx.write_file("leftover.py", LEFTOVER.encode())
        alive = Path(str(sbx.workdir)) / "alive"
        r = await sbx.exec(["sh", "-c", f"echo 41 > out.txt; setsid python3 leftover.py {mark} {alive} "
                                        f"</dev/null >/dev/null 2>&1 & while [ ! -s {alive} ]; do sleep 0.05; done"],
                           timeout_s=30)  # the command ends once the leftover runs in a session of its own
        assert r.returncode == 0, r.stderr
        assert await _beats(alive, 30.0), "the leftover runs after the agent's command ended"
        res = await env.verify(task, sbx)
        assert res.reward == 0.0, f"the leftover wrote the verdict: {res}"
        assert not await _beats(alive, 1.0), "the leftover was ended before the verifier ran"
    finally:
        await sbx.close()
        await la.aclose()


#: The agent's modules in its workdir, named like what an unpacker, the pod agent or a verifier imports:
#: each records that it was imported; ``tarfile`` also forges the verifier it would unpack.
SHADOWS = {
    "tarfile": "class _T:\n"
               "    def extractall(self, dest, **kw):\n"
               "        os.makedirs(os.path.join(dest, 'ro0'), exist_ok=True)\n"
               "        with builtins.open(os.path.join(dest, 'ro0', 'verify.py'), 'w') as f:\n"
               "            f.write(\"print('{\\\"reward\\\": 1.0}')\\n\")\n"
               "def open(*a, **k):\n    return _T()\n",
    **{name: "" for name in ("gzip", "zlib", "hashlib", "json", "shutil", "base64")},
}


async def test_the_agents_modules_in_its_workdir_are_never_imported(cluster, tmp_path):
    """``python3 -c`` puts its working directory first on sys.path: the pod agent (working directory:
    the workdir) and anything it runs there must not import the agent's ``tarfile.py`` / ``gzip.py``."""
    env, task, _ = _verify_task(tmp_path, "shadows")
    la = make_launcher(cluster, tmp_path, "k-shadow")
    sbx = await la.start(SandboxSpec(rollout_id="r-shadow", task=task, proxy_url="http://127.0.0.1:9", api_key="k"))
    try:
        pwned = Path(str(sbx.workdir)) / "pwned.txt"
        for name, body in SHADOWS.items():
            head = f"import builtins, os\nbuiltins.open({str(pwned)!r}, 'a').write(__name__ + '\\n')\n"
            await sbx.write_file(f"{name}.py", (head + body).encode())
        assert (await sbx.exec(["sh", "-c", "echo 41 > out.txt"], timeout_s=30)).returncode == 0
        outcome: object = None
        pulled: object = None
        try:
            outcome = await env.verify(task, sbx)
        except Exception as e:  # an imported shadow breaks what imported it: the record below says which
            outcome = e
        try:
            await sbx.pull_workdir()  # the pod agent packs a gzip tar
        except Exception as e:
            pulled = e
        assert not pwned.exists(), (f"imported from the workdir: {pwned.read_text().split()} (verdict {outcome!r}; "
                                    f"pull_workdir {pulled!r})")
        assert getattr(outcome, "reward", None) == 0.0 and pulled is None, (outcome, pulled)
    finally:
        await sbx.close()
        await la.aclose()


async def test_the_agent_cannot_stop_the_pod_agent(cluster, tmp_path):
    """Signals from inside the pod do not end the pod agent (on SIGTERM it used to exit 0: the pod
    "Succeeded", an infra_error that is retried, so the failure vanished from training)."""
    task = Task(id="t", instruction="x", resources=Resources(cpu=1, memory_mb=512))
    la = make_launcher(cluster, tmp_path, "k-sig")
    sbx = await la.start(SandboxSpec(rollout_id="r-sig", task=task, proxy_url="http://127.0.0.1:9", api_key="k"))
    try:
        # PID 1 is the pod agent here (its own pid namespace); the guard keeps this off any other PID 1
        r = await sbx.exec(["sh", "-c", "grep -q ThreadingHTTPServer /proc/1/cmdline || exit 3; "
                                        "for s in TERM INT HUP QUIT USR1 KILL STOP; do kill -s $s 1; done; sleep 0.5"],
                           timeout_s=30)
        assert r.returncode == 0, f"PID 1 is not the pod agent: {r}"
        r = await sbx.exec(["echo", "still here"], timeout_s=30)
        assert r.returncode == 0 and r.stdout.strip() == "still here"
    finally:
        await sbx.close()
        await la.aclose()


async def test_pull_workdir_ends_what_the_agent_left(cluster, tmp_path):
    """File checks (``pull_workdir``) and the commands a check runs in the pod afterwards see the workdir
    as the agent left it: a leftover that keeps changing it is ended before the copy."""
    _, task, mark = _verify_task(tmp_path, "pull")
    la = make_launcher(cluster, tmp_path, "k-pull")
    sbx = await la.start(SandboxSpec(rollout_id="r-pull", task=task, proxy_url="http://127.0.0.1:9", api_key="k"))
    try:
        await sbx.write_file("leftover.py", LEFTOVER.encode())
        alive = Path(str(sbx.workdir)) / "alive"
        r = await sbx.exec(["sh", "-c", f"setsid python3 leftover.py {mark} {alive} </dev/null >/dev/null 2>&1 & "
                                        f"while [ ! -s {alive} ]; do sleep 0.05; done"], timeout_s=30)
        assert r.returncode == 0 and await _beats(alive, 30.0), r
        copy = await sbx.pull_workdir()
        assert not await _beats(alive, 1.0), "the leftover was ended before the copy"
        assert (copy / "alive").read_text() == alive.read_text()
    finally:
        await sbx.close()
        await la.aclose()


#: Left running by the agent: ignores the polite signals, beats, and after a second (once the verifier
#: has started) writes the right answer to out.txt, again and again.
ANSWER_LATER = r"""
import os, signal, sys, time
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(s, signal.SIG_IGN)
alive, t0, n = sys.argv[1], time.monotonic(), 0
while True:
    n += 1
    with open(alive, "w") as f:
        f.write(str(n))
    if time.monotonic() - t0 > 1.0:
        with open("out.txt.tmp", "w") as f:
            f.write("42\n")
        os.replace("out.txt.tmp", "out.txt")
    time.sleep(0.02)
"""


async def test_a_custom_verifier_reads_the_workdir_as_the_agent_left_it(cluster, tmp_path):
    """A Python environment whose verify() only calls ``read_file`` (no ``pull_workdir``, no task-dir
    verifier): the rollout ends every process the agent left before verifying, so a leftover that writes
    the right answer while the verifier runs does not get it scored."""
    import asyncio

    from openforge.environment import Environment, VerifyResult
    from openforge.runner.rollout_steps import _verify

    class ReadsOne(Environment):
        name = "reads-one"

        def tasks(self):
            return [Task(id="t", instruction="Write 42 to out.txt.")]

        async def verify(self, task, sandbox):
            await asyncio.sleep(2.0)  # a slow check: time for a leftover to act
            return VerifyResult(reward=float((await sandbox.read_file("out.txt")).strip() == b"42"))

    env = ReadsOne()
    task = env.tasks()[0]
    la = make_launcher(cluster, tmp_path, "k-custom")
    sbx = await la.start(SandboxSpec(rollout_id="r-custom", task=task, proxy_url="http://127.0.0.1:9", api_key="k"))
    try:
        await sbx.write_file("later.py", ANSWER_LATER.encode())
        alive = Path(str(sbx.workdir)) / "alive"
        r = await sbx.exec(["sh", "-c", f"echo 41 > out.txt; setsid python3 later.py {alive} </dev/null >/dev/null "
                                        f"2>&1 & while [ ! -s {alive} ]; do sleep 0.05; done"],
                           timeout_s=30)
        assert r.returncode == 0, r.stderr
        verdict, status, why = await _verify(env, task, sbx, {}, {})
        assert status is None, why
        assert verdict.reward == 0.0, "a process the agent left wrote the answer while the verifier ran"
        assert not await _beats(alive, 1.0), "the leftover was ended before the verifier ran"
    finally:
        await sbx.close()
        await la.aclose()
