"""``forge rollout`` and ``forge eval`` spell their shared flags alike; old spellings still work, hidden."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from openforge.cli.main import app
from openforge.core.errors import ConfigError

runner = CliRunner()
SHARED = {"harness": ["--harness", "-H"], "env": ["--env", "-e"], "backend": ["--backend", "-b"],
          "budget_s": ["--budget-s"], "out": ["--out", "-o"], "harness_opt": ["--harness-opt"],
          "launcher": ["--launcher", "-l"]}


def _params(name: str) -> dict[str, tuple[list[str], bool]]:
    cmd = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return {p.name: (sorted(p.opts), bool(getattr(p, "hidden", False))) for p in cmd.params}


def test_rollout_and_eval_share_flag_spellings_and_hide_the_old_ones():
    rollout, ev = _params("rollout"), _params("eval")
    for name, flags in SHARED.items():
        assert rollout[name] == (sorted(flags), False), name
        assert ev[name] == (sorted(flags), False), name
    assert rollout["budget_old"] == (["--budget"], True)
    assert ev["budget_old"] == (["--budget"], True) and ev["harness_old"] == (["-h"], True)


def test_backend_reference_and_old_spellings_work_in_both(tmp_path):
    res = runner.invoke(app, ["rollout", "-H", "react", "-e", "claw", "-t", "files-create-hello", "-b", "reference",
                              "--budget", "120", "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    traj = json.loads((tmp_path / "r" / "trajectory.json").read_text())
    assert traj["status"] == "success" and traj["reward"] == 1.0
    res = runner.invoke(app, ["eval", "-h", "react", "-e", "claw", "-b", "reference", "--split", "all", "--task",
                              "files-create-hello", "-k", "1", "--budget", "120", "--json", "-o", str(tmp_path / "e")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "e" / "eval.json").read_text())["pass_at_1"] == 1.0


def test_a_flag_and_its_old_spelling_that_disagree_are_refused(tmp_path):
    res = runner.invoke(app, ["rollout", "-t", "files-create-hello", "-b", "reference", "--budget-s", "5",
                              "--budget", "6", "-o", str(tmp_path)])
    assert isinstance(res.exception, ConfigError) and "--budget-s and --budget" in str(res.exception)
    res = runner.invoke(app, ["eval", "-e", "claw", "-b", "reference"])
    assert isinstance(res.exception, ConfigError) and "missing option --harness/-H" in str(res.exception)
