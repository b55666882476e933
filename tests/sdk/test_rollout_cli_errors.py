"""``forge rollout`` says what broke in the author's terms (issue 38, item 5): a verifier or harness
that raises gets its traceback printed (exit 3), as ``forge eval`` prints it; a reference solution that
does not succeed — here a task whose ``setup/`` file is missing — exits 4 naming the task, not 0 as if a
model had failed it. Real CLI, real sandboxes, the reference policy."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.cli.main import app

runner = CliRunner()

ENV_SRC = '''
from openforge import Environment, Harness, HarnessResult, Task, VerifyResult


class Raises(Environment):
    name = "raises"

    def tasks(self, split=None):
        return [Task(id="t", instruction="write 1 to answer.txt", environment=self.name,
                     metadata={"solution": ["echo 1 > answer.txt"]})]

    async def verify(self, task, sandbox):
        data = {"answer": (await sandbox.read_file("answer.txt")).strip()}
        return VerifyResult(reward=float(data["answr"] == b"1"))  # a typo: KeyError


class Crashes(Harness):
    name = "crashes"

    async def run(self, ctx):
        return helper_that_is_not_defined(ctx)  # NameError
'''


@pytest.fixture
def mod(tmp_path, monkeypatch):
    (tmp_path / "newcomer_raising.py").write_text(textwrap.dedent(ENV_SRC))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "newcomer_raising"


def _invoke(tmp_path: Path, *args: str):
    res = runner.invoke(app, ["rollout", *args, "--out", str(tmp_path / "out")])
    return res, " ".join(res.output.split())


def test_a_verifier_that_raises_prints_its_traceback(tmp_path, mod):
    res, out = _invoke(tmp_path, "-e", f"{mod}:Raises", "-t", "t", "--backend", "reference")
    assert res.exit_code == 3, res.output
    assert "env_error" in out and "verifier traceback" in out
    assert "KeyError: 'answr'" in res.output and 'data["answr"]' in res.output  # the line of the bug


def test_a_harness_that_raises_prints_its_traceback(tmp_path, mod):
    res, out = _invoke(tmp_path, "-H", f"{mod}:Crashes", "-e", f"{mod}:Raises", "-t", "t", "--backend", "reference")
    assert res.exit_code == 3, res.output
    assert "harness_error" in out and "NameError" in res.output
    assert "helper_that_is_not_defined(ctx)" in res.output  # the traceback, not only the one-line error


def _task_missing_its_setup_file(root: Path) -> Path:
    d = root / "tasks" / "append"
    d.mkdir(parents=True)
    (d / "task.toml").write_text('id = "append"\nexit_code_reward = true\n')
    (d / "instruction.md").write_text("Append the line 'two' to data.txt.\n")
    (d / "solution.sh").write_text("echo two >> data.txt\n")
    (d / "verify.sh").write_text('#!/bin/sh\n[ "$(cat data.txt)" = "$(printf \'one\\ntwo\')" ]\n')
    os.chmod(d / "verify.sh", 0o755)
    return root / "tasks"  # setup/data.txt ("one") was meant to be there: the bug


def test_a_reference_that_fails_is_the_tasks_problem_not_exit_0(tmp_path):
    tasks = _task_missing_its_setup_file(tmp_path)
    res, out = _invoke(tmp_path, "-e", str(tasks), "-t", "append", "--backend", "reference")
    assert "policy_failure" in out  # what the outcome rule calls it
    assert res.exit_code == 4, res.output  # before: 0
    assert "the reference solution of append did not succeed" in out and "setup or its verifier is broken" in out
    (tasks / "append" / "setup").mkdir()
    (tasks / "append" / "setup" / "data.txt").write_text("one\n")
    res, out = _invoke(tmp_path, "-e", str(tasks), "-t", "append", "--backend", "reference")
    assert res.exit_code == 0 and "success" in out, res.output
