"""The verifier's edge of the trust boundary, played by an agent: it leaves files in its workdir that
a verifier would run, import, follow or load (a repository's ``core.fsmonitor``, a rewritten test, a
``json.py`` / ``sitecustomize.py`` next to the verifier's cwd with an empty ``PYTHONPATH`` entry, a
fake ``python3`` on an empty ``PATH`` entry, a symlink to a driver-only file, a workdir swapped for a
symlink, a file that makes the verifier blow up its memory) and then the real
:meth:`TaskDirEnvironment.verify` runs. Nothing may run on the host as the driver, no host file may
reach the verdict, and no such file may raise the reward.

The agent's actions are real: commands run in the rollout's own sandbox (``sandbox.exec``), as the
harness's shell tool would run them. The example tasks are the shipped ones (``examples/tasks``)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from openforge.core.errors import AgentOutputError, EnvironmentError_
from openforge.envs.taskdir import TaskDirEnvironment
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
async def launcher(tmp_path):
    la = LocalLauncher(base_dir=tmp_path / "sbx")
    if la.isolation != "bwrap":  # pragma: no cover - auto refuses without bwrap
        pytest.skip("needs the bwrap sandbox")
    yield la
    await la.aclose()


@pytest.fixture
def private(tmp_path):
    """A driver-only place outside /tmp (which every sandbox masks): ``REPO/.pytest-security/ID``."""
    d = REPO / ".pytest-security" / f"verif-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    d.chmod(0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


async def attack(env: TaskDirEnvironment, task_id: str, launcher: LocalLauncher, agent: str, *,
                 setup: bool = True):
    """Set the task up, run ``agent`` (a shell script) as the agent in its sandbox, then verify."""
    task = env.task(task_id)
    sbx = await launcher.start(SandboxSpec(rollout_id=f"hv-{task_id}", task=task, proxy_url="", api_key="k",
                                           hidden_paths=env.hidden_paths(task)))
    try:
        if setup:
            await env.setup(task, sbx)
        r = await sbx.exec(["bash", "-c", agent], env=env.harness_env(task, sbx), timeout_s=60)
        assert r.returncode == 0, r.stderr
        return await env.verify(task, sbx)
    finally:
        await env.teardown(task, sbx)
        await sbx.close()


@pytest.fixture
def examples(tmp_path):
    return TaskDirEnvironment(EXAMPLES, log_dir=tmp_path / "logs")


# -- git-bugfix: the repository's config and the test are the agent's ----------------------------

async def test_fsmonitor_in_the_agents_repo_runs_nothing_on_the_host(examples, launcher):
    """``core.fsmonitor`` in calc/.git/config: any ``git status`` in that repository runs it."""
    marker = Path(f"/tmp/openforge-pwned-{uuid.uuid4().hex[:8]}")
    agent = f"""cd calc
git config core.fsmonitor 'id -u > {marker}; echo'
git commit -q --allow-empty -m 'fix: nothing at all'
"""
    try:
        res = await attack(examples, "git-bugfix", launcher, agent)
        assert not marker.exists(), f"the agent's fsmonitor ran on the host as uid {marker.read_text().strip()}"
        assert res.reward == 0.0, res
    finally:
        marker.unlink(missing_ok=True)


async def test_rewritten_test_does_not_pass_an_unfixed_bug(examples, launcher):
    agent = """cd calc
printf 'print("ok")\\n' > test_stats.py
git commit -q -am 'fix: the test'
"""
    res = await attack(examples, "git-bugfix", launcher, agent)
    assert res.reward == 0.0, res


async def test_stats_that_exits_early_does_not_pass(examples, launcher):
    """The agent's stats.py runs (it is what is tested): printing "ok" and exiting is not a fix."""
    agent = """cd calc
printf 'import os\\nprint("ok")\\nos._exit(0)\\n' > stats.py
git commit -q -am 'fix: exit early'
"""
    res = await attack(examples, "git-bugfix", launcher, agent)
    assert res.reward == 0.0, res


async def test_fake_python3_on_an_empty_path_entry(examples, launcher, monkeypatch):
    """The driver's PATH starts with an empty entry (= the cwd); the agent commits an executable
    ``python3`` that exits 0, so the unfixed test would "pass"."""
    monkeypatch.setenv("PATH", ":" + os.environ["PATH"])
    agent = """cd calc
printf '#!/bin/sh\\necho ok\\nexit 0\\n' > python3 && chmod +x python3
git add python3 && git commit -q -m 'fix: a better python'
"""
    res = await attack(examples, "git-bugfix", launcher, agent)
    assert res.reward == 0.0, res


# -- inventory-setup: Python imports from the agent's workdir ------------------------------------

SHADOWS = {
    "json.py": "def dumps(*a, **k):\n    return '{\"reward\": 1.0}'\n",
    "sitecustomize.py": "import atexit\natexit.register(lambda: print('{\"reward\": 1.0}'))\n",
}


@pytest.mark.parametrize("name", sorted(SHADOWS))
async def test_shadowing_module_with_an_empty_pythonpath_entry(examples, launcher, monkeypatch, name):
    """``export PYTHONPATH=$PYTHONPATH:/x`` with an empty PYTHONPATH leaves an empty entry (= the cwd)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep + "/nonexistent")
    body = SHADOWS[name].replace("'", "'\"'\"'")
    res = await attack(examples, "inventory-setup", launcher, f"printf '%s' '{body}' > {name}")
    assert res.reward == 0.0, res


# -- log-report: a link to a driver-only file -----------------------------------------------------

SECRET = "DRIVER-ONLY-SECRET-{}"


async def test_symlink_to_a_driver_only_file_stays_out_of_the_verdict(examples, launcher, private):
    secret = SECRET.format(uuid.uuid4().hex[:8])
    f = private / "credentials"
    f.write_text(f"# Error summary\n- {secret}\n## Total: 0\n")
    f.chmod(0o600)
    res = await attack(examples, "log-report", launcher, f"mkdir -p report && ln -s {f} report/summary.md")
    assert secret not in (res.detail or "") and secret not in res.model_dump_json(), res.detail
    assert res.reward == 0.0


async def test_workdir_swapped_for_a_symlink_is_not_followed(examples, launcher, private):
    """The agent owns its rollout directory: it renames its workdir and puts a link to a directory
    under a driver-only parent in its place (readable files, a parent the agent cannot enter)."""
    secret = SECRET.format(uuid.uuid4().hex[:8])
    data = private / "data"
    (data / "report").mkdir(parents=True)
    (data / "report" / "summary.md").write_text(f"# Error summary\n- {secret}\n## Total: 0\n")
    for p in (data, data / "report"):
        p.chmod(0o755)
    agent = f"w=$PWD; cd ..; mv \"$w\" \"$w.old\"; ln -s {data} \"$w\""
    res = await attack(examples, "log-report", launcher, agent)
    assert secret not in res.model_dump_json(), res.detail
    assert res.reward == 0.0


# -- a verifier's memory is bounded ------------------------------------------------------------------

def _task_dir(root: Path, name: str, verify_py: str, toml: str = "") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "task.toml").write_text(f'split = "train"\n{toml}')
    (d / "instruction.md").write_text("Do something.\n")
    (d / "verify.py").write_text(verify_py)
    return d


async def test_memory_bomb_is_stopped_by_the_verifiers_limit(tmp_path, launcher):
    """A sparse file the agent made (no disk used) is read whole by a naive verifier: it is stopped at
    the task's memory limit (an ``env_error``), not allowed to grow on the host."""
    d = _task_dir(tmp_path / "tasks", "bomb", "import json\ndata = open('big.bin', 'rb').read()\n"
                  "print(json.dumps({'reward': 1.0, 'detail': str(len(data))}))\n",
                  "[resources]\nmemory_mb = 128\n")
    env = TaskDirEnvironment(d)
    with pytest.raises(EnvironmentError_, match="verifier of bomb"):
        await attack(env, "bomb", launcher, "truncate -s 600M big.bin")


# -- the verifier's own view -----------------------------------------------------------------------

VIEW_PY = """
import json, os, sys
def can_write(p):
    try:
        open(p, "w").close()
        return True
    except OSError:
        return False
print(json.dumps({"reward": 0.0, "uid": os.getuid(), "cwd": os.getcwd(), "path": os.environ["PATH"],
                  "pythonpath": os.environ.get("PYTHONPATH"), "home": os.environ["HOME"],
                  "git_global": os.environ.get("GIT_CONFIG_GLOBAL"), "secret_env": os.environ.get("OPENAI_API_KEY"),
                  "write_workdir": can_write("x.txt"), "write_task": can_write(os.environ["OPENFORGE_TASK_DIR"] + "/x"),
                  "sys_path": sys.path, "task_dir": os.environ["OPENFORGE_TASK_DIR"]}))
"""


async def test_the_verifier_runs_unprivileged_with_a_clean_environment(tmp_path, launcher, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-driver-secret")
    monkeypatch.setenv("PYTHONPATH", os.pathsep + "/nonexistent")
    d = _task_dir(tmp_path / "tasks", "view", VIEW_PY)
    env = TaskDirEnvironment(d)
    res = await attack(env, "view", launcher, "true")
    m = res.metadata
    if os.geteuid() == 0:
        assert m["uid"] == 65534, "a root driver's verifier runs as nobody"
    assert m["secret_env"] is None and m["pythonpath"] is None and m["git_global"] == "/dev/null"
    assert m["path"].split(":")[0] == os.path.dirname(sys.executable) and "" not in m["path"].split(":")
    assert not m["write_workdir"] and not m["write_task"], "workdir and task dir are read-only"
    assert m["task_dir"] == str(d) and "" not in m["sys_path"] and m["cwd"] not in m["sys_path"]


async def test_verify_on_host_copies_the_workdir_as_data(tmp_path, launcher, private, monkeypatch):
    """The opt-in host verifier: a copy without links, FIFOs or the agent's modules on its path, and
    never the copy as its cwd."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep + "/nonexistent")
    secret = SECRET.format(uuid.uuid4().hex[:8])
    (private / "key").write_text(secret)
    d = _task_dir(tmp_path / "tasks", "onhost", """
import json, os, pathlib, sys
w = pathlib.Path(os.environ["OPENFORGE_WORKDIR"])
print(json.dumps({"reward": float((w / "out.txt").read_text().strip() == "42"),
                  "cwd_is_copy": os.getcwd() == str(w), "names": sorted(p.name for p in w.iterdir()),
                  "link": (w / "link").read_text() if (w / "link").exists() else None}))
""", "verify_on_host = true\n")
    env = TaskDirEnvironment(d)
    agent = (f"echo 42 > out.txt; ln -s {private / 'key'} link; mkfifo pipe; "
             "printf 'def dumps(*a, **k):\\n    return 1\\n' > json.py")
    res = await attack(env, "onhost", launcher, agent)
    m = res.metadata
    assert res.reward == 1.0 and not m["cwd_is_copy"] and m["link"] is None
    assert m["names"] == ["json.py", "out.txt"], "links and FIFOs are left out of the copy"


# -- end to end: a naive verifier, through `forge rollout` ----------------------------------------

NAIVE_VERIFY_SH = """cd calc || exit 1
git -c safe.directory=* status --porcelain >/dev/null
echo '{"reward": 0.0}'
"""


def test_naive_git_verifier_through_forge_rollout_runs_nothing_on_the_host(tmp_path):
    """A verifier written like the old git-bugfix one (``git status`` in the agent's repository), the
    agent's commands replayed by the real harness through the real proxy (``--reference`` replays
    solution.sh as one shell-tool call): the agent's ``core.fsmonitor`` runs, if at all, inside the
    verifier's sandbox, never on the host."""
    import json
    import subprocess

    marker = Path(f"/tmp/openforge-pwned-{uuid.uuid4().hex[:8]}")
    d = tmp_path / "tasks" / "naive-git"
    d.mkdir(parents=True)
    (d / "task.toml").write_text('split = "train"\n')
    (d / "instruction.md").write_text("Make a repository in calc/.\n")
    (d / "verify.sh").write_text(NAIVE_VERIFY_SH)
    (d / "solution.sh").write_text(f"mkdir calc && cd calc && git init -q . && "
                                   f"git config core.fsmonitor 'id -u > {marker}; echo'\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        p = subprocess.run([sys.executable, "-m", "openforge.cli.main", "rollout", "--env", str(d.parent), "--task",
                            "naive-git", "--reference", "-o", str(out)], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=280)
        assert not marker.exists(), f"the agent's fsmonitor ran on the host as uid {marker.read_text().strip()}"
        # 4: `--reference` whose reference solution does not succeed (here on purpose: the verifier finds no fix)
        assert p.returncode in (0, 1, 4), p.stdout[-2000:] + p.stderr[-2000:]
        traj = json.loads((out / "trajectory.json").read_text())
        assert traj["reward"] == 0.0 and traj["status"] != "success", traj["status"]
    finally:
        marker.unlink(missing_ok=True)


# -- claw: the built-in verifiers read the workdir from the driver -----------------------------------

async def _claw(launcher, task_id: str, agent: str, *, rid: str = "claw", after=None):
    from openforge.envs.claw import ClawEnvironment

    env = ClawEnvironment()
    task = env.task(task_id)
    sbx = await launcher.start(SandboxSpec(rollout_id=rid, task=task, proxy_url="", api_key="k",
                                           hidden_paths=env.hidden_paths(task)))
    try:
        await env.setup(task, sbx)
        r = await sbx.exec(["bash", "-c", agent], env=env.harness_env(task, sbx), timeout_s=60)
        assert r.returncode == 0, r.stderr
        res = await (after(env, task, sbx) if after else env.verify(task, sbx))
        return res, sbx
    finally:
        await env.teardown(task, sbx)
        await sbx.close()


async def test_claw_workdir_swapped_for_another_rollouts_is_not_credited(launcher):
    """Rollout B solved the task; rollout A replaces its own workdir by a link to B's (its path is
    no secret) and would be scored on B's work."""
    from openforge.envs.claw import ClawEnvironment

    env = ClawEnvironment()
    task = env.task("files-create-hello")
    victim = await launcher.start(SandboxSpec(rollout_id="victim", task=task, proxy_url="", api_key="k"))
    try:
        await env.setup(task, victim)
        assert (await victim.exec(["bash", "-c", env.reference_solution(task)[0]])).returncode == 0
        assert (await env.verify(task, victim)).reward == 1.0
        agent = f'w=$PWD; cd ..; mv "$w" "$w.old"; ln -s {victim.workdir} "$w"'
        res, _ = await _claw(launcher, "files-create-hello", agent, rid="thief")
        assert res.reward == 0.0, res
    finally:
        await victim.close()


async def test_claw_file_check_reads_a_bounded_amount(launcher):
    """A 200 MB sparse file where the check looks: the driver reads at most MAX_READ_BYTES of it."""
    import tracemalloc

    async def measured(env, task, sbx):
        tracemalloc.start()
        try:
            res = await env.verify(task, sbx)
            return res, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    (res, peak), _ = await _claw(launcher, "files-create-hello", "truncate -s 200M hello.txt", after=measured)
    assert res.reward == 0.0 and peak < 32 << 20, f"the verifier held {peak >> 20} MB"


async def test_claw_git_check_does_not_run_the_repos_fsmonitor(launcher):
    """The claw git checks run ``git status`` in the agent's (now idle) sandbox: the repository's
    ``core.fsmonitor`` must not run there either (it could change what is being checked)."""
    agent = ("cd project && git init -q && git add -A && git commit -qm initial && "
             "git config core.fsmonitor \"touch $PWD/../fsmonitor-ran; echo\"")

    async def look(env, task, sbx):
        res = await env.verify(task, sbx)
        return res, (sbx.workdir / "fsmonitor-ran").exists()

    (res, ran), _ = await _claw(launcher, "git-init-commit", agent, after=look)
    assert not ran, "the agent's fsmonitor ran during verification"
    assert res.reward == 1.0, res  # the task itself was done: still scored as done


@pytest.mark.parametrize("mode", ["unshare", "none"])
def test_weak_modes_say_what_the_verifier_gives_up(tmp_path, caplog, mode):
    from openforge.launchers._isolation import detect_isolation
    from openforge.launchers._verifier import VERIFIER_WEAK_MODE_RISKS

    if mode == "unshare" and detect_isolation()[0] == "none":
        pytest.skip("unshare is not available here")
    with caplog.at_level("WARNING", logger="openforge.launchers.local"):
        LocalLauncher(base_dir=tmp_path / "sbx", isolation=mode)
    assert VERIFIER_WEAK_MODE_RISKS[mode] in caplog.text and "Verifiers lose their sandbox too" in caplog.text


# -- the same attacks with the driver as a normal user ---------------------------------------------

def test_normal_user_driver_verifier_reads_no_driver_file_and_runs_nothing(tmp_path):
    """As a normal user the verifier's sandbox runs as the driver's own uid (in a user namespace), so
    a driver-only file is readable by uid: it must simply not be in the verifier's view."""
    import json
    import subprocess
    import sysconfig

    from .test_sandbox_escapes import TEST_UID, _user_python

    if os.geteuid() != 0:
        pytest.skip("switching to a normal user needs root")
    py = _user_python()
    if py is None or shutil.which("setpriv") is None:
        pytest.skip("no system Python of this version or no setpriv to run a non-root driver")
    work = REPO / ".pytest-security" / f"vsc-{uuid.uuid4().hex[:8]}"
    home = work / "home"
    home.mkdir(parents=True)
    secret = SECRET.format(uuid.uuid4().hex[:8])
    (home / ".secret-credentials").write_text(f"# Error summary\n- {secret}\n## Total: 0\n")
    try:
        for p in [work, *work.rglob("*")]:
            os.chown(p, TEST_UID, TEST_UID)
        (home / ".secret-credentials").chmod(0o600)
        env = {**os.environ, "HOME": str(home),
               "PYTHONPATH": os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])}
        user = ["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}", "--clear-groups", py]
        probe = subprocess.run([*user, "-c", "import openforge"], env=env, capture_output=True, text=True)
        if probe.returncode != 0:
            pytest.skip(f"this checkout or venv is not readable by a normal user: {probe.stderr.strip()[-300:]}")
        r = subprocess.run([*user, str(Path(__file__).with_name("_verifier_scenario.py")), "--work", str(work)],
                           env=env, capture_output=True, text=True, timeout=280, cwd=str(work))
        assert r.returncode == 0, r.stderr[-3000:]
        rep = json.loads(r.stdout.strip().splitlines()[-1])
        assert rep["driver_uid"] == TEST_UID and rep["isolation"] == "bwrap" and secret in rep["secret"]
        assert secret not in rep["link"]["verdict"] and rep["link"]["reward"] == 0.0, rep["link"]
        assert rep["marker"] is None, f"the agent's fsmonitor ran on the host as uid {rep['marker']}"
        assert rep["fsmonitor"]["reward"] == 0.0, rep["fsmonitor"]
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="a root driver's verifier runs as nobody")
async def test_a_task_dir_nobody_can_read_is_a_clear_error(tmp_path, launcher):
    d = _task_dir(tmp_path / "tasks", "private", "print('{\"reward\": 1.0}')\n")
    (d / "verify.py").chmod(0o600)
    env = TaskDirEnvironment(d)
    with pytest.raises(EnvironmentError_, match=r"runs as uid nobody .* chmod -R a\+rX"):
        await attack(env, "private", launcher, "true")


# -- a workdir that would hang the verifier: a policy failure, not an env_error ----------------------

@pytest.mark.parametrize("task_id, agent", [
    ("git-bugfix", "cd calc && printf 'while True:\\n    pass\\n' > stats.py && git commit -q -am 'fix: spin'"),
    ("git-bugfix", "cd calc && git rm -q stats.py && git commit -q -m 'fix: a pipe' && mkfifo stats.py "
                   "&& echo stats.py >> .git/info/exclude"),
    ("sqlite-sales", "rm shop.db && mkfifo shop.db"),
])
async def test_a_hanging_workdir_scores_zero_instead_of_timing_out(examples, launcher, task_id, agent):
    """An agent that could make its verifier time out would turn its failure into an env_error (never
    trained): the examples bound what they run or open from the workdir."""
    res = await attack(examples, task_id, launcher, agent)
    assert res.reward == 0.0, res


@pytest.mark.parametrize("agent", [
    "printf 'not a database' > shop.db",
    "sqlite3 shop.db 'CREATE TABLE customer_totals(name TEXT, amount REAL)'",  # the table, wrong columns
])
async def test_an_unusable_database_is_the_agents_failure(examples, launcher, agent):
    """sqlite-sales on a shop.db the agent made unreadable, or a customer_totals the query cannot read: the
    verifier exits 3 (the agent's output is unusable: policy_failure, trained), not a crash (env_error)."""
    with pytest.raises(AgentOutputError, match="exit 3"):
        await attack(examples, "sqlite-sales", launcher, agent)


@pytest.mark.parametrize("labels", ["5", '[["bug"]]', '"bug"', "null"])
async def test_ticket_labels_of_the_wrong_type_score_zero_not_a_crash(examples, launcher, labels):
    """ticket-triage: the tickets service refuses labels that are not a list of strings (as a real API
    would), so the verifier never meets them: a PATCH with labels 5 scores 0, never an env_error."""
    agent = ("python3 -c \"import os, urllib.request as u; r = u.Request(os.environ['TICKETS_URL'] + '/tickets/1', "
             f"data=b'{{\\\"labels\\\": {labels}}}', method='PATCH', headers={{'Content-Type': 'application/json'}}); "
             "import urllib.error\ntry: u.urlopen(r, timeout=10)\nexcept urllib.error.HTTPError as e: print(e.code)\"")
    res = await attack(examples, "ticket-triage", launcher, agent)
    assert res.reward == 0.0, res


async def test_a_reply_whose_body_is_not_text_scores_zero_not_a_crash(examples, launcher):
    """mail-reply: the mail service refuses a message whose body is not a string (as a real API would), so
    the verifier never meets one: a reply with body 5 scores 0, never an env_error."""
    msg = '{"to": "alice@example.com", "in_reply_to": "m2", "subject": "Re", "body": 5}'
    agent = ("python3 -c \"import os, sys, urllib.request as u, urllib.error as e\n"
             "r = u.Request(os.environ['MAIL_URL'] + '/send', data=sys.argv[1].encode(), method='POST', "
             "headers={'Content-Type': 'application/json'})\n"
             "try: u.urlopen(r, timeout=10)\nexcept e.HTTPError as x: print(x.code)\" " + shlex.quote(msg))
    res = await attack(examples, "mail-reply", launcher, agent)
    assert res.reward == 0.0, res


async def test_verify_on_host_copy_survives_any_directory_depth(tmp_path, launcher):
    """Nested directories deeper than PATH_MAX (made with relative ``chdir``s): the host copy stops at
    its depth limit instead of failing on them. (200 levels: the launcher's own cleanup of far deeper
    trees is another matter.)"""
    d = _task_dir(tmp_path / "tasks", "deep", """
import json, os
w = os.environ["OPENFORGE_WORKDIR"]
print(json.dumps({"reward": float(open(os.path.join(w, "out.txt")).read().strip() == "42")}))
""", "verify_on_host = true\n")
    env = TaskDirEnvironment(d)
    agent = ("echo 42 > out.txt; python3 -c \"import os\nfor _ in range(200): os.mkdir('d' * 60); os.chdir('d' * 60)\"")
    res = await attack(env, "deep", launcher, agent)
    assert res.reward == 1.0, res
