"""The example task directories (examples/tasks: services, multi-line solution.sh, verify.py printing
subscores, a setup.sh that reads stdin, SQLite, git): every reference solution scores 1.0 and doing
nothing scores 0 — in real sandboxes, and end to end through ``forge rollout --reference`` and
``forge eval --backend reference`` (real proxy, react harness, scripted replay)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openforge.envs.taskdir import TaskDirEnvironment
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tasks"


@pytest.fixture(scope="module")
def env():
    return TaskDirEnvironment(EXAMPLES)


def test_the_examples_cover_the_format(env):
    tasks = env.tasks()
    assert len(tasks) >= 6
    from openforge.envs.taskdir_format import taskdir_extras

    assert sum(bool(taskdir_extras(t)[0]) for t in tasks) >= 2, "services"
    assert any(taskdir_extras(t)[1] for t in tasks), "an exit_code_reward verifier"
    assert any(taskdir_extras(t)[2] for t in tasks), "subgoals linked to sub-scores"
    assert all(len(env.reference_solution(t)) == 1 for t in tasks), "each solution.sh is one script"
    assert {"mail", "issues", "shell", "sqlite", "git", "files"} <= {t.category for t in tasks}


async def _run(env, task, launcher, script):
    sbx = await launcher.start(SandboxSpec(rollout_id=f"ex-{task.id}", task=task, proxy_url="", api_key="k",
                                           hidden_paths=env.hidden_paths(task)))
    try:
        await env.setup(task, sbx)
        if script is not None:
            r = await sbx.exec(["bash", "-c", script], env=env.harness_env(task, sbx), timeout_s=60)
            assert r.returncode == 0, f"{task.id}: {r.stderr or r.stdout}"
        return await env.verify(task, sbx)
    finally:
        await env.teardown(task, sbx)
        await sbx.close()


async def test_reference_scores_one_and_doing_nothing_zero(env, tmp_path):
    launcher = LocalLauncher(base_dir=tmp_path / "sbx")
    env.log_dir = tmp_path / "logs"
    try:
        for task in env.tasks():
            good = await _run(env, task, launcher, env.reference_solution(task)[0])
            bad = await _run(env, task, launcher, None)
            assert (good.reward, bad.reward) == (1.0, 0.0), (task.id, good, bad)
    finally:
        await launcher.aclose()


def _forge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "openforge.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=500)


def test_forge_rollout_reference_with_a_service(tmp_path):
    out = tmp_path / "out"
    p = _forge("rollout", "--env", str(EXAMPLES), "--task", "mail-reply", "--reference", "-o", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    traj = json.loads((out / "trajectory.json").read_text())
    assert traj["status"] == "success" and traj["reward"] == 1.0
    assert traj["rewards"]["subgoal:Reply to Alice's message"] == 1.0 and traj["metadata"]["verify_metadata"] == {"sent": 1}
    tool_calls = [tc for c in traj["calls"] for tc in c["response"].get("tool_calls") or []]
    assert len(tool_calls) == 1 and len(traj["calls"]) == 2, "solution.sh is one shell-tool call, then the answer"
    [log] = (out / "services").glob("*-mail.log")
    assert "POST /send" in log.read_text()


def test_forge_eval_reference_all_pass(tmp_path):
    p = _forge("eval", "--env", str(EXAMPLES), "--backend", "reference", "-H", "react", "--split", "all", "-k", "1",
               "-j", "3", "--json", "-o", str(tmp_path / "eval"), cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == len(TaskDirEnvironment(EXAMPLES).tasks())
    assert {(r["task_id"], r["status"], r["reward"]) for r in rows} == {(r["task_id"], "success", 1.0) for r in rows}
    summary = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert summary["behaviour"]["subgoal_completion"] == 1.0, "linked subgoals fill the eval column"
    assert list((tmp_path / "eval" / "services").glob("*.log")), "service logs go to the eval's directory"
