"""``forge export sft`` refuses held-out data unless ``--allow-heldout`` asks for it: a run's held-out
point directory, a file copied out of one (its trajectories say held-out), and a teacher run on the
held-out split. Training data from anything else exports as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from analysis.factory import traj
from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.core.errors import ConfigError

runner = CliRunner()


def _write(path: Path, metadata: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [traj([("bash", {"command": "ls"}, "a.txt")], rollout_id=f"r{i}", metadata=metadata) for i in range(2)]
    path.write_text("".join(t.to_json().replace("\n", "") + "\n" for t in rows))
    return path


def _export(tmp_path: Path, source: Path, *extra: str):
    return runner.invoke(app, ["export", "sft", str(tmp_path / "out.jsonl"), "--from", str(source), *extra])


def _refused(res, *words: str) -> None:
    assert isinstance(res.exception, ConfigError), (res.output, res.exception)
    msg = str(res.exception)
    assert "--allow-heldout" in msg and "held-out" in msg and all(w in msg for w in words), msg


def test_a_runs_heldout_point_is_refused_unless_allowed(tmp_path):
    point = tmp_path / "run" / "heldout" / "before"
    _write(point / "trajectories.jsonl", {"split": "heldout", "heldout": "before"})
    (point / "heldout.json").write_text(json.dumps({"point": "before"}))
    _refused(_export(tmp_path, point), "heldout/ folder", "2 of 2 trajectories")
    assert not (tmp_path / "out.jsonl").exists()
    res = _export(tmp_path, point, "--allow-heldout")
    assert res.exit_code == 0, (res.output, res.exception)
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("metadata", [{"split": "heldout"}, {"heldout": "after"}])
def test_a_copy_elsewhere_is_known_by_its_trajectories(tmp_path, metadata):
    copied = _write(tmp_path / "point" / "trajectories.jsonl", metadata)
    shutil.copy(copied, tmp_path / "data.jsonl")  # out of the run: no heldout/ in the path any more
    _refused(_export(tmp_path, tmp_path / "data.jsonl"), "2 of 2 trajectories")
    assert _export(tmp_path, tmp_path / "data.jsonl", "--allow-heldout").exit_code == 0


def test_a_point_directory_renamed_is_known_by_its_heldout_json(tmp_path):
    point = tmp_path / "kept"
    _write(point / "trajectories.jsonl", {"split": "train"})
    (point / "heldout.json").write_text("{}")
    _refused(_export(tmp_path, point), "heldout.json")


def test_training_rollouts_export_as_before(tmp_path):
    res = _export(tmp_path, _write(tmp_path / "train" / "trajectories.jsonl", {"split": "train"}))
    assert res.exit_code == 0, (res.output, res.exception)


def test_a_teacher_on_the_heldout_split_is_refused_before_it_runs(tmp_path, monkeypatch):
    from openforge.runner import teacher

    async def never(*a, **k):
        raise AssertionError("the teacher ran on held-out tasks")

    monkeypatch.setattr(teacher, "export_teacher_rollouts", never)
    res = runner.invoke(app, ["export", "sft", str(tmp_path / "out.jsonl"), "--split", "heldout"])
    _refused(res, "--split heldout")
