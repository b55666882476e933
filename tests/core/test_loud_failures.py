"""A training run that cannot train is loud (issue 26, item 2): all rollouts non-trainable → a typed
error naming the dominant cause and its first traceback, non-zero exit; a run over the error budget
stops early; the summary does not blame tied rewards when no rollout was valid."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from openforge.core.errors import ForgeError
from openforge.core.trajectory import Trajectory
from openforge.core.types import RolloutStatus
from openforge.runner.run_health import ErrorBudget, NothingTrainable, TooManyRolloutErrors
from openforge.runner.run_report import idle_step_lines


def _traj(status: str, i: int = 0, **md: str) -> Trajectory:
    return Trajectory(rollout_id=f"r{i}", task_id=f"t{i}", harness="react", environment="claw",
                      status=RolloutStatus(status), error=f"{status} number {i}" if status.endswith("error") else None,
                      metadata=md)


def test_all_env_errors_raise_nothing_trainable_with_the_first_traceback() -> None:
    budget = ErrorBudget(max_share=1.0)  # even with the share check off, "nothing trainable" stays
    budget.record([_traj("env_error", 0, verifier_traceback="Traceback ...\nKeyError: 'hello.txt'"),
                   *(_traj("env_error", i) for i in range(1, 7)), _traj("infra_error", 7)])
    with pytest.raises(NothingTrainable) as info:
        budget.check(where="after step 1 of 2")
    msg = str(info.value)
    assert isinstance(info.value, ForgeError) and isinstance(info.value, RuntimeError)
    import openforge

    assert openforge.NothingTrainable is NothingTrainable and openforge.TooManyRolloutErrors is TooManyRolloutErrors
    assert "no rollout was trainable after step 1 of 2" in msg
    assert "8 of 8 rollouts were not trainable (7 env_error, 1 infra_error)" in msg
    assert "the first env_error: env_error on task t0: env_error number 0" in msg
    assert "KeyError: 'hello.txt'" in msg


def test_error_share_above_the_budget_stops_with_the_reason() -> None:
    budget = ErrorBudget(max_share=0.5)
    budget.record([_traj("success", 0), _traj("policy_failure", 1), _traj("harness_error", 2, traceback="boom")])
    budget.check()  # 1 of 3: under the budget
    budget.record([_traj("harness_error", 3), _traj("harness_error", 4)])
    with pytest.raises(TooManyRolloutErrors) as info:
        budget.check(where="after step 2 of 4")
    assert not isinstance(info.value, NothingTrainable)
    msg = str(info.value)
    assert "stopped after step 2 of 4: 60% of the rollouts were not trainable" in msg
    assert "rollout.max_error_share=0.5" in msg and "the first harness_error" in msg and "boom" in msg


def test_trainable_rollouts_pass_and_the_budget_is_validated() -> None:
    budget = ErrorBudget()
    budget.check()  # nothing yet
    budget.record([_traj("success"), _traj("timeout", 1), _traj("policy_failure", 2)])
    budget.check()
    with pytest.raises(ValueError):
        ErrorBudget(max_share=1.5)


def test_a_retried_infra_failure_is_judged_by_its_retry() -> None:
    from openforge.core.trajectory import TrajectoryGroup
    from openforge.runner.rollout import GroupResults
    from openforge.runner.run_health import step_outcomes

    ok = [_traj("success", i) for i in range(3)]
    groups = GroupResults([TrajectoryGroup(task_id="t0", trajectories=ok)])
    groups.discarded += [_traj("infra_error", 7, discard_reason="infra_error, retried: pod lost"),
                         _traj("env_error", 8, discard_reason="env_error: verifier crashed")]
    outcomes = step_outcomes(groups)
    assert sorted(t.rollout_id for t in outcomes) == ["r0", "r1", "r2", "r8"]
    budget = ErrorBudget(max_share=0.3)
    budget.record(outcomes)
    budget.check()  # 1 of 4 failed: the retried attempt does not count against the run


def test_summary_does_not_blame_tied_rewards_when_no_rollout_was_valid() -> None:
    steps = [{"step": 1, "gradient_step": False, "groups": 0, "statuses": {"env_error": 8}},
             {"step": 2, "gradient_step": False, "groups": 2, "statuses": {"policy_failure": 4}}]
    empty, tied = idle_step_lines(steps)
    assert empty.startswith("no gradient step at step(s) 1: no valid rollout group") and "differing" not in empty
    assert tied.startswith("no gradient step at step(s) 2: too few groups had differing rewards")


SETUP_CRASH = "echo 'setup.sh: the fixture database is missing' >&2\nexit 7\n"


@pytest.mark.slow
def test_forge_recipe_whose_rollouts_are_all_env_errors_fails(tmp_path: Path) -> None:
    """The real run (SmolLM2, the react harness, the real proxy) on tasks whose setup.sh fails every time."""
    pytest.importorskip("openai")
    from typer.testing import CliRunner

    from openforge.cli.main import app, exit_code

    tasks = tmp_path / "tasks"
    for tid in ("a", "b"):
        d = tasks / tid
        d.mkdir(parents=True)
        (d / "task.toml").write_text(f'id = "{tid}"\nsplit = "train"\ntimeout_s = 60\n')
        (d / "instruction.md").write_text("Say hi.")
        (d / "setup.sh").write_text(SETUP_CRASH)
        (d / "verify.sh").write_text("#!/bin/sh\nexit 0\n")
        os.chmod(d / "verify.sh", 0o755)
    run_dir = tmp_path / "run"
    res = CliRunner().invoke(app, ["recipe", "claw-grpo", "--preset", "test", "-q", f"env.name={tasks}",
                                   "env.subset=null", "sft.enabled=false", "eval.heldout.enabled=false",
                                   "trainer.steps=3", f"run_dir={run_dir}"])
    err = res.exception
    assert isinstance(err, NothingTrainable), (res.output, err)
    assert exit_code(err) == 3
    msg = str(err)
    assert "no rollout was trainable after step 1 of 3" in msg  # stopped at once, not after 3 steps
    assert "env_error" in msg and re.search(r"setup.sh of [ab] failed \(7\)", msg) and "fixture database is missing" in msg
    assert "EnvironmentError_" not in msg and "EnvError" in msg  # the class, named without the old "_"
    out = " ".join(res.output.split())  # the summary table so far, which does not blame tied rewards
    assert "no gradient step at step(s) 1: no valid rollout group" in out and "differing" not in out
    import json

    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["steps"]) == 1 and "no rollout was trainable" in summary["stopped"]
