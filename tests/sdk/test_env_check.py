"""``forge env check ENV [-H HARNESS]`` (issue 38, item 5): every reference solution replayed (must
succeed) and a do-nothing policy (must fail) before anyone trains. A sound environment passes (exit 0);
a verifier that raises on the reference is reported with its traceback, a reference that fails and a
verifier that passes an untouched sandbox are named (exit 3). Real CLI, sandboxes, proxy, harnesses."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()

ENVS = '''
from openforge import Environment, Task, VerifyResult


class Mixed(Environment):
    """A sound task and one of each mistake: a verifier that raises on the reference's answer, a
    reference that writes the wrong answer, a verifier that passes anything."""

    name = "chk"

    def tasks(self, split=None):
        sols = {"sound": "echo 7", "raises": "echo 7", "wrong-ref": "echo 8", "lenient": "echo 7"}
        return [Task(id=k, instruction="write 7 to answer.txt", environment=self.name,
                     metadata={"solution": [f"{v} > answer.txt"]}) for k, v in sols.items()]

    async def verify(self, task, sandbox):
        if task.id == "lenient":
            return VerifyResult(reward=1.0)
        text = (await sandbox.read_file("answer.txt")).decode()
        if task.id == "raises":
            return VerifyResult(reward=float(int(text.split()[1])))  # IndexError on "7"
        return VerifyResult.from_checks({"seven": text.strip() == "7"})
'''


@pytest.fixture
def envs(tmp_path, monkeypatch):
    (tmp_path / "newcomer_chk_envs.py").write_text(textwrap.dedent(ENVS))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "newcomer_chk_envs"


def _check(tmp_path: Path, *args: str):
    res = runner.invoke(app, ["env", "check", *args, "--out", str(tmp_path / "chk")])
    return res, " ".join(res.output.split())


def test_the_sdk_example_is_sound_through_its_own_harness(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    res, out = _check(tmp_path, "custom_environment:ArithmeticEnvironment", "-H", "custom_harness.harness:MyAgent",
                      "--split", "eval")
    assert res.exit_code == 0, res.output
    assert "2 task(s) sound" in out and out.count("policy_failure 0") == 2 and out.count("success 1") == 2


def test_each_mistake_is_named_and_a_sound_task_passes(tmp_path, envs):
    res, out = _check(tmp_path, f"{envs}:Mixed", "-H", "react")
    assert res.exit_code == 3, res.output
    assert "3 of 4 task(s) have a problem" in out
    # the verifier that raises: shown with its traceback, down to its own line
    assert "raises: reference solution: env_error on task raises" in out
    assert "IndexError" in out and "text.split()[1]" in res.output
    # the reference that writes the wrong answer
    assert "wrong-ref: reference solution did not succeed (policy_failure, reward 0)" in out and "failed: seven" in out
    # the verifier that passes an untouched sandbox
    assert "lenient: doing nothing succeeds (reward 1)" in out
    assert "sound:" not in out  # no problem reported for the sound task
    row = next(line for line in res.output.splitlines() if "│ sound " in line)
    assert "success 1" in row and "policy_failure 0" in row and "ok" in row
