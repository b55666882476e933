from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.core.trajectory import Trajectory
from openforge.core.types import ModelCall
from openforge.store import TrajectoryStore, load_trajectories

runner = CliRunner()


def _traj(rid, reward=1.0, status="success"):
    calls = [ModelCall(index=0, prompt_ids=[1, 2, 3], output_ids=[41, 42], output_logprobs=[-0.1, -0.2], system_prefix_len=1),
             ModelCall(index=1, prompt_ids=[1, 2, 3, 41, 42, 5], output_ids=[43], output_logprobs=[-0.3], system_prefix_len=1)]
    return Trajectory(rollout_id=rid, task_id="t", harness="react", status=status, reward=reward, calls=calls).build()


def test_show_json_and_store(tmp_path):
    f = tmp_path / "trajectory.json"
    f.write_text(_traj("r1").model_dump_json())
    res = runner.invoke(app, ["trajectories", "show", str(f)])
    assert res.exit_code == 0, res.output
    assert "r1" in res.output and "break_reason=first" in res.output and "trained=3" in res.output
    db = tmp_path / "s.db"
    with TrajectoryStore(db) as s:
        s.put_trajectory(_traj("r2"))
        s.append_call("open", ModelCall(index=0, prompt_ids=[1], output_ids=[2], output_logprobs=[-1.0]))
    res = runner.invoke(app, ["trajectories", "show", str(db), "r2"])
    assert res.exit_code == 0 and "r2" in res.output
    res = runner.invoke(app, ["trajectories", "show", str(db), "open"])  # unfinished rollout: built from the call log
    assert res.exit_code == 0 and "segment 0" in res.output
    res = runner.invoke(app, ["trajectories", "show", str(db), "zzz"])
    assert res.exit_code != 0 and "no rollout 'zzz'" in str(res.exception)


def test_export(tmp_path):
    db = tmp_path / "s.db"
    with TrajectoryStore(db) as s:
        s.put_trajectory(_traj("a"))
        s.put_trajectory(_traj("b", 0.0, "infra_error"))
    for fmt in ("jsonl", "parquet"):
        out = tmp_path / f"x.{fmt}"
        res = runner.invoke(app, ["trajectories", "export", str(db), "--format", fmt, "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert [t.rollout_id for t in load_trajectories(out)] == ["a", "b"]
    out = tmp_path / "ok.jsonl"
    runner.invoke(app, ["trajectories", "export", str(db), "--out", str(out), "--status", "success"])
    assert [t.rollout_id for t in load_trajectories(out)] == ["a"]


def test_export_names_and_skips_a_bad_row(tmp_path):
    import sqlite3

    db = tmp_path / "s.db"
    with TrajectoryStore(db) as s:
        s.put_trajectory(_traj("a"))
    c = sqlite3.connect(db)  # what an older version stored for a verifier that printed Infinity
    c.execute("INSERT INTO trajectories (rollout_id, task_id, status, reward, data, finished_at) "
              "VALUES ('inf', 't', 'success', 1.0, ?, 9)",
              (_traj("inf").to_json().replace('"reward":1.0', '"reward":null', 1),))
    c.commit()
    c.close()
    out = tmp_path / "x.jsonl"
    res = runner.invoke(app, ["trajectories", "export", str(db), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "skipped" in res.output and "rollout inf" in res.output and "wrote 1 trajectories" in res.output
    assert [t.rollout_id for t in load_trajectories(out)] == ["a"]


def test_cli_error_is_clean(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n")
    p = subprocess.run([sys.executable, "-m", "openforge.cli.main", "trajectories", "show", str(bad)],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "not JSON" in p.stderr and "Traceback" not in p.stderr


def test_show_a_run_directory_uses_its_store_and_lists_rollouts(tmp_path):
    """A run directory is read through its store; without an id a store of several rollouts is listed
    (one row each), not dumped as token ids."""
    import json

    with TrajectoryStore(tmp_path / "trajectories.db") as s:
        s.put_trajectory(_traj("ra"))
        s.put_trajectory(_traj("rb", 0.0, "policy_failure"))
    res = runner.invoke(app, ["trajectories", "show", str(tmp_path)])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())  # the table title wraps with the length of tmp_path
    assert "2 rollouts" in flat and "policy_failure" in flat
    assert "segment 0" not in res.output and "41 42" not in res.output  # no token dump
    assert f"forge trajectories show {tmp_path} ROLLOUT_ID" in res.output
    rows = json.loads(runner.invoke(app, ["trajectories", "show", str(tmp_path), "--json"]).output)
    assert [(r["rollout_id"], r["status"], r["reward"]) for r in rows] == [
        ("ra", "success", 1.0), ("rb", "policy_failure", 0.0)]
    res = runner.invoke(app, ["trajectories", "show", str(tmp_path), "rb"])
    assert res.exit_code == 0 and "segment 0" in res.output and "policy_failure" in res.output


def test_show_a_rollout_directory_with_one_rollout_shows_it(tmp_path):
    with TrajectoryStore(tmp_path / "store.db") as s:
        s.put_trajectory(_traj("only"))
    res = runner.invoke(app, ["trajectories", "show", str(tmp_path)])
    assert res.exit_code == 0 and "only" in res.output and "segment 0" in res.output


def test_show_a_directory_without_trajectories_is_a_clean_error(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "openforge.cli.main", "trajectories", "show", str(tmp_path)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "a directory without trajectories (looked for trajectories.db, store.db" in p.stderr
