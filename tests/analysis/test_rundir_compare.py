"""Run-directory reader and `forge compare`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.analysis.compare import compare_runs
from openforge.analysis.rundir import load_run
from openforge.cli.main import app
from openforge.core.errors import ConfigError, StoreError

from .demo_run import write_demo_run
from .factory import traj


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_run(tmp_path_factory.mktemp("runs") / "demo")


def test_load_training_run(demo: Path) -> None:
    run = load_run(demo)
    assert run.config["harness"]["name"] == "react"
    assert [m["step"] for m in run.metrics] == list(range(6))
    assert len(run.trajectories) == 6 * 9 and run.steps == list(range(6))
    assert len(run.at_step(3)) == 9


def test_step_comes_from_the_folder_when_metadata_lacks_it(tmp_path: Path) -> None:
    d = tmp_path / "run" / "trajectories" / "step_7"
    d.mkdir(parents=True)
    (d / "a.json").write_text(traj([("bash", {"command": "ls"}, "x")]).to_json())
    run = load_run(tmp_path / "run")
    assert run.steps == [7]


def test_torn_last_metrics_line_is_ignored_but_a_bad_middle_line_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n{"ste')
    assert len(load_run(tmp_path).metrics) == 2
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\nnot json\n{"step": 2}\n')
    with pytest.raises(StoreError, match=r"metrics.jsonl:2: not JSON"):
        load_run(tmp_path)


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not a run directory"):
        load_run(tmp_path)
    with pytest.raises(StoreError, match="no such run directory"):
        load_run(tmp_path / "missing")


def test_compare_first_vs_last_step_shows_the_training_shift(demo: Path) -> None:
    run = load_run(demo)
    first, last = compare_runs([run], step="first")[0], compare_runs([run], step="last")[0]
    assert first["trials"] == last["trials"] == 9
    assert last["behaviour.generic_shell_share"] < first["behaviour.generic_shell_share"]
    assert last["behaviour.self_verification_rate"] > first["behaviour.self_verification_rate"]
    assert last["pass_at_1"] > first["pass_at_1"]


def test_compare_bad_step_is_explained(demo: Path) -> None:
    with pytest.raises(ConfigError, match="no trajectories at step 99"):
        compare_runs([load_run(demo)], step="99")
    with pytest.raises(ConfigError, match="--step must be"):
        compare_runs([load_run(demo)], step="middle")


def test_forge_compare_cli_table_and_json(demo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "trajectories.jsonl").write_text(
        "".join(traj([("exec_command", {"cmd": "ls"}, "a")], api="responses", rollout_id=f"o{i}",
                     harness="codex").to_json() + "\n" for i in range(3)))
    runner = CliRunner()
    res = runner.invoke(app, ["compare", str(demo), str(other), "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["name"] for r in rows] == ["demo", "other"]
    assert rows[1]["harness"] == "codex" and rows[1]["behaviour.generic_shell_share"] == 1.0
    assert rows[0]["tasks"] == 3 and rows[1]["tasks"] == 1
    res = runner.invoke(app, ["compare", str(demo), str(other)], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    assert "generic-shell share" in res.output and "100.0 %" in res.output and "codex" in res.output


def test_forge_run_layout_store_steps_inferred_from_metrics(tmp_path: Path) -> None:
    """openforge.run writes trajectories.db (finishing order) + metrics.jsonl with per-step status counts."""
    from openforge.store import TrajectoryStore

    with TrajectoryStore(tmp_path / "trajectories.db") as store:
        for i in range(2 + 3 + 4):  # 2 SFT teacher rollouts, then step 1 (3 attempts), step 2 (4 attempts)
            store.put_trajectory(traj([("bash", {"command": "ls"}, "x")], rollout_id=f"r{i}"))
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 0, "phase": "sft", "trajectories": 2}\n'
        '{"step": 1, "reward_mean": 0.5, "statuses": {"success": 2, "infra_error": 1}}\n'
        '{"step": 2, "reward_mean": 0.7, "statuses": {"success": 3, "policy_failure": 1}}\n')
    run = load_run(tmp_path)
    assert run.steps == [1, 2]
    assert [t.rollout_id for t in run.at_step(1)] == ["r2", "r3", "r4"]
    assert [t.rollout_id for t in run.at_step(2)] == ["r5", "r6", "r7", "r8"]
    assert [t.rollout_id for t in run.trajectories if t.metadata.get("phase") == "sft"] == ["r0", "r1"]
    assert compare_runs([run])[0]["trials"] == 7  # the SFT teacher's rollouts are not the policy's
    # counts that do not add up assign nothing rather than something wrong
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "statuses": {"success": 99}}\n')
    assert load_run(tmp_path).steps == []


def test_forge_compare_run_at_step(demo: Path) -> None:
    res = CliRunner().invoke(app, ["compare", f"{demo}@first", f"{demo}@last", "--json"])
    assert res.exit_code == 0, res.output
    first, last = json.loads(res.output)
    assert (first["name"], last["name"]) == ("demo@first", "demo@last")
    assert last["behaviour.generic_shell_share"] < first["behaviour.generic_shell_share"]
    res = CliRunner().invoke(app, ["compare", f"{demo}@99"])
    assert res.exit_code != 0 and "no trajectories at step 99" in str(res.exception)
