"""A harness's agent files (``Harness.agent_files``): the Python files next to the harness's module
are visible in the sandbox by default — and nothing else of the folder, so a harness module at the
project root shows its ``agent.py`` but never the checkout's ``.env``, ``runs/`` (stores, SFT teacher
data), task folders or caches. Explicit lists, missing entries, the framework's own harnesses and a
harness module inside a hidden folder are covered too."""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from pathlib import Path

import pytest

from openforge.core.types import RolloutStatus as S
from openforge.envs.taskdir import TaskDirEnvironment
from openforge.harness import Harness
from openforge.harnesses.react import ReactHarness
from openforge.launchers._bwrap import probe_bwrap
from openforge.launchers.local import LocalLauncher
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.runner.session import Session

REPO = Path(__file__).resolve().parents[2]

HARNESS = '''
import sys
from pathlib import Path
from openforge.harness import Harness, HarnessResult

SEEN = {}

class RootHarness(Harness):
    name = "root-harness"

    async def run(self, ctx):
        res = await ctx.exec([sys.executable, str(Path(__file__).with_name("agent.py"))])
        SEEN["stdout"], SEEN["stderr"] = res.stdout, res.stderr
        return HarnessResult.from_exec(res, harness=self.name)
'''

AGENT = '''
import json, os
PROJ = os.path.dirname(os.path.abspath(__file__))
def read(rel):
    path = os.path.join(PROJ, rel)
    try:
        if os.path.isdir(path):
            return "listed " + ",".join(sorted(os.listdir(path)))
        with open(path, "rb") as f:
            return "read " + f.read(40).decode(errors="replace")
    except OSError as e:
        return "denied " + str(e.strerror)
print(json.dumps({rel: read(rel) for rel in [
    "helper.py", ".env", "secrets.json", "runs/r1/trajectories.db", "runs/r1/sft/teacher.jsonl",
    "runs/old/trajectories.db", "tasks/log-report/verify.py", "tasks/git-bugfix/solution.sh",
    ".openforge-cache/models/m/weights.bin", "sub/inner.py", "."]}))
'''


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _project(root: Path) -> Path:
    """A checkout whose root holds the harness module, its agent, and everything an agent must not read."""
    proj = root / "proj"
    files = {"my_harness.py": HARNESS, "agent.py": AGENT, "helper.py": "HELPER = 1\n",
             ".env": "OPENAI_API_KEY=sk-DOTENV-SECRET", "secrets.json": '{"token": "SECRET"}',
             "runs/r1/sft/teacher.jsonl": '{"reference": "SFT-ANSWER"}', "runs/old/trajectories.db": "OLD-RUN",
             ".openforge-cache/models/m/weights.bin": "WEIGHTS", "sub/inner.py": "INNER = 1\n"}
    for rel, text in files.items():
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text(text)
    (proj / "link.py").symlink_to(proj / ".env")
    import shutil

    for name in ("log-report", "git-bugfix"):
        shutil.copytree(REPO / "examples" / "tasks" / name, proj / "tasks" / name)
    for p in [proj, *proj.rglob("*")]:  # readable by all: only the sandbox's view protects them
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    return proj


def test_default_is_the_python_files_next_to_the_module(tmp_path):
    proj = _project(tmp_path)
    mod = _load(proj / "my_harness.py", f"my_harness_{uuid.uuid4().hex[:6]}")
    paths = mod.RootHarness().agent_paths()
    assert paths == [str(proj / n) for n in ("agent.py", "helper.py", "my_harness.py")]  # no link.py, no sub/


def test_explicit_agent_files_and_a_missing_one(tmp_path):
    (tmp_path / "prompt.txt").write_text("be brief")

    class Listed(Harness):
        agent_files = (str(tmp_path / "prompt.txt"),)

        async def run(self, ctx):  # pragma: no cover - not run
            raise AssertionError

    class Nothing(Listed):
        agent_files = ()

    class Missing(Listed):
        agent_files = (str(tmp_path / "prompt.txt"), str(tmp_path / "gone.py"))

    assert Listed().agent_paths() == [str(tmp_path / "prompt.txt")]
    assert Nothing().agent_paths() == []
    Listed().check_agent_files()
    with pytest.raises(Exception, match=r"agent_files names what does not exist: .*gone\.py"):
        Missing().check_agent_files()


async def test_a_missing_listed_agent_file_is_a_harness_error(tmp_path):
    """The rollout says which listed file is missing, as a harness_error, before the harness runs."""
    from openforge.core.task import Task
    from openforge.harness import HarnessResult, RolloutContext

    ran = []

    class Missing(Harness):
        name = "missing-files"
        agent_files = (str(tmp_path / "agent.py"),)

        async def run(self, ctx):
            ran.append(1)
            return HarnessResult()

    ctx = RolloutContext(rollout_id="r", task=Task(id="t", instruction="x"), sandbox=None, api_key="",
                         openai_base_url="", anthropic_base_url="")
    res = await Missing().execute(ctx)
    assert res.status == S.HARNESS_ERROR and str(tmp_path / "agent.py") in res.error and "agent_files" in res.error
    assert ran == []


def test_the_framework_harnesses_add_nothing():
    assert ReactHarness().agent_paths() == [] and ReactHarness().sandbox_paths() == ReactHarness().ro_paths()


def test_a_harness_module_inside_a_hidden_folder_shows_none_of_it(tmp_path):
    """A harness module kept inside a task folder (hidden: its verifier) must not bring the verifier
    back into view as an "agent file"."""
    task = tmp_path / "tasks" / "t1"
    task.mkdir(parents=True)
    (task / "verify.py").write_text("ANSWER = 42\n")
    (task / "my_harness.py").write_text(HARNESS)
    mod = _load(task / "my_harness.py", f"hidden_harness_{uuid.uuid4().hex[:6]}")
    h = mod.RootHarness()
    assert str(task / "verify.py") in h.agent_paths()
    assert h.sandbox_paths(hidden=[str(task)]) == []
    assert h.sandbox_paths(hidden=[str(tmp_path / "tasks")]) == []
    assert str(task / "verify.py") in h.sandbox_paths(hidden=[str(tmp_path / "elsewhere")])


@pytest.mark.skipif(not probe_bwrap().ok, reason="bubblewrap cannot run here")
@pytest.mark.timeout(300)
async def test_a_harness_at_the_project_root_runs_its_agent_and_sees_nothing_else(tmp_path):
    proj = _project(tmp_path)
    mod = _load(proj / "my_harness.py", f"root_harness_{uuid.uuid4().hex[:6]}")
    env = TaskDirEnvironment(proj / "tasks")
    task = env.task("log-report")
    launcher = LocalLauncher(base_dir=tmp_path / "sbx", grace_s=1.0)
    async with Session(ScriptedBackend({"turns": [{"text": "hi"}]}), environment=env, launcher=launcher,
                       harness=mod.RootHarness, store=proj / "runs" / "r1" / "trajectories.db") as session:
        traj = await session.rollout(task)
    assert traj.status != S.HARNESS_ERROR, (traj.error, mod.SEEN)
    reads = json.loads(mod.SEEN["stdout"].strip().splitlines()[-1])
    assert reads["helper.py"] == "read HELPER = 1\n"  # the agent's own files are there, by default
    leaked = {k: v for k, v in reads.items() if k not in ("helper.py", ".") and not v.startswith("denied")}
    assert leaked == {}, leaked
    assert reads["."] == "listed agent.py,helper.py,my_harness.py", reads["."]  # the checkout: only them
