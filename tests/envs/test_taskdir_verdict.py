"""A task verifier's verdict: which one counts (a result line only with exit 0 and no traceback; the
``$OPENFORGE_VERDICT`` file before stdout), and whose failure a bad workdir is (exit 3 or
``AgentOutputError``: the agent's, ``policy_failure``; a crash: the verifier's, ``env_error``).
Attacks by the agent's code on the channel: tests/security/test_verdict_channel.py."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from openforge.core.errors import AgentOutputError, EnvironmentError_
from openforge.core.task import Task
from openforge.core.types import RolloutStatus as S
from openforge.environment import Environment, VerifyResult
from openforge.envs.taskdir import TaskDirEnvironment, parse_result
from openforge.envs.verifier_sandbox import UNTRUSTED_HELPER
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.launchers.local import LocalLauncher
from openforge.runner.rollout import run_rollout

from .test_taskdir import _run, make_task

LINE = '{"reward": 1.0}'
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def launcher(tmp_path):
    la = LocalLauncher(base_dir=tmp_path / "sbx")
    yield la
    await la.aclose()


# -- which verdict counts ------------------------------------------------------------------------

@pytest.mark.parametrize("rc", [137, -9, 2, 126, 127, None])
def test_a_result_line_with_a_failed_exit_is_no_verdict(rc):
    """Whoever printed it (the agent's code that then killed the verifier), a result line from a
    verifier that did not exit 0 is not a reward."""
    with pytest.raises(EnvironmentError_, match="counts only with exit 0"):
        parse_result("t", f"log\n{LINE}\n", "", rc)
    with pytest.raises(EnvironmentError_, match="counts only with exit 0"):
        parse_result("t", f"log\n{LINE}\n", "", rc, exit_code_reward=True)


def test_a_result_line_with_a_traceback_is_no_verdict():
    with pytest.raises(EnvironmentError_, match="traceback"):
        parse_result("t", LINE, "Traceback (most recent call last):\n  ...\nKeyError: 'x'\n", 0)
    with pytest.raises(EnvironmentError_, match="traceback"):  # nor is exit 0 a 1.0 under exit_code_reward
        parse_result("t", "", "Traceback (most recent call last):\nKeyError: 'x'\n", 0, exit_code_reward=True)


def test_exit_1_under_exit_code_reward_is_0_whatever_was_printed():
    assert parse_result("t", LINE, "", 1, exit_code_reward=True).reward == 0.0
    with pytest.raises(EnvironmentError_, match="crashed"):  # ...but a Python verifier that crashed is no 0
        parse_result("t", "", "Traceback (most recent call last):\nKeyError: 'x'\n", 1, exit_code_reward=True)


def test_the_verdict_file_wins_over_stdout_and_ignores_stderr():
    res = parse_result("t", f"{LINE}\n", "Traceback (most recent call last): (the agent's code)", 0,
                       verdict='{"reward": 0.25, "subscores": {"a": 0.5}}\n')
    assert (res.reward, res.rewards) == (0.25, {"a": 0.5})
    with pytest.raises(EnvironmentError_, match="counts only with exit 0"):
        parse_result("t", "", "", 137, verdict='{"reward": 1.0}')
    with pytest.raises(EnvironmentError_, match=r"invalid verdict to \$OPENFORGE_VERDICT"):
        parse_result("t", "", "", 0, verdict="[1]")


async def test_a_verifier_that_prints_the_line_and_is_killed_scores_nothing(tmp_path, launcher):
    d = make_task(tmp_path / "tasks", "killed", verify_py=f"""
        import os, signal
        print({LINE!r}, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = TaskDirEnvironment(d)
    with pytest.raises(EnvironmentError_, match="exit 137"):
        await _run(env, env.tasks()[0], launcher, [])


async def test_the_verdict_file_through_a_sandbox(tmp_path, launcher):
    d = make_task(tmp_path / "tasks", "vfile", verify_sh=(
        'test -w "$(dirname "$OPENFORGE_VERDICT")" || exit 2\n'
        'echo \'{"reward": 0.5, "detail": "from the file"}\' > "$OPENFORGE_VERDICT"\n'
        f"echo '{LINE}'\n"))
    env = TaskDirEnvironment(d)
    res = await _run(env, env.tasks()[0], launcher, [])
    assert (res.reward, res.detail) == (0.5, "from the file")


# -- the helper, as a verifier calls it ----------------------------------------------------------

def _helper(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(UNTRUSTED_HELPER), *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.fixture
def shared_dir():
    """A directory every user can reach (a root verifier's helper runs the agent's code as nobody;
    pytest's tmp dirs are the driver's only)."""
    d = REPO / ".pytest-security" / f"helper-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    d.parent.chmod(0o755)
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _any_user_python() -> str:
    """A Python any user may run (the venv's may live under /root)."""
    for cand in (f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}", "/usr/bin/python3",
                 "/usr/local/bin/python3"):
        if os.access(cand, os.X_OK):
            return cand
    pytest.skip("no system Python any user may run")


def test_helper_hides_the_verdict_and_task_dirs_and_closes_descriptors(shared_dir):
    vdir, tdir = shared_dir / "verdict", shared_dir / "task"
    vdir.mkdir(mode=0o755)
    tdir.mkdir(mode=0o755)
    (tdir / "answer.txt").write_text("secret")
    (tdir / "answer.txt").chmod(0o644)
    probe = textwrap.dedent(f"""
        import json, os
        print(json.dumps({{"task": os.listdir({str(tdir)!r}), "verdict": os.listdir({str(vdir)!r}),
                          "env": "OPENFORGE_VERDICT" in os.environ, "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
                          "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}}))
    """)
    if _helper("--check").returncode != 0:
        pytest.skip("no namespaces for the helper here")
    read, write = os.pipe()
    try:
        r = subprocess.run([sys.executable, str(UNTRUSTED_HELPER), "--", _any_user_python(), "-I", "-c", probe],
                           capture_output=True, text=True, timeout=60, pass_fds=(write,),
                           env={**os.environ, "OPENFORGE_VERDICT": str(vdir / "verdict.json"),
                                "OPENFORGE_TASK_DIR": str(tdir)})
    finally:
        os.close(read)
        os.close(write)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["task"] == [] and seen["verdict"] == [] and not seen["env"], seen
    assert write not in seen["fds"] and max(seen["fds"]) <= 3, seen  # 0-2, and the listing's own
    assert len(seen["pids"]) <= 2, f"the agent's code sees processes beside its own: {seen['pids']}"


@pytest.mark.skipif(os.geteuid() != 0, reason="a root verifier's helper drops to nobody; a normal user's keeps its uid")
def test_a_root_verifiers_helper_runs_the_agent_code_as_nobody(shared_dir):
    """Under a root verifier (a pod, ``verify_on_host`` under a root driver) the agent's code runs as
    ``nobody`` with no supplementary groups: it cannot write what the verifier (root) owns beside it."""
    if _helper("--check").returncode != 0:
        pytest.skip("no namespaces for the helper here")
    owned = shared_dir / "verifier-owned.txt"
    owned.write_text("the verifier's\n")
    owned.chmod(0o644)
    probe = textwrap.dedent(f"""
        import json, os
        try:
            open({str(owned)!r}, "a").write("agent")
            wrote = True
        except OSError:
            wrote = False
        print(json.dumps({{"ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],
                           "groups": os.getgroups(), "wrote": wrote}}))
    """)
    r = subprocess.run([sys.executable, str(UNTRUSTED_HELPER), "--", _any_user_python(), "-I", "-c", probe],
                       capture_output=True, text=True, timeout=60, cwd=shared_dir)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["ids"] == [65534] * 4 and seen["groups"] == [], seen
    assert not seen["wrote"] and owned.read_text() == "the verifier's\n", seen


def test_helper_exit_status_and_timeout():
    assert _helper("--", "sh", "-c", "exit 7").returncode == 7
    assert _helper("--", "sh", "-c", "kill -TERM $$; sleep 1").returncode in (0, 143)  # pid 1 may ignore it
    assert _helper("--timeout", "0.5", "--", "sleep", "10").returncode == 124
    bad = _helper("--bogus")
    assert bad.returncode == 2 and "unknown option" in bad.stderr


# -- the agent's output is bad: the agent's failure ------------------------------------------------

TASK_FILES = {"answer.json": '{"count": "many"}\n'}

AGENT_FAULT_PY = """
    import json, sys
    answer = json.load(open("answer.json"))
    if not isinstance(answer.get("count"), int):
        print(f"answer.json: count is {type(answer.get('count')).__name__}, not an integer", file=sys.stderr)
        sys.exit(3)
    print(json.dumps({"reward": float(answer["count"] == 3)}))
"""

CRASHING_PY = """
    import json
    answer = json.load(open("answer.json"))
    print(json.dumps({"reward": float(answer["count"] + 0 == 3)}))
"""


class Shell(Harness):
    name = "shell"

    def __init__(self, command: str):
        self.command = command

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        return HarnessResult.from_exec(await ctx.exec(["bash", "-c", self.command]), harness=self.name)


async def _rollout(rig, env: Environment, task: Task, command: str):
    proxy, launcher_, store = await rig({"turns": [{"text": "ok"}]})
    return await run_rollout(harness=Shell(command), environment=env, task=task, launcher=launcher_, proxy=proxy,
                             store=store)


AGENT = """printf '{"count": "many"}' > answer.json"""


async def test_verifier_exit_3_blames_the_agent(rig, tmp_path):
    env = TaskDirEnvironment(make_task(tmp_path / "tasks", "typed", verify_py=AGENT_FAULT_PY))
    traj = await _rollout(rig, env, env.tasks()[0], AGENT)
    assert traj.status == S.POLICY_FAILURE and traj.reward == 0.0 and traj.trainable, (traj.status, traj.error)
    assert "count is str" in traj.metadata["verify_agent_fault"], traj.metadata


async def test_a_verifier_that_crashes_on_the_same_answer_stays_its_own_failure(rig, tmp_path):
    """No silent blame: a verifier's own unhandled exception is never the agent's failure."""
    env = TaskDirEnvironment(make_task(tmp_path / "tasks", "crashes", verify_py=CRASHING_PY))
    traj = await _rollout(rig, env, env.tasks()[0], AGENT)
    assert traj.status == S.ENV_ERROR and not traj.trainable, (traj.status, traj.error)


class Typed(Environment):
    """A Python verifier that says the agent's answer is unusable."""

    name = "typed"
    TASK = Task(id="typed", instruction="write answer.json", environment="typed", timeout_s=30)

    def tasks(self, split=None):
        return [self.TASK]

    async def verify(self, task, sandbox):
        answer = json.loads(await sandbox.read_file("answer.json"))
        if not isinstance(answer.get("count"), int):
            raise AgentOutputError(f"answer.json: count is {answer.get('count')!r}, not an integer")
        return VerifyResult(reward=float(answer["count"] == 3))


async def test_agent_output_error_from_a_python_verifier_is_a_policy_failure(rig):
    traj = await _rollout(rig, Typed(), Typed.TASK, AGENT)
    assert traj.status == S.POLICY_FAILURE and traj.reward == 0.0 and traj.trainable, (traj.status, traj.error)
    assert "not an integer" in traj.metadata["verify_agent_fault"]


def test_helper_refuses_a_cwd_inside_a_hidden_path(shared_dir):
    """Run from inside the task directory, the code would still see it through its cwd: refused, nothing run."""
    tdir = shared_dir / "task"
    (tdir / "sub").mkdir(parents=True)
    marker = shared_dir / "ran"
    r = subprocess.run([sys.executable, str(UNTRUSTED_HELPER), "--", "sh", "-c", f"touch {marker}"], cwd=tdir / "sub",
                       capture_output=True, text=True, timeout=60, env={**os.environ, "OPENFORGE_TASK_DIR": str(tdir)})
    if _helper("--check").returncode != 0:
        pytest.skip("no namespaces for the helper here")
    assert r.returncode == 125 and "inside a hidden path" in r.stderr, (r.returncode, r.stderr)
    assert not marker.exists()


@pytest.mark.parametrize("make, what", [
    ('mkfifo "$OPENFORGE_VERDICT"', "not a regular file"),
    ('ln -s /etc/passwd "$OPENFORGE_VERDICT"', "cannot read its verdict file"),
])
async def test_a_verdict_file_that_is_no_file_is_an_error_not_a_hang(tmp_path, launcher, make, what):
    """What a verifier (or code it ran without the helper) left at $OPENFORGE_VERDICT is read without
    following a link or blocking on a FIFO."""
    d = make_task(tmp_path / "tasks", "odd", verify_sh=f"{make}\necho '{LINE}'\n")
    env = TaskDirEnvironment(d)
    with pytest.raises(EnvironmentError_, match=what):
        await asyncio.wait_for(_run(env, env.tasks()[0], launcher, []), 60)


# -- a workdir too large to copy for a host verifier: the agent's failure ----------------------------

async def test_a_workdir_too_large_for_the_host_verifiers_copy_is_the_agents_failure(tmp_path, launcher,
                                                                                      monkeypatch):
    """An agent may fill its workdir up to its disk budget; a workdir a ``verify_on_host`` copy cannot
    take (``VERIFY_COPY_MAX_BYTES``) is what the agent left, so it is ``AgentOutputError``
    (``policy_failure``), not ``env_error``: otherwise filling the disk would take a failing rollout out of
    training."""
    from openforge.envs import verifier_sandbox
    from openforge.launchers._verifier import WorkdirTooLarge

    monkeypatch.setattr(verifier_sandbox, "VERIFY_COPY_MAX_BYTES", 1 << 20)
    d = make_task(tmp_path / "tasks", "big", verify_py="print('{\"reward\": 1.0}')\n",
                  toml='split = "train"\nverify_on_host = true\n')
    env = TaskDirEnvironment(d)
    task = env.tasks()[0]
    with pytest.raises(WorkdirTooLarge) as e:
        await _run(env, task, launcher, ["head -c 3000000 /dev/zero > big.bin"])
    assert isinstance(e.value, AgentOutputError)
