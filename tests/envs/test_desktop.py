"""desktop environment: reference xdotool solutions pass and doing nothing fails, with a real Xvfb,
real Tk apps and the sandboxed process reaching the display only through the forwarded X socket."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal

import pytest
from testdeps import missing, smollm2_tokenizer

from openforge.envs.desktop import DesktopEnvironment
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.plugins import make_environment


@pytest.fixture(autouse=True)
def _desktop_tools():
    if not (shutil.which("Xvfb") and shutil.which("xdotool")):
        missing("Xvfb/xdotool not installed (apt-get install xvfb xdotool)")
    try:
        import tkinter  # noqa: F401
    except ImportError:
        missing("tkinter is not installed (apt-get install python3-tk)")


ENV = DesktopEnvironment()


@pytest.fixture
async def launcher(tmp_path):
    la = LocalLauncher(base_dir=tmp_path / "sbx")
    yield la
    await la.aclose()


async def _run(launcher, task, cmds):
    sbx = await launcher.start(SandboxSpec(rollout_id=f"d-{task.id}", task=task, proxy_url="", api_key="k",
                                           hidden_paths=ENV.hidden_paths(task)))
    try:
        await ENV.setup(task, sbx)
        for c in cmds:
            r = await sbx.exec(["sh", "-c", c], env=ENV.harness_env(task, sbx), timeout_s=60)
            assert r.returncode == 0, (c, r.stderr)
        return await ENV.verify(task, sbx)
    finally:
        await ENV.teardown(task, sbx)
        await sbx.close()


def test_inventory():
    assert isinstance(make_environment("desktop"), DesktopEnvironment)
    assert len(ENV.tasks()) >= 6 and ENV.tasks("eval") and ENV.tasks("easy")


@pytest.mark.parametrize("task_id", sorted(t.id for t in ENV.tasks()))
async def test_reference_passes_and_nothing_fails(launcher, task_id):
    task = ENV.task(task_id)
    good = await _run(launcher, task, ENV.reference_solution(task))
    assert good.reward == 1.0, good
    bad = await _run(launcher, task, [])
    assert bad.reward == 0.0 and "never saved" in bad.detail


async def test_verify_first_lets_the_app_handle_input_already_sent(launcher):
    """The agent's last key press may still wait in the app's queue when its command returns (a loaded
    machine): the verifier lets the app handle it before reading the state. Here the app is stopped
    while the keys are sent and resumes only after the verifier has begun."""
    task = ENV.task("counter-three")
    sbx = await launcher.start(SandboxSpec(rollout_id="d-settle", task=task, proxy_url="", api_key="k",
                                           hidden_paths=ENV.hidden_paths(task)))
    try:
        await ENV.setup(task, sbx)
        env = ENV.harness_env(task, sbx)
        focus = "xdotool search --sync --name 'openforge counter' windowfocus --sync"
        assert (await sbx.exec(["sh", "-c", focus], env=env, timeout_s=60)).returncode == 0
        app = ENV._live[id(sbx)].app
        os.kill(app.pid, signal.SIGSTOP)
        try:
            r = await sbx.exec(["sh", "-c", "xdotool key plus plus plus && xdotool key Return"], env=env, timeout_s=60)
            assert r.returncode == 0, r.stderr
            asyncio.get_running_loop().call_later(1.0, os.kill, app.pid, signal.SIGCONT)
            res = await ENV.verify(task, sbx)
        finally:
            os.kill(app.pid, signal.SIGCONT)
        assert res.reward == 1.0, res
    finally:
        await ENV.teardown(task, sbx)
        await sbx.close()


async def test_wrong_input_fails_and_screenshot_works_from_inside(launcher):
    task = ENV.task("counter-three")
    res = await _run(launcher, task, ["xdotool search --sync --name 'openforge counter' windowfocus --sync",
                                      "xdotool key plus plus", "xdotool key Return",
                                      "xdotool getdisplaygeometry | grep -q '1024 768'"])
    assert res.reward == 0.0 and res.rewards == {"count": 0.0, "done": 1.0}


async def test_computer_use_harness_solves_a_desktop_task(tmp_path):
    """The real computer-use harness (screenshots over the forwarded X socket, xdotool keys) with a
    scripted policy, through run_rollout and the real proxy."""
    from openforge.harnesses.computer_use import ComputerUseHarness
    from openforge.runner.rollout import run_rollout

    harness = ComputerUseHarness()
    if not harness.is_installed():
        missing(harness.describe()["detail"])
    from openforge.proxy.backends.scripted import ScriptedBackend
    from openforge.proxy.server import ProxyServer

    tok = smollm2_tokenizer()
    key = [{"tool": {"name": "computer", "arguments": {"action": "key", "text": k}}} for k in ("plus",) * 3 + ("Return",)]
    turns = [{"tool": {"name": "computer", "arguments": {"action": "screenshot"}}}, *key, {"text": "Done."}]
    la = LocalLauncher(base_dir=tmp_path / "sbx")
    async with ProxyServer(ScriptedBackend({"turns": turns}, tokenizer=tok), uds=str(tmp_path / "p.sock")) as proxy:
        traj = await run_rollout(harness=harness, environment=ENV, task=ENV.task("counter-three"), launcher=la,
                                 proxy=proxy)
    await la.aclose()
    assert traj.status.value == "success" and traj.reward == 1.0, (traj.error, traj.metadata.get("harness_stderr"))
    shot = traj.calls[1].request["messages"][-1]["content"][0]
    assert shot["type"] == "tool_result" and any(c.get("type") == "image" for c in shot["content"])
