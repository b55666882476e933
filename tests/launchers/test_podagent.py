"""The pod agent's verifier step, run directly (no cluster): as a non-root uid with no capabilities,
as the first process of a pid namespace of its own, the way a rollout pod runs it. A process the agent
left (``setsid``, hopping pids, rewriting the verifier's files) is ended before the verifier's files
are unpacked; the tree is checked; the verifier gets only its own environment; the pod agent cannot
be traced or written by a process of its uid; and outside a pod it refuses to end anything."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from openforge.launchers._k8s_verify import _pack
from openforge.launchers.k8s_manifests import AGENT_SOURCE

from .test_kubernetes_verify import LEFTOVER

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare"),
                                 reason="runs the pod agent as another uid: needs root, setpriv and unshare")]

NOBODY = 65534
#: A uid nothing else on this machine runs as: were the pod agent's guard broken outside a pod, its
#: kill(-1) could reach only this uid's processes.
LONELY = 64999

VERIFY = """
import json, os
print(json.dumps({"reward": float(open("out.txt").read().strip() == "42"), "env": sorted(os.environ)}))
"""


def _python(uid: int) -> str:
    """An interpreter ``uid`` can run (a pyenv one under /root is not; setpriv itself still may, hence ``sh``)."""
    for py in (os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(py) and subprocess.run([*_as(uid), "sh", "-c", f"exec '{py}' -c pass"],
                                                 capture_output=True).returncode == 0:
            return py
    pytest.skip(f"no python3 that uid {uid} can run")


def _as(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]


def _start(prefix: list[str], py: str, cwd: str, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([*prefix, py, "-I", "-c", AGENT_SOURCE, "--port", "0", "--host", "127.0.0.1"], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline() if proc.stdout else ""
    assert line.startswith("LISTENING"), f"the pod agent did not start: {line!r}"
    return proc, int(line.split()[1])


def _post(port: int, route: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/{route}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "X-Openforge-Token": "tok"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except OSError:
        pass
    proc.wait()


@pytest.fixture
def shared_dir():
    """A workdir every uid can use (pytest's tmp_path is root's alone)."""
    d = tempfile.mkdtemp(prefix="of-podagent-", dir="/tmp")
    os.chmod(d, 0o777)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def _task(root: Path) -> tuple[Path, str]:
    task = root / "task"
    task.mkdir()
    (task / "verify.py").write_text(VERIFY)
    mark = f"mark-{uuid.uuid4().hex}"
    (task / mark).write_text("")
    return task, mark


def _verify_req(py: str, task: Path, work: Path, *, digest: str | None = None, first: bool = True,
                base: str | None = None) -> dict:
    packed, real = _pack({str(task): "ro0"})
    base = base or f"/tmp/openforge-verify-{uuid.uuid4().hex}"
    return {"base": base, "digest": digest or real, "tar_b64": base64.b64encode(packed).decode() if first else None,
            "argv": [py, "-E", "-s", "-B", f"{base}/ro0/verify.py", str(work)], "cwd": str(work), "timeout_s": 30,
            "env": {"PATH": "/usr/bin:/bin", "HOME": f"{base}/home", "TMPDIR": f"{base}/home"}}


def _beats(alive: Path, within_s: float) -> bool:
    first = alive.read_text() if alive.exists() else None
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        time.sleep(0.05)
        if alive.exists() and alive.read_text() != first:
            return True
    return False


def test_a_non_root_pod_agent_ends_what_the_agent_left_then_verifies(shared_dir):
    py, (task, mark) = _python(NOBODY), _task(shared_dir)
    work = shared_dir / "work"
    work.mkdir(mode=0o777)
    os.chmod(work, 0o777)
    pod_ns = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", *_as(NOBODY)]
    proc, port = _start(pod_ns, py, str(work), {"PATH": "/usr/bin:/bin", "OPENFORGE_AGENT_TOKEN": "tok",
                                                "OPENFORGE_API_KEY": "the-rollout's-key"})
    base = None
    try:
        (work / "leftover.py").write_text(LEFTOVER)
        alive = work / "alive"
        code, r = _post(port, "exec", {"argv": ["sh", "-c", f"echo 41 > out.txt; setsid {py} leftover.py {mark} "
                                                            f"{alive} </dev/null >/dev/null 2>&1 & "
                                                            f"while [ ! -s {alive} ]; do sleep 0.05; done"],
                                       "cwd": str(work), "timeout_s": 30})
        assert code == 200 and r["returncode"] == 0, r
        assert _beats(alive, 30.0), "the leftover runs"
        req = _verify_req(py, task, work)
        base = req["base"]
        code, r = _post(port, "verify", req)
        assert code == 200 and r["returncode"] == 0, r
        verdict = json.loads(r["stdout"].splitlines()[-1])
        assert verdict["reward"] == 0.0, "the real verifier ran, on the agent's answer"
        assert r["ended"] >= 1 and not _beats(alive, 1.0), "the leftover was ended first"
        assert "OPENFORGE_API_KEY" not in verdict["env"] and "OPENFORGE_AGENT_TOKEN" not in verdict["env"], \
            "the verifier's environment is what the driver gave, nothing of the pod's"
        st = os.stat(base)
        assert st.st_uid == NOBODY and st.st_mode & 0o777 == 0o711, "a new directory of the pod agent's own"
        # a second command of the same verifier: checked again, and refused when the tree is not the one sent
        assert _post(port, "verify", _verify_req(py, task, work, first=False, base=base))[0] == 200
        code, r = _post(port, "verify", _verify_req(py, task, work, first=False, base=base, digest="0" * 64))
        assert code == 409 and "not the ones sent" in r["error"], r
    finally:
        _stop(proc)
        if base:
            shutil.rmtree(base, ignore_errors=True)


def test_a_process_of_the_same_uid_cannot_trace_or_write_the_pod_agent(shared_dir):
    py = _python(NOBODY)
    pod_ns = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", *_as(NOBODY)]
    proc, port = _start(pod_ns, py, str(shared_dir), {"PATH": "/usr/bin:/bin", "OPENFORGE_AGENT_TOKEN": "tok"})
    try:
        probe = ("import sys\ntry:\n    open('/proc/1/mem', 'r+b')\nexcept PermissionError:\n    sys.exit(7)\n"
                 "print(open('/proc/1/cmdline', 'rb').read()[:40])")
        code, r = _post(port, "exec", {"argv": [py, "-c", probe], "cwd": str(shared_dir)})
        assert code == 200 and r["returncode"] == 7, f"the agent could open the pod agent's memory: {r}"
    finally:
        _stop(proc)


def test_outside_a_pod_the_verifier_step_ends_nothing(shared_dir):
    """Run by hand (not PID 1 of a pod), the pod agent refuses the step: kill(-1) would reach every
    process of its uid on the machine."""
    py, (task, _) = _python(LONELY), _task(shared_dir)
    sleeper = subprocess.Popen([*_as(LONELY), "sleep", "60"], start_new_session=True)
    proc, port = _start(_as(LONELY), py, str(shared_dir), {"PATH": "/usr/bin:/bin", "OPENFORGE_AGENT_TOKEN": "tok"})
    try:
        code, r = _post(port, "verify", _verify_req(py, task, shared_dir))
        time.sleep(0.2)
        assert sleeper.poll() is None, "a process of the same uid outside the pod was left alone"
        assert code == 409 and "not its pod's first process" in r["error"], r
    finally:
        _stop(proc)
        _stop(sleeper)


#: Counts the zombies in the pod's pid namespace (state Z in /proc/PID/stat).
COUNT_ZOMBIES = ("import os\nn = 0\nfor p in os.listdir('/proc'):\n    try:\n"
                 "        n += p.isdigit() and open('/proc/%s/stat' % p).read().rsplit(')', 1)[1].split()[0] == 'Z'\n"
                 "    except OSError:\n        pass\nprint(n)")


def test_the_pod_agent_reaps_the_orphans_the_agent_leaves(shared_dir):
    """Orphans of the agent (a double fork) are re-parented to the pod's PID 1 and stay zombies, each
    holding a pid of the pod's limit, until it waits for them: the pod agent reaps them, and still reports
    the exit status of its own commands, one that exits at once included."""
    py = _python(NOBODY)
    pod_ns = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", *_as(NOBODY)]
    proc, port = _start(pod_ns, py, str(shared_dir), {"PATH": "/usr/bin:/bin", "OPENFORGE_AGENT_TOKEN": "tok"})
    try:
        code, r = _post(port, "exec", {"argv": ["sh", "-c", "for i in $(seq 30); do (setsid sleep 0.2 &); done; sleep 0.5"],
                                       "cwd": str(shared_dir), "timeout_s": 30})
        assert code == 200 and r["returncode"] == 0, r
        deadline, left = time.monotonic() + 10, None
        while time.monotonic() < deadline:
            left = int(_post(port, "exec", {"argv": [py, "-c", COUNT_ZOMBIES], "cwd": str(shared_dir)})[1]["stdout"])
            if left == 0:
                break
            time.sleep(0.3)
        assert left == 0, f"{left} zombies of the agent's orphans were never reaped"
        statuses = [_post(port, "exec", {"argv": ["sh", "-c", f"exit {c}"], "cwd": str(shared_dir)})[1]["returncode"]
                    for c in (3, 0, 5) * 5]
        assert statuses == [3, 0, 5] * 5, "the reaper took a command's own exit status"
    finally:
        _stop(proc)
