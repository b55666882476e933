"""Missing-file semantics: ``Sandbox.read_file`` of a file the agent did not write raises
:class:`SandboxFileNotFound` (a ``SandboxError`` and a ``FileNotFoundError``), and a verifier that lets
it escape scores the rollout 0 as ``policy_failure`` (trained) — while a verifier that is really
broken (a ZeroDivisionError, a host file of its own that is missing) stays ``env_error``. Real
sandboxes, the real proxy and ``run_rollout``."""

from __future__ import annotations

import pickle

import pytest

from openforge.core.errors import SandboxError, SandboxFileNotFound
from openforge.core.task import Task
from openforge.core.types import RolloutStatus as S
from openforge.environment import Environment, VerifyResult
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.runner.rollout import run_rollout

TASK = Task(id="answer", instruction="write 42 to answer.txt", environment="answers", timeout_s=30)


class Answers(Environment):
    """Reads the agent's answer.txt through the sandbox."""

    name = "answers"

    def tasks(self, split=None):
        return [TASK]

    async def verify(self, task, sandbox):
        return VerifyResult(reward=float((await sandbox.read_file("answer.txt")).strip() == b"42"))


class DividesByZero(Answers):
    async def verify(self, task, sandbox):
        await sandbox.read_file("answer.txt")
        return VerifyResult(reward=1 / len(task.subgoals))


class OwnFileMissing(Answers):
    """A verifier whose own (host) data is missing: the environment's fault, not the agent's."""

    async def verify(self, task, sandbox):
        with open("/nonexistent-openforge-answers.json") as f:
            return VerifyResult(reward=float(f.read() == "42"))


class Shell(Harness):
    """Runs one shell command in the sandbox and ends normally."""

    name = "shell"

    def __init__(self, command: str):
        self.command = command

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        res = await ctx.exec(["sh", "-c", self.command])
        return HarnessResult.from_exec(res, harness=self.name)


async def _rollout(rig, env: Environment, command: str):
    proxy, launcher, store = await rig({"turns": [{"text": "ok"}]})
    return await run_rollout(harness=Shell(command), environment=env, task=TASK, launcher=launcher, proxy=proxy,
                             store=store)


async def test_a_file_the_agent_did_not_write_is_a_policy_failure(rig):
    traj = await _rollout(rig, Answers(), "true")
    assert traj.status == S.POLICY_FAILURE and traj.reward == 0.0 and traj.trainable, (traj.status, traj.error)
    assert traj.metadata["verify_missing_file"] == "answer.txt"
    assert "missing" in traj.metadata["verify_detail"] and "answer.txt" in traj.metadata["verify_detail"]


async def test_the_same_verifier_scores_a_written_file(rig):
    traj = await _rollout(rig, Answers(), "echo 42 > answer.txt")
    assert traj.status == S.SUCCESS and traj.reward == 1.0, (traj.status, traj.error)


async def test_a_broken_verifier_is_still_an_env_error(rig):
    traj = await _rollout(rig, DividesByZero(), "echo 42 > answer.txt")
    assert traj.status == S.ENV_ERROR and not traj.trainable and "ZeroDivisionError" in traj.error, traj.error


async def test_a_verifier_missing_its_own_host_file_is_an_env_error(rig):
    """Only the sandbox's error means "the agent did not write it": a plain FileNotFoundError does not."""
    traj = await _rollout(rig, OwnFileMissing(), "echo 42 > answer.txt")
    assert traj.status == S.ENV_ERROR and "FileNotFoundError" in traj.error, traj.error


@pytest.fixture
async def sandbox(tmp_path):
    launcher = LocalLauncher(base_dir=tmp_path / "sbx", grace_s=1.0)
    sbx = await launcher.start(SandboxSpec(rollout_id="missing", task=TASK, proxy_url="", api_key=""))
    yield sbx
    await sbx.close()
    await launcher.aclose()


async def test_read_file_of_a_missing_file_is_distinct(sandbox):
    with pytest.raises(SandboxFileNotFound) as e:
        await sandbox.read_file("answer.txt")
    assert isinstance(e.value, SandboxError) and isinstance(e.value, FileNotFoundError)
    assert e.value.path == "answer.txt" and "answer.txt" in str(e.value)
    with pytest.raises(SandboxFileNotFound):  # under a file, not a folder: not there either
        await sandbox.write_file("out", b"x")
        await sandbox.read_file("out/answer.txt")
    back = pickle.loads(pickle.dumps(e.value))
    assert type(back) is SandboxFileNotFound and back.path == "answer.txt"


async def test_other_read_failures_are_not_missing_files(sandbox):
    await sandbox.exec(["mkdir", "adir"])
    with pytest.raises(SandboxError) as e:
        await sandbox.read_file("adir")
    assert not isinstance(e.value, SandboxFileNotFound)
    with pytest.raises(SandboxError) as e:
        await sandbox.read_file("/etc/hostname")  # outside the sandbox: refused, not "missing"
    assert not isinstance(e.value, SandboxFileNotFound)


async def test_exists(sandbox):
    assert await sandbox.exists("answer.txt") is False
    await sandbox.write_file("answer.txt", b"42\n")
    assert await sandbox.exists("answer.txt") is True
