"""Task directories: loading, clear errors, setup.sh as a file, solution.sh as one script, verify.py /
verify.sh in a verifier sandbox on the workdir (result line, subscores, metadata), hidden from the
agent. Hostile workdirs: tests/security/test_hostile_verifiers.py."""

from __future__ import annotations

import textwrap

import pytest

from openforge.core.errors import ConfigError, EnvironmentError_
from openforge.envs.taskdir import TaskDirEnvironment, parse_result
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
    """Set up, run each command as one shell-tool call would (``bash -c``), verify, tear down."""
    sbx = await launcher.start(SandboxSpec(rollout_id="td", task=task, proxy_url="", api_key="k",
                                           hidden_paths=env.hidden_paths(task)))
    try:
        await env.setup(task, sbx)
        for c in cmds:
            r = await sbx.exec(["bash", "-c", c], env=env.harness_env(task, sbx))
            assert r.returncode == 0, r.stderr
        return await env.verify(task, sbx)
    finally:
        await env.teardown(task, sbx)
        await sbx.close()


async def test_folder_of_task_dirs(tmp_path, launcher):
    make_task(tmp_path / "tasks", "double-py", verify_py=VERIFY_PY)
    make_task(tmp_path / "tasks", "double-sh", verify_sh='test "$(cat "$OPENFORGE_WORKDIR/out.txt")" = 42\n',
              toml='split = "eval"\nexit_code_reward = true\n[resources]\nmemory_mb = 512\n')
    env = make_environment(tmp_path / "tasks")
    assert isinstance(env, TaskDirEnvironment) and env.splits() == {"train": 1, "eval": 1}
    for task in env.tasks():
        sol = env.reference_solution(task)
        assert sol == ["# reference\necho $(( $(cat n.txt) * 2 )) > out.txt\n"]  # whole: one script
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



# -- scripts are scripts -------------------------------------------------------------------------

SCRIPT = r"""#!/usr/bin/env bash
# a reference solution that needs one shell: variables, cd, a function, a loop, a heredoc, set -e
set -e
dest="$PWD/out"
mkdir -p "$dest"
double() { echo $(( $1 * 2 )); }
cd "$dest"
for i in 1 2 3; do
  double "$i" >> doubled.txt
done
cat > notes.md <<EOF
# heading inside a heredoc
dest was $dest
EOF
cd ..
false || echo "set -e does not stop on a handled failure"
echo $(( $(cat n.txt) * 2 )) > out.txt
"""

SCRIPT_VERIFY = """
    import json, pathlib
    ok = {"out": pathlib.Path("out.txt").read_text().strip() == "42",
          "loop": pathlib.Path("out/doubled.txt").read_text().split() == ["2", "4", "6"],
          "heredoc": pathlib.Path("out/notes.md").read_text().startswith("# heading inside a heredoc\\ndest was /")}
    print(json.dumps({"reward": float(all(ok.values())), "subscores": {k: float(v) for k, v in ok.items()}}))
"""


async def test_solution_sh_runs_as_one_script(tmp_path, launcher):
    d = make_task(tmp_path / "tasks", "script", verify_py=SCRIPT_VERIFY)
    (d / "solution.sh").write_text(SCRIPT)
    env = TaskDirEnvironment(d)
    task = env.tasks()[0]
    sol = env.reference_solution(task)
    assert sol == [SCRIPT], "solution.sh must be kept whole (one shell-tool call), not split into lines"
    res = await _run(env, task, launcher, sol)
    assert res.reward == 1.0 and res.rewards == {"out": 1.0, "loop": 1.0, "heredoc": 1.0}, res


async def test_setup_sh_runs_as_a_file_with_empty_stdin(tmp_path, launcher):
    d = make_task(tmp_path / "tasks", "stdin", verify_py=VERIFY_PY)
    # fed on stdin, `read` would swallow the next line of the script (and `cat` the rest of it)
    (d / "setup.sh").write_text('read -r answer || answer=default\necho "$answer" > seeded.txt\n'
                                'cat > stdin.txt\necho "$0" > script-name.txt\n')
    env = TaskDirEnvironment(d)
    task = env.tasks()[0]
    sbx = await launcher.start(SandboxSpec(rollout_id="td", task=task, proxy_url="", api_key="k"))
    try:
        await env.setup(task, sbx)
        assert (sbx.workdir / "seeded.txt").read_text() == "default\n"
        assert (sbx.workdir / "stdin.txt").read_text() == ""
        script = (sbx.workdir / "script-name.txt").read_text().strip()
        assert script.endswith(".sh"), f"setup.sh must run as a file, ran as {script!r}"
        assert not list(sbx.home.iterdir()), "the setup script is removed before the agent starts"
    finally:
        await sbx.close()


async def test_verifier_runs_in_the_workdir(tmp_path, launcher):
    d = make_task(tmp_path / "tasks", "cwd", verify_py="""
        import json, os, pathlib
        print(json.dumps({"reward": float(pathlib.Path("out.txt").is_file()),
                          "same": os.getcwd() == os.environ["OPENFORGE_WORKDIR"]}))
    """)
    env = TaskDirEnvironment(d)
    res = await _run(env, env.tasks()[0], launcher, ["echo 42 > out.txt"])
    assert res.reward == 1.0 and res.metadata == {"same": True}


@pytest.mark.parametrize(("line", "reward", "rewards", "metadata"), [
    ('{"reward": 0.5, "subscores": {"a": 1, "b": 0}}', 0.5, {"a": 1.0, "b": 0.0}, {}),
    ('{"reward": 1, "rewards": {"a": 1}, "detail": "fine", "checked": 3, "notes": ["x"]}', 1.0, {"a": 1.0},
     {"checked": 3, "notes": ["x"]}),
])
def test_result_line_subscores_and_extra_keys(line, reward, rewards, metadata):
    res = parse_result("t", f"log line\n{line}\n", "", 0)
    assert (res.reward, res.rewards, res.metadata) == (reward, rewards, metadata)


def test_result_line_with_both_sub_score_spellings_is_refused():
    with pytest.raises(EnvironmentError_, match="as 'subscores' or as 'rewards'"):
        parse_result("t", '{"reward": 1, "rewards": {"a": 1}, "subscores": {"a": 0}}', "", 0)


@pytest.mark.parametrize("rc", [0, 1])
def test_a_verifier_that_prints_nothing_is_an_error(rc):
    with pytest.raises(EnvironmentError_, match=r"printed no result line.*exit_code_reward = true"):
        parse_result("t", "", "", rc)
    assert parse_result("t", "", "", rc, exit_code_reward=True).reward == 1.0 - rc


async def test_silent_verifier_through_a_sandbox(tmp_path, launcher):
    d = make_task(tmp_path / "tasks", "silent", verify_sh="exit 0\n")
    env = TaskDirEnvironment(d)
    with pytest.raises(EnvironmentError_, match="printed no result line"):
        await _run(env, env.tasks()[0], launcher, [])
    (d / "task.toml").write_text("exit_code_reward = true\n")
    env = TaskDirEnvironment(d)
    assert (await _run(env, env.tasks()[0], launcher, [])).reward == 1.0


async def test_subgoals_name_the_sub_score_that_measures_them(tmp_path, launcher):
    toml = ('subgoals = [{ text = "Double the number", score = "doubled" }, "Seed the file",\n'
            '            { text = "Something unmeasured", score = "nope" }]\n')
    d = make_task(tmp_path / "tasks", "linked", verify_py=VERIFY_PY, toml=toml)
    env = TaskDirEnvironment(d)
    task = env.tasks()[0]
    assert task.subgoals == ("Double the number", "Seed the file", "Something unmeasured")
    res = await _run(env, task, launcher, ["echo 42 > out.txt"])
    assert res.rewards["subgoal:Double the number"] == 1.0 and res.metadata == {"unreported_subscores": ["nope"]}
    from openforge.analysis.metrics import rollout_behaviour
    from openforge.core.trajectory import Trajectory

    traj = Trajectory(rollout_id="r", task_id=task.id, status="success", reward=1.0, rewards=res.rewards)
    m = rollout_behaviour(traj, task)
    assert m.subgoal_scores == {"Double the number": 1.0} and m.subgoal_completion == pytest.approx(1 / 3)


@pytest.mark.parametrize(("toml", "message"), [
    ("services_x = 1\n", "unknown key 'services_x' in task.toml (did you mean 'services'?); custom data goes under [metadata]"),
    ("author = 'me'\n", "unknown key 'author' in task.toml; custom data goes under [metadata]"),
    ("[metadata]\nservices = ['mail']\n", "[metadata] services is not read; declare each service as a top-level [[services]]"),
    ("[[services]]\nname = 'mail box'\ncommand = 'x'\n", "name must be an identifier"),
    ("[[services]]\nname = 'mail'\n", "'mail' needs a command"),
    ("[[services]]\nname = 'm'\ncommand = 'x'\nready = 'health'\n", "ready must be an HTTP path"),
    ("[[services]]\nname = 'm'\ncommand = 'x'\nport = 3\n", "unknown key 'port' in [[services]]"),
    ("[[services]]\nname = 'm'\ncommand = 'x'\n[[services]]\nname = 'M'\ncommand = 'y'\n", "two services named 'M'"),
    ("subgoals = [{ text = 'a', scores = 'b' }]\n", "subgoals[0] must be a string or a table"),
    ("exit_code_reward = 'yes'\n", "exit_code_reward must be true or false"),
])
def test_task_toml_errors_say_where_things_go(tmp_path, toml, message):
    d = make_task(tmp_path / "tasks", "bad", verify_py=VERIFY_PY, toml=toml)
    with pytest.raises(ConfigError) as e:
        TaskDirEnvironment(d)
    assert message in str(e.value)


def test_every_task_toml_key_is_documented():
    from pathlib import Path

    from openforge.envs.taskdir_format import TASK_TOML_KEYS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "task-format.md").read_text()
    rows = [line.split("|")[1].strip() for line in doc.splitlines() if line.startswith("| `")]
    missing = [k for k in TASK_TOML_KEYS if not {f"`{k}`", f"`[{k}]`", f"`[[{k}]]`"} & set(rows)]
    assert not missing, f"docs/task-format.md does not document {missing}"
    for k in ("`ready`", "`ready_timeout_s`", "$PORT", "$OPENFORGE_SERVICE_DIR", "$OPENFORGE_TASK_DIR", "${NAME}_URL"):
        assert k in doc, k
