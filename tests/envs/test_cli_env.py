"""`forge env list` and `forge env tasks`."""

from typer.testing import CliRunner

from openforge.cli.main import app


def test_env_list_shows_counts():
    r = CliRunner().invoke(app, ["env", "list"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if "claw" in ln)
    assert "37" in line and "12" in line and " 9 " in line and "58" in line  # train, eval, held-out, total


def test_env_tasks_by_split():
    r = CliRunner().invoke(app, ["env", "tasks", "claw", "--split", "eval"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "claw: 12 tasks" in r.output and "git-find-commit" in r.output and "files-create-hello" not in r.output


def test_env_tasks_unknown_env_is_clear():
    r = CliRunner().invoke(app, ["env", "tasks", "nope"])
    assert r.exit_code != 0 and "unknown environment 'nope'" in str(r.exception)
