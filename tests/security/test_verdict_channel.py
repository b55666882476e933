"""The verdict channel, attacked by the agent's own code: a verifier that runs what the agent wrote
(imports its module, runs its script) shares a uid with it. The agent's code prints a result line
into the verifier's output and kills the verifier, or writes the verdict file, through an inherited
descriptor, ``/proc/PID/fd``, the path itself, or a process left behind. None of it may reward it.

The rollouts are real: ``run_rollout`` with the shipped ``git-bugfix`` task, or task directories
whose verifier runs the agent's code through ``$OPENFORGE_UNTRUSTED``, in the local bwrap sandbox."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from openforge.core.types import RolloutStatus as S
from openforge.envs.taskdir import TaskDirEnvironment
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.runner.rollout import run_rollout

from ._drivers import driver_base, run_driver
from ._verdict_scenario import AGENT, FORGE

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"

pytestmark = pytest.mark.timeout(300)



class Shell(Harness):
    """The agent: one shell script in its sandbox, then it ends normally."""

    name = "shell"

    def __init__(self, command: str):
        self.command = command

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        res = await ctx.exec(["bash", "-c", self.command])
        return HarnessResult.from_exec(res, harness=self.name)


async def _rollout(rig, env: TaskDirEnvironment, task_id: str, command: str):
    proxy, launcher, store = await rig({"turns": [{"text": "ok"}]})
    if launcher.isolation != "bwrap":  # pragma: no cover - auto refuses without bwrap
        pytest.skip("needs the bwrap sandbox")
    return await run_rollout(harness=Shell(command), environment=env, task=env.task(task_id), launcher=launcher,
                             proxy=proxy, store=store)


def _no_reward(traj) -> None:
    assert traj.reward in (None, 0.0) or traj.reward < 1.0, (traj.status, traj.reward, traj.metadata.get("verify_detail"))
    assert "forged" not in json.dumps(traj.metadata, default=str), traj.metadata.get("verify_detail")


async def test_git_bugfix_agent_module_that_forges_the_line_and_kills_its_verifier(rig, tmp_path):
    """The shipped task: the agent's stats.py, imported by the verifier, prints the result line into the
    verifier's stdout and kills it (exit 137). It is the agent's failure, scored 0 and trained."""
    env = TaskDirEnvironment(EXAMPLES / "git-bugfix", log_dir=tmp_path / "logs")
    traj = await _rollout(rig, env, "git-bugfix", AGENT)
    _no_reward(traj)
    assert traj.status == S.POLICY_FAILURE and traj.reward == 0.0, (traj.status, traj.error)


def test_git_bugfix_forge_under_a_normal_user_driver():
    """A normal user's sandboxes share its uid with the pipes the driver reads: there the agent's code
    can open the verifier's stdout through /proc and write the line itself. It still scores 0."""
    with driver_base("verdict", as_user=True) as base:
        rep = run_driver("_verdict_scenario.py", ["--work", str(base)], as_user=True)
    assert rep["isolation"] == "bwrap" and rep["agent_rc"] == 0, rep
    assert rep["reward"] == 0.0, rep
    assert rep["solution"]["reward"] == 1.0, rep["solution"]


def _task(root: Path, name: str, verify_sh: str, *, setup: dict[str, str]) -> Path:
    d = root / name
    (d / "setup").mkdir(parents=True)
    (d / "task.toml").write_text('split = "train"\ncategory = "code"\ntimeout_s = 60\nverify_timeout_s = 60\n')
    (d / "instruction.md").write_text("write solve.py\n")
    (d / "verify.sh").write_text(textwrap.dedent(verify_sh))
    for rel, text in setup.items():
        (d / "setup" / rel).write_text(text)
    for p in [root, *d.rglob("*"), d]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return d


#: A verifier that opens its verdict file first (fd 3, its verdict already in it), runs the agent's
#: solve.py through the helper (telling it the verdict's path, as a careless verifier might), then
#: waits and exits 0: the verdict must still be its own.
HOLDS_THE_VERDICT = """\
    set -u
    python3 "$OPENFORGE_UNTRUSTED" --check || exit 2
    exec 3>"$OPENFORGE_VERDICT"
    printf '{"reward": 0.0, "detail": "verifier"}\\n' >&3
    FORGE_PATHS="$OPENFORGE_VERDICT:/proc/$$/fd/3" python3 "$OPENFORGE_UNTRUSTED" --timeout 20 -- python3 solve.py
    echo "solve.py exited $?"
    sleep 2
    echo "verifier done"
"""


async def test_agent_code_cannot_write_the_verdict_the_verifier_holds(rig, tmp_path):
    env = TaskDirEnvironment(_task(tmp_path / "tasks", "holds", HOLDS_THE_VERDICT, setup={"solve.py": FORGE}),
                             log_dir=tmp_path / "logs")
    traj = await _rollout(rig, env, "holds", "true")
    _no_reward(traj)
    assert traj.status == S.POLICY_FAILURE and traj.reward == 0.0, (traj.status, traj.error)
    assert traj.metadata["verify_detail"] == "verifier", traj.metadata  # not killed, its verdict intact


#: A verifier that writes its verdict after the agent's code ran and lets its descendants be: a
#: process the agent's code left behind must not be able to overwrite it.
WRITES_AFTER = """\
    set -u
    python3 "$OPENFORGE_UNTRUSTED" --check || exit 2
    FORGE_KILL=0 FORGE_PATHS="$OPENFORGE_VERDICT" python3 "$OPENFORGE_UNTRUSTED" -- python3 solve.py
    printf '{"reward": 0.0, "detail": "verifier"}\\n' > "$OPENFORGE_VERDICT"
    sleep 3
"""


async def test_a_process_the_agent_code_left_cannot_overwrite_the_verdict(rig, tmp_path):
    env = TaskDirEnvironment(_task(tmp_path / "tasks", "after", WRITES_AFTER, setup={"solve.py": FORGE}),
                             log_dir=tmp_path / "logs")
    traj = await _rollout(rig, env, "after", "true")
    _no_reward(traj)
    assert traj.status == S.POLICY_FAILURE and traj.metadata["verify_detail"] == "verifier", (traj.status, traj.error)


@pytest.mark.parametrize("agent, reward", [("solution", 1.0), ("forge", 0.0)])
async def test_git_bugfix_on_the_host(tmp_path, agent, reward):
    """``verify_on_host = true``: the helper runs the agent's code on the host (as nobody under a root
    driver); the reference solution still scores 1.0 and the forging module 0. (The forging module
    does not kill here: on the host, run unisolated, its ``kill(-1)`` would reach the driver's uid.)"""
    from openforge.launchers.base import SandboxSpec
    from openforge.launchers.local import LocalLauncher

    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "git-bugfix", tasks / "git-bugfix")
    toml = tasks / "git-bugfix" / "task.toml"
    toml.write_text(toml.read_text() + "verify_on_host = true\n")
    env = TaskDirEnvironment(tasks, log_dir=tmp_path / "logs")
    task = env.task("git-bugfix")
    la = LocalLauncher(base_dir=tmp_path / "sbx")
    sbx = await la.start(SandboxSpec(rollout_id="host", task=task, proxy_url="", api_key="k",
                                     hidden_paths=env.hidden_paths(task)))
    try:
        await env.setup(task, sbx)
        script = env.reference_solution(task)[0] if agent == "solution" else \
            AGENT.replace('os.environ.get("FORGE_KILL", "1")', '"0"')
        assert (await sbx.exec(["bash", "-c", script], timeout_s=60)).returncode == 0
        res = await env.verify(task, sbx)
        assert res.reward == reward and "forged" not in res.model_dump_json(), res
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
        await la.aclose()
