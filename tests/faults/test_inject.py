"""Each fault kind, met by a scripted agent in a real rollout (real proxy, real react harness
process, real local sandbox, the claw environment or a task directory), is observable in the tool
result the agent got back, and is recorded on the trajectory with whether it was met and recovered."""

from __future__ import annotations

import pytest

from openforge.core.types import RolloutStatus as S
from openforge.plugins import make_environment
from openforge.readings.recovery import summarize_faults
from openforge.readings.steps import extract_steps
from openforge.runner.rollout import run_rollout

pytest.importorskip("openai")
FINISH = {"tool": {"name": "finish", "arguments": {"answer": "done"}}}


def react():
    from openforge.harnesses.react import ReactHarness

    return ReactHarness(max_turns=6)


async def _roll(rig, env, task_id, turns):
    proxy, launcher, store = await rig({"turns": [*turns, FINISH]})
    traj = await run_rollout(harness=react(), environment=env, task=env.task(task_id), launcher=launcher,
                             proxy=proxy, store=store)
    return traj, extract_steps(traj.calls)


def _only(traj):
    f = traj.metadata["faults"]
    assert f["faulty"] is True and len(f["injected"]) == 1 and len(f["outcomes"]) == 1, f
    return f["injected"][0], f["outcomes"][0]


CODE = "curl -s -o /dev/null -w '%{http_code}\\n' $CLAW_API/issues"
CLOSE = "curl -sf -X PATCH $CLAW_API/issues/2 -H 'content-type: application/json' -d '{\"state\":\"closed\"}'"


async def test_service_unavailable_first_calls(rig):
    env = make_environment("claw", faults=[{"kind": "service_unavailable", "calls": 2}])
    traj, steps = await _roll(rig, env, "issues-close", [{"shell": CODE}, {"shell": CLOSE}, {"shell": CLOSE}])
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    assert "503" in steps[0].result and steps[0].error is False  # the agent saw the 503
    assert steps[1].error and not steps[2].error  # curl -f failed on the 2nd call, the 3rd got through
    inj, out = _only(traj)
    assert inj["kind"] == "service_unavailable" and inj["target"] == "CLAW_API" and inj["fired"] == 2
    assert out["met"] and out["met_step"] == 0 and out["recovered"]
    assert out["steps_to_recover"] == 2 and out["repeats"] == 0  # step 1 had a different signature


async def test_service_timeout_is_held_then_504(rig):
    env = make_environment("claw", faults=[{"kind": "service_timeout", "calls": 1, "delay_s": 1.5}])
    traj, steps = await _roll(rig, env, "issues-close", [{"shell": f"time {CODE}"}, {"shell": CLOSE}])
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    assert "504" in steps[0].result and "real\t0m1." in steps[0].result, steps[0].result
    _, out = _only(traj)
    assert out["met"] and out["recovered"]


async def test_permission_denied_file(rig):
    env = make_environment("claw", faults=[{"kind": "permission_denied", "path": "data.txt"}])
    fix = "chmod u+rw data.txt && wc -l < data.txt | tr -d ' ' > count.txt"
    traj, steps = await _roll(rig, env, "files-count-lines", [{"shell": "wc -l < data.txt"}, {"shell": fix}])
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    assert "Permission denied" in steps[0].result and steps[0].error
    inj, out = _only(traj)
    assert inj["target"] == "data.txt" and inj["params"] == {"mode": "000", "original_mode": "644"}
    assert out["met"] and out["met_step"] == 0 and out["recovered"] and out["steps_to_recover"] == 1


async def test_permission_denied_default_target_is_a_file_the_solution_names(rig):
    env = make_environment("claw", faults=[{"kind": "permission_denied"}])
    traj, _steps = await _roll(rig, env, "files-count-lines", [{"shell": "cat data.txt"}, {"shell": "cat data.txt"}])
    assert traj.status == S.POLICY_FAILURE
    inj, out = _only(traj)
    assert inj["target"] == "data.txt" and out["met"] and not out["recovered"]
    assert out["repeats"] == 1  # the agent repeated the failing action, which failed again


async def test_locked_file_stale_git_lock(rig):
    env = make_environment("claw", faults=[{"kind": "locked_file"}])
    solve = "cd repo && echo 'Usage: run it' >> README.md && git commit -qam 'update readme'"
    traj, steps = await _roll(rig, env, "git-commit-change",
                              [{"shell": solve}, {"shell": "rm -f repo/.git/index.lock && cd repo && git commit -qam 'update readme'"}])
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    assert "index.lock" in steps[0].result and steps[0].error, steps[0].result
    inj, out = _only(traj)
    assert inj["target"] == "repo/.git/index.lock" and out["met"] and out["recovered"]


async def test_flaky_command_fails_once(rig):
    env = make_environment("claw", faults=[{"kind": "flaky_command"}])  # sqlite3: the program the solution runs
    cmd = "sqlite3 app.db 'SELECT COUNT(*) FROM users WHERE active=1' > answer.txt"
    traj, steps = await _roll(rig, env, "sqlite-count-active", [{"shell": cmd}, {"shell": cmd}])
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    assert "temporarily unavailable" in steps[0].result and steps[0].error and not steps[1].error
    inj, out = _only(traj)
    assert inj["target"] == "sqlite3" and inj["fired"] == 1
    assert out["met"] and out["met_step"] == 0 and out["recovered"] and out["steps_to_recover"] == 1
    assert out["repeats"] == 0  # the retry succeeded: not a repeated failure


async def test_missing_tool_worked_around(rig):
    env = make_environment("claw", faults=[{"kind": "missing_tool", "command": "sqlite3"}])
    cmd = "sqlite3 app.db 'SELECT COUNT(*) FROM users WHERE active=1' > answer.txt"
    py = ("python3 -c \"import sqlite3; print(sqlite3.connect('app.db').execute("
          "'SELECT COUNT(*) FROM users WHERE active=1').fetchone()[0])\" > answer.txt")
    traj, steps = await _roll(rig, env, "sqlite-count-active", [{"shell": cmd}, {"shell": cmd}, {"shell": py}])
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    assert "sqlite3: not found" in steps[0].result and "exit code 127" in steps[0].result
    assert steps[1].error and not steps[2].error
    _, out = _only(traj)
    assert out["met"] and out["recovered"] and out["steps_to_recover"] == 2 and out["repeats"] == 1


def _taskdir(root):
    d = root / "t"
    (d / "setup").mkdir(parents=True)
    (d / "setup" / "data.csv").write_text("name,amount\na,1\nb,2\n")
    (d / "instruction.md").write_text("Write the sum of the amount column of data.csv to total.txt.")
    (d / "task.toml").write_text('category = "data"\nexit_code_reward = true\n[[faults]]\nkind = "corrupt_state"\npath = "data.csv"\n')
    (d / "verify.sh").write_text('test "$(cat "$1/total.txt")" = 3\n')
    return root


async def test_corrupt_state_declared_in_task_toml(rig, tmp_path):
    env = make_environment(str(_taskdir(tmp_path / "tasks")))  # [[faults]] alone turns injection on
    fix = "grep -a '^[a-z]*,[0-9]*$' data.csv | awk -F, '{s+=$2} END {print s}' > total.txt"
    traj, steps = await _roll(rig, env, "t", [{"shell": "cat data.csv"}, {"shell": fix}])
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    assert "corrupted record" in steps[0].result
    inj, out = _only(traj)
    assert inj["kind"] == "corrupt_state" and inj["target"] == "data.csv" and out["met"] and out["recovered"]


async def test_recovery_metrics_on_real_trajectories(rig):
    env = make_environment("claw", faults=[{"kind": "flaky_command", "command": "sqlite3", "fails": 3}])
    cmd = "sqlite3 app.db 'SELECT COUNT(*) FROM users WHERE active=1' > answer.txt"
    good, _ = await _roll(rig, env, "sqlite-count-active", [{"shell": cmd}] * 4)
    bad, _ = await _roll(rig, env, "sqlite-count-active", [{"shell": cmd}] * 2)
    clean_env = make_environment("claw", faults={"fraction": 0.0})
    clean, _ = await _roll(rig, clean_env, "sqlite-count-active", [{"shell": cmd}])
    assert (good.status, bad.status, clean.status) == (S.SUCCESS, S.POLICY_FAILURE, S.SUCCESS)
    assert clean.metadata["faults"] == {"faulty": False, "seed": clean.metadata["faults"]["seed"], "injected": [],
                                        "outcomes": [], "met": 0, "recovered": 0}
    fs = summarize_faults([good, bad, clean])
    assert (fs.faulty_rollouts, fs.clean_rollouts, fs.faults_injected) == (2, 1, 2)
    assert fs.fault_met_rate == 1.0 and fs.fault_recovery_rate == 0.5
    assert fs.steps_to_recover == 3.0  # good: failed 3 times, the 4th call worked
    assert fs.fault_repeat_rate == 1.0  # both repeated the failing command and it failed again
    assert fs.pass_rate_with_faults == 0.5 and fs.pass_rate_without_faults == 1.0
    assert fs.by_kind["flaky_command"] == {"injected": 2, "met": 2, "recovered": 1, "recovery_rate": 0.5}


async def test_service_fault_in_front_of_a_task_dir_service(rig):
    from pathlib import Path

    env = make_environment(str(Path(__file__).resolve().parents[2] / "examples" / "tasks"),
                           faults=[{"kind": "service_unavailable", "calls": 1}])
    task = env.task("mail-reply")
    probe = "curl -s -o /dev/null -w '%{http_code}\\n' $MAIL_URL/messages"
    traj, steps = await _roll(rig, env, "mail-reply", [{"shell": probe}, {"shell": env.reference_solution(task)[0]}])
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    assert "503" in steps[0].result  # the [[services]] service, reached through the fault forwarder
    inj, out = _only(traj)
    assert inj["target"] == "MAIL_URL" and inj["fired"] == 1 and out["met"] and out["recovered"]
