"""Task directories: loading, clear errors, setup + verify.py/verify.sh on the host, hidden from the agent."""

from __future__ import annotations

import textwrap

import pytest

from openforge.envs.taskdir import TaskDirEnvironment
from openforge.errors import ConfigError, EnvironmentError_
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.plugins import make_environment


def make_task(root, name, *, verify_py=None, verify_sh=None, toml='split = "train"\ncategory = "files"\n'):
    d = root / name
    (d / "setup").mkdir(parents=True)
    (d / "task.toml").write_text(toml)
    (d / "instruction.md").write_text("Double the number in n.txt and write it to out.txt.\n")
    (d / "setup" / "n.txt").write_text("21\n")
    (d / "solution.sh").write_text("# reference\necho $(( $(cat n.txt) * 2 )) > out.txt\n")
    (d / "setup.sh").write_text("echo seeded > seeded.txt\n")
    if verify_py:
        (d / "verify.py").write_text(textwrap.dedent(verify_py))
    if verify_sh:
        (d / "verify.sh").write_text(verify_sh)
    return d


VERIFY_PY = """
    import json, os, pathlib, sys
    w = pathlib.Path(sys.argv[1])
    ok = (w / "out.txt").exists() and (w / "out.txt").read_text().strip() == "42"
    print(json.dumps({"reward": float(ok), "rewards": {"doubled": float(ok), "seeded": float((w / "seeded.txt").exists())}}))
"""


@pytest.fixture
async def launcher(tmp_path):
    la = LocalLauncher(base_dir=tmp_path / "sbx")
    yield la
    await la.aclose()


async def _run(env, task, launcher, cmds):
    sbx = await launcher.start(SandboxSpec(rollout_id="td", task=task, proxy_url="", api_key="k",
                                           hidden_paths=env.hidden_paths(task)))
    try:
        await env.setup(task, sbx)
        for c in cmds:
            r = await sbx.exec(["sh", "-c", c])
            assert r.returncode == 0, r.stderr
        return await env.verify(task, sbx)
    finally:
        await sbx.close()


async def test_folder_of_task_dirs(tmp_path, launcher):
    make_task(tmp_path / "tasks", "double-py", verify_py=VERIFY_PY)
    make_task(tmp_path / "tasks", "double-sh", verify_sh='test "$(cat "$OPENFORGE_WORKDIR/out.txt")" = 42\n',
              toml='split = "eval"\n[resources]\nmemory_mb = 512\n')
    env = make_environment(tmp_path / "tasks")
    assert isinstance(env, TaskDirEnvironment) and env.splits() == {"train": 1, "eval": 1}
    for task in env.tasks():
        sol = env.reference_solution(task)
        assert sol == ["echo $(( $(cat n.txt) * 2 )) > out.txt"]
        good = await _run(env, task, launcher, sol)
        bad = await _run(env, task, launcher, ["echo 41 > out.txt"])
        assert good.reward == 1.0 and bad.reward == 0.0, (task.id, good, bad)
    assert (await _run(env, env.task("double-py"), launcher, [])).rewards == {"doubled": 0.0, "seeded": 1.0}


async def test_task_dir_is_hidden_from_the_agent(tmp_path, launcher):
    d = make_task(tmp_path / "tasks", "t1", verify_py=VERIFY_PY)
    env = TaskDirEnvironment(d)
    res = await _run(env, env.tasks()[0], launcher, [f"cat {d}/verify.py > leaked.txt || true",
                                                     "test ! -s leaked.txt || echo 42 > out.txt"])
    if launcher.isolation == "bwrap":
        assert res.reward == 0.0


async def test_crashing_verifier_is_an_env_error(tmp_path, launcher):
    d = make_task(tmp_path / "tasks", "t1", verify_py="import sys\nraise ValueError('bad verifier')\n")
    env = TaskDirEnvironment(d)
    with pytest.raises(EnvironmentError_, match="bad verifier"):
        await _run(env, env.tasks()[0], launcher, [])


@pytest.mark.parametrize("line, what", [
    ('{"reward": NaN}', "reward: Value error, reward must be a finite number, got nan"),
    ('{"reward": Infinity}', "reward: Value error, reward must be a finite number, got inf"),
    ('{"reward": 1.0, "rewards": {"tests": -Infinity}}', "sub-scores must be finite numbers, got {'tests': -inf}"),
])
async def test_non_finite_reward_is_an_env_error(tmp_path, launcher, line, what):
    d = make_task(tmp_path / "tasks", "t1", verify_py=f"print({line!r})\n")
    env = TaskDirEnvironment(d)
    with pytest.raises(EnvironmentError_, match="printed an invalid result line") as e:
        await _run(env, env.tasks()[0], launcher, [])
    assert what in str(e.value)


def test_bad_task_dirs_list_every_problem(tmp_path):
    d = tmp_path / "broken"
    d.mkdir()
    (d / "task.toml").write_text("split = 'sometimes'\ntimeout_s = 'soon'\n")
    with pytest.raises(ConfigError) as e:
        TaskDirEnvironment(d)
    text = str(e.value)
    assert "instruction.md: missing" in text and "needs a verify.py or verify.sh" in text
    (d / "instruction.md").write_text("x")
    (d / "verify.sh").write_text("true")
    with pytest.raises(ConfigError) as e:
        TaskDirEnvironment(d)
    assert "split" in str(e.value) and "timeout_s" in str(e.value)
    with pytest.raises(ConfigError, match="no task directories"):
        (tmp_path / "empty").mkdir()
        TaskDirEnvironment(tmp_path / "empty")
