"""run_rollout / run_groups: every status of the taxonomy from a real cause, with the real proxy
(scripted policy), the real react harness process, real local sandboxes and the claw environment."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from testdeps import missing

from openforge.core.errors import BackendError, SandboxError
from openforge.core.types import RolloutStatus as S
from openforge.environment import VerifyResult
from openforge.envs.claw import ClawEnvironment, reference_solution
from openforge.harness import Harness, HarnessResult, RolloutContext
from openforge.launchers.local import LocalLauncher
from openforge.runner.rollout import run_groups, run_rollout
from openforge.store import TrajectoryStore

pytest.importorskip("openai")
ENV = ClawEnvironment()
FINISH = {"tool": {"name": "finish", "arguments": {"answer": "done"}}}


def react():
    from openforge.harnesses.react import ReactHarness

    return ReactHarness(max_turns=4)


def solve(task_id: str) -> list[dict]:
    return [{"shell": c} for c in reference_solution(task_id)] + [FINISH]


async def test_success_and_stored(rig, monkeypatch):
    proxy, launcher, store = await rig({"turns": solve("files-create-hello")})
    puts = []  # the trajectory is written once, with the run's timings and facts in it
    for name in ("put_trajectory", "aput_trajectory"):
        monkeypatch.setattr(store, name, lambda t, _real=getattr(store, name), **kw: (puts.append(t.rollout_id),
                                                                                     _real(t, **kw))[1])
    task = ENV.task("files-create-hello")
    traj = await run_rollout(harness=react(), environment=ENV, task=task, launcher=launcher, proxy=proxy, store=store)
    assert traj.status == S.SUCCESS, (traj.error, traj.metadata)
    assert traj.reward == 1.0 and traj.rewards == {"hello": 1.0}
    assert len(traj.calls) == 2 and traj.segments and traj.environment == "claw" and traj.harness == "react"
    assert {"provision_s", "setup_s", "harness_s", "verify_s"} <= set(traj.metrics)
    assert puts == [traj.rollout_id]
    assert store.get_trajectory(traj.rollout_id) == traj
    assert traj.metadata["isolation"] == launcher.isolation == "bwrap"  # the run records how each rollout was sandboxed
    # the task's analysis facts travel with the trajectory (per-category results, tool coverage)
    assert traj.metadata["category"] == task.category and traj.metadata["split"] == task.split
    assert traj.metadata["required_tools"] == list(task.required_tools)


async def test_services_task_via_http_from_inside_the_sandbox(rig):
    proxy, launcher, store = await rig({"turns": solve("issues-close")})
    traj = await run_rollout(harness=react(), environment=ENV, task=ENV.task("issues-close"), launcher=launcher,
                             proxy=proxy, store=store)
    assert traj.status == S.SUCCESS and traj.reward == 1.0, (traj.error, traj.metadata)


async def test_policy_failure_is_kept_with_reward_zero(rig):
    proxy, launcher, store = await rig({"turns": [{"shell": "echo 'hello there' > hello.txt"}, FINISH]})
    traj = await run_rollout(harness=react(), environment=ENV, task=ENV.task("files-create-hello"),
                             launcher=launcher, proxy=proxy, store=store)
    assert traj.status == S.POLICY_FAILURE and traj.reward == 0.0 and traj.trainable
    assert "failed: hello" in traj.metadata["verify_detail"]


async def test_budget_overrun_is_timeout(rig):
    proxy, launcher, store = await rig({"turns": [{"shell": "sleep 600"}, FINISH]})
    traj = await run_rollout(harness=react(), environment=ENV, task=ENV.task("files-create-hello"),
                             launcher=launcher, proxy=proxy, store=store, budget_s=8)
    assert traj.status == S.TIMEOUT and traj.reward == 0.0 and "budget" in traj.error, traj.error
    assert traj.metrics["harness_s"] < 8 + 10


class Crashes(Harness):
    """A harness whose process dies with a Python exception."""

    name = "crashes"

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        res = await ctx.exec([sys.executable, "-c", "raise RuntimeError('agent blew up')"])
        return HarnessResult.from_exec(res, harness=self.name)


async def test_crashing_harness_is_harness_error(rig):
    proxy, launcher, store = await rig({"turns": [FINISH]})
    traj = await run_rollout(harness=Crashes(), environment=ENV, task=ENV.task("files-create-hello"),
                             launcher=launcher, proxy=proxy, store=store)
    assert traj.status == S.HARNESS_ERROR and not traj.trainable
    assert "crashes crashed (exit code 1)" in traj.error and "agent blew up" in traj.error


class BrokenVerifier(ClawEnvironment):
    async def verify(self, task, sandbox):
        raise KeyError("expected_column")


class BrokenSetup(ClawEnvironment):
    async def setup(self, task, sandbox):
        await sandbox.exec(["true"])
        raise FileNotFoundError("fixture data missing")


async def test_raising_verifier_and_setup_are_env_errors(rig):
    proxy, launcher, _store = await rig({"turns": solve("files-create-hello")})
    task = ENV.task("files-create-hello")
    traj = await run_rollout(harness=react(), environment=BrokenVerifier(), task=task, launcher=launcher, proxy=proxy)
    assert traj.status == S.ENV_ERROR and "verifier of files-create-hello raised KeyError" in traj.error
    assert "verifier_traceback" in traj.metadata
    traj = await run_rollout(harness=react(), environment=BrokenSetup(), task=task, launcher=launcher, proxy=proxy)
    assert traj.status == S.ENV_ERROR and "fixture data missing" in traj.error and traj.calls == []


class PodLostInSetup(ClawEnvironment):
    """Setup on a pod that went past its storage limit, or its deadline: statuses that blame the policy
    once it has run (``classify_pod``), but the policy had not run yet."""

    def __init__(self, status):
        super().__init__()
        self.status = status

    async def setup(self, task, sandbox):
        from openforge.launchers.base import SandboxFailure

        raise SandboxFailure("pod of-x lost: the rollout's files went past its disk_mb", self.status)


@pytest.mark.parametrize("status", [S.POLICY_FAILURE, S.TIMEOUT])
async def test_a_policy_status_in_setup_is_the_environments(rig, status):
    proxy, launcher, _store = await rig({"turns": solve("files-create-hello")})
    traj = await run_rollout(harness=react(), environment=PodLostInSetup(status), task=ENV.task("files-create-hello"),
                             launcher=launcher, proxy=proxy)
    assert traj.status == S.ENV_ERROR and not traj.trainable and "disk_mb" in traj.error, (traj.status, traj.error)
    assert traj.calls == []


class NonFiniteVerifier(ClawEnvironment):
    """The real claw verifier, then a NaN / ±Infinity slipped into its verdict (as a buggy verifier would)."""

    def __init__(self, field, value):
        super().__init__()
        self.field, self.value = field, value

    async def verify(self, task, sandbox):
        v = await super().verify(task, sandbox)
        bad = self.value if self.field == "reward" else {**v.rewards, "extra": self.value}
        return VerifyResult.model_construct(**{**dict(v), self.field: bad})


@pytest.mark.parametrize("field, value", [("reward", float("nan")), ("reward", float("inf")),
                                          ("rewards", float("-inf"))])
async def test_non_finite_verifier_result_is_env_error_with_calls_kept(rig, field, value):
    proxy, launcher, store = await rig({"turns": solve("files-create-hello")})
    traj = await run_rollout(harness=react(), environment=NonFiniteVerifier(field, value),
                             task=ENV.task("files-create-hello"), launcher=launcher, proxy=proxy, store=store)
    assert traj.status == S.ENV_ERROR and not traj.trainable, (traj.status, traj.error)
    assert "gave an invalid result" in traj.error and "finite" in traj.error
    assert traj.reward == 0.0 and traj.rewards == {}
    assert len(traj.calls) == 2 and traj.segments  # the agent's calls are kept
    assert store.get_trajectory(traj.rollout_id) == traj


async def test_upstream_failure_is_infra_error(rig):
    from openforge.proxy.backends.scripted import ScriptedBackend

    class Upstream500(ScriptedBackend):
        async def generate(self, *a, **kw):
            raise BackendError("upstream returned HTTP 500")

    proxy, launcher, store = await rig({"turns": [FINISH]}, backend_cls=Upstream500)
    traj = await run_rollout(harness=react(), environment=ENV, task=ENV.task("files-create-hello"),
                             launcher=launcher, proxy=proxy, store=store)
    assert traj.status == S.INFRA_ERROR and not traj.trainable, (traj.status, traj.error)
    assert "500" in (traj.error or "")


class NoSandboxes(LocalLauncher):
    async def start(self, spec):
        raise SandboxError("node out of pids")


async def test_provisioning_failure_is_infra_error(rig, tmp_path):
    proxy, _launcher, store = await rig({"turns": [FINISH]})
    bad = NoSandboxes(base_dir=tmp_path / "sbx2")
    traj = await run_rollout(harness=react(), environment=ENV, task=ENV.task("files-create-hello"), launcher=bad,
                             proxy=proxy, store=store)
    assert traj.status == S.INFRA_ERROR and "node out of pids" in traj.error
    await bad.aclose()


async def test_cancel_is_recorded_and_cleans_up(rig, tmp_path):
    proxy, launcher, store = await rig({"turns": [{"shell": "sleep 600"}, FINISH]})
    run = asyncio.create_task(run_rollout(harness=react(), environment=ENV, task=ENV.task("files-create-hello"),
                                          launcher=launcher, proxy=proxy, store=store))
    for _ in range(200):
        await asyncio.sleep(0.05)
        if any(store.calls(r["rollout_id"]) for r in store.rollouts()):
            break
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    [t] = list(store.trajectories())
    assert t.status == S.CANCELLED
    assert not list((tmp_path / "sbx").iterdir())


class FlakyLauncher(LocalLauncher):
    """Fails provisioning for one task always, and for every other task's first attempt."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.seen: set[str] = set()

    async def start(self, spec):
        key = f"{spec.task.id}/{len(self.seen)}"
        if spec.task.id == "files-rename" or spec.task.id not in {k.split("/")[0] for k in self.seen}:
            self.seen.add(key)
            raise SandboxError(f"pod evicted ({key})")
        return await super().start(spec)


async def test_groups_retry_infra_drop_short_groups_keep_policy_failures(rig, tmp_path):
    script = {"turns": [FINISH], "tasks": {"files-create-hello": solve("files-create-hello")}}
    proxy, _, store = await rig(script)
    launcher = FlakyLauncher(base_dir=tmp_path / "sbx3", grace_s=1.0)
    tasks = [ENV.task("files-create-hello"), ENV.task("files-append-line"), ENV.task("files-rename")]
    res = await run_groups(tasks, 2, 3, harness=react, environment=ENV, launcher=launcher, proxy=proxy,
                           store=store, max_retries=1, progress=False)
    await launcher.aclose()
    by_task = {g.task_id: g for g in res}
    assert set(by_task) == {"files-create-hello", "files-append-line"}
    assert [t.status for t in by_task["files-create-hello"].trajectories] == [S.SUCCESS, S.SUCCESS]
    assert [t.status for t in by_task["files-append-line"].trajectories] == [S.POLICY_FAILURE] * 2
    assert res.dropped == [{"task_id": "files-rename", "valid": 0, "group_size": 2, "reason": res.dropped[0]["reason"],
                            "rollout_ids": []}]
    assert all(t.status == S.INFRA_ERROR for t in res.discarded) and len(res.discarded) >= 4
    assert all("discard_reason" in t.metadata for t in res.discarded)
    stored = list(store.trajectories())
    assert all("discard_reason" in t.metadata for t in stored if t.status == S.INFRA_ERROR)
    assert len(stored) == res.attempts and {t.status for t in stored} == {S.SUCCESS, S.POLICY_FAILURE, S.INFRA_ERROR}
    assert not list(Path(tmp_path / "sbx3").iterdir())


@pytest.mark.parametrize(("env", "task"), [("claw", "notes-create"), ("browser", "web-shop-mugs"),
                                          ("desktop", "counter-three")])
def test_forge_rollout_cli_writes_trajectory(tmp_path, env, task):
    import json
    import shutil
    import subprocess

    if env == "desktop" and not (shutil.which("Xvfb") and shutil.which("xdotool")):
        missing("Xvfb/xdotool not installed (apt-get install xvfb xdotool)")
    out = tmp_path / "runs" / "one"  # given relative, as in the README (sockets must not live under it)
    r = subprocess.run([sys.executable, "-m", "openforge.cli.main", "rollout", "--env", env, "--task", task,
                        "--backend", "scripted:-", "--reference", "--out", "runs/one"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"},
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "success" in r.stdout and "written" in r.stdout
    traj = json.loads((out / "trajectory.json").read_text())
    assert traj["status"] == "success" and traj["reward"] == 1.0 and traj["calls"]
    if env != "claw":
        return
    r = subprocess.run([sys.executable, "-m", "openforge.cli.main", "rollout", "--task", "no-such-task",
                        "--backend", "scripted:x", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "has no task 'no-such-task'" in r.stderr


def test_ctrl_c_on_forge_rollout_records_cancelled_and_leaves_nothing(tmp_path):
    import signal
    import subprocess
    import time

    script = tmp_path / "script.yaml"
    script.write_text("turns:\n  - shell: 'sleep 613'\n")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "openforge.cli.main", "rollout", "--task", "files-create-hello",
                             "--backend", f"scripted:{script}", "--out", str(out)],
                            env={**os.environ, "TMPDIR": str(tmp_path)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    base = tmp_path / "openforge-sandboxes"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not subprocess.run(["pgrep", "-f", "sleep 613"], capture_output=True).stdout:
        time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", "sleep 613"], capture_output=True).stdout, proc.stderr
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "cancelled" in err
    assert not subprocess.run(["pgrep", "-f", "sleep 613"], capture_output=True).stdout
    assert not list(base.iterdir())
    [traj] = list(TrajectoryStore(out / "store.db").trajectories())
    assert traj.status == S.CANCELLED
