"""Every claw task: its reference solution passes the verifier, doing nothing fails it. Run directly
in real sandboxes (no model), the services reached through the sandbox's loopback forwarder."""

from __future__ import annotations

import asyncio
import sys

import pytest

from openforge.envs.claw import SPECS, ClawEnvironment, reference_solution
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.plugins import make_environment

ENV = ClawEnvironment()


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    launcher = LocalLauncher(base_dir=tmp_path_factory.mktemp("sbx"))
    yield launcher
    asyncio.run(launcher.aclose())


async def _run(launcher, task, commands):
    spec = SandboxSpec(rollout_id=f"claw-{task.id}", task=task, proxy_url="http://127.0.0.1:9", api_key="k",
                       hidden_paths=ENV.hidden_paths(task))
    sbx = await launcher.start(spec)
    try:
        await ENV.setup(task, sbx)
        env = ENV.harness_env(task, sbx)
        for cmd in commands:
            r = await sbx.exec(["sh", "-c", cmd], env=env, timeout_s=60)
            assert r.returncode == 0, f"{task.id}: `{cmd}` failed: {r.stderr or r.stdout}"
        return await ENV.verify(task, sbx)
    finally:
        await ENV.teardown(task, sbx)
        await sbx.close()


def test_task_inventory():
    tasks = ENV.tasks()
    assert len(tasks) >= 40 and len({t.id for t in tasks}) == len(tasks)
    assert ENV.tasks("train") and ENV.tasks("eval") and len(ENV.tasks("easy")) >= 5
    cats = {t.category for t in tasks}
    assert {"files", "shell", "git", "sqlite", "data", "mail", "calendar", "notes", "issues"} <= cats
    assert isinstance(make_environment("claw"), ClawEnvironment)
    assert all(reference_solution(t) for t in tasks)


async def test_reference_solutions_pass_and_doing_nothing_fails(launcher):
    sem = asyncio.Semaphore(4)

    async def both(task):
        async with sem:
            good = await _run(launcher, task, reference_solution(task))
            bad = await _run(launcher, task, [])
        return task.id, good, bad

    results = await asyncio.gather(*(both(t) for t in ENV.tasks()))
    failures = [f"{tid}: reference got {g.reward} ({g.detail})" for tid, g, _ in results if g.reward != 1.0]
    failures += [f"{tid}: doing nothing got {b.reward}" for tid, _, b in results if b.reward != 0.0]
    assert not failures, "\n".join(failures)


async def test_wrong_answers_fail(launcher):
    wrong = {
        "files-create-hello": ["echo 'hello there' > hello.txt"],
        "sqlite-count-active": ["echo 5 > answer.txt"],
        "issues-close": ["curl -sf -X PATCH $CLAW_API/issues/1 -H 'content-type: application/json' -d '{\"state\":\"closed\"}'"],
        "git-branch": ["cd repo && git branch feature/login"],  # created but not switched to
    }
    for tid, cmds in wrong.items():
        res = await _run(launcher, ENV.task(tid), cmds)
        assert res.reward == 0.0 and res.rewards, (tid, res)


async def test_services_speak_mcp_inside_the_sandbox(launcher):
    task = ENV.task("notes-create")
    code = (
        "import asyncio,os,sys\n"
        "from mcp import ClientSession\n"
        "from mcp.client.streamable_http import streamable_http_client\n"
        "async def main():\n"
        "  async with streamable_http_client(os.environ['CLAW_API']+'/mcp') as (r,w,*_):\n"
        "    async with ClientSession(r,w) as s:\n"
        "      await s.initialize()\n"
        "      print(len((await s.list_tools()).tools))\n"
        "      await s.call_tool('notes_create',{'title':'Groceries','body':'milk, eggs'})\n"
        "asyncio.run(main())\n"
    )
    res = await _run(launcher, task, [f"{sys.executable} -c \"{code}\" > tools.txt"])
    assert res.reward == 1.0, res


def test_agent_cannot_read_the_verifiers():
    import openforge.envs.claw as claw

    assert any(claw.__file__.startswith(p) for p in ENV.hidden_paths(ENV.tasks()[0]))
    assert set(SPECS) == {t.id for t in ENV.tasks()}
