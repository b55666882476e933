"""The environment's own code is hidden from the agent (``Environment.source_paths``): its module
file and bytecode, or its package directory, hidden by default and on top of any ``hidden_paths``
override, in every task's view and the run's; never among a harness's default agent files, and a
harness that lists it is refused with an error naming both, before any sandbox exists. (The agent's
side of it, in real sandboxes: ``tests/security/test_environment_code.py``.)"""

from __future__ import annotations

import importlib.util
import py_compile
import sys
import uuid
from pathlib import Path

import pytest

from openforge.core.errors import ConfigError
from openforge.core.types import RolloutStatus as S
from openforge.environment import Environment, Task, VerifyResult, hidden_from_agent
from openforge.envs.taskdir import TaskDirEnvironment
from openforge.faults.env import FaultyEnvironment
from openforge.runner.project_paths import project_paths
from openforge.runner.rollout import run_rollout

REPO = Path(__file__).resolve().parents[2]

ENV = '''
from openforge.environment import Environment, Task, VerifyResult

ANSWER = "ANSWER-KEY-42"

class ProjEnv(Environment):
    def tasks(self, split=None):
        return [Task(id="t1", instruction="guess"), Task(id="t2", instruction="guess")]

    async def verify(self, task, sandbox):
        return VerifyResult(reward=0.0)

class OwnHidden(ProjEnv):
    def hidden_paths(self, task):
        return []
'''

HARNESS = '''
from openforge.harness import Harness, HarnessResult

class ProjHarness(Harness):
    name = "proj-harness"

    async def run(self, ctx):
        return HarnessResult()

class ListsEnv(ProjHarness):
    agent_files = ("agent.py", "env.py")

class ListsFolder(ProjHarness):
    agent_files = (".",)

class ListsAgent(ProjHarness):
    agent_files = ("agent.py",)
'''


def _load(path: Path):
    name = f"{path.stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=[str(path.parent)]
                                                  if path.name == "__init__.py" else None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def proj(tmp_path):
    """``proj/harness.py``, ``proj/agent.py`` and ``proj/env.py`` side by side (``env.py`` compiled)."""
    p = tmp_path / "proj"
    p.mkdir()
    for name, text in (("harness.py", HARNESS), ("agent.py", "print('hi')\n"), ("env.py", ENV)):
        (p / name).write_text(text)
    py_compile.compile(str(p / "env.py"))
    return p, _load(p / "env.py"), _load(p / "harness.py")


def test_source_paths_are_the_module_and_its_bytecode(proj):
    p, env, _ = proj
    pyc = sorted(str(f) for f in (p / "__pycache__").glob("env.*.pyc"))
    assert pyc and env.ProjEnv().source_paths() == [str(p / "env.py"), *pyc]
    assert env.ProjEnv().hidden_paths(env.ProjEnv().task("t1")) == env.ProjEnv().source_paths()  # the default


def test_a_package_environment_hides_its_package(tmp_path):
    pkg = tmp_path / "myproj" / "envs"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(ENV)
    assert _load(pkg / "__init__.py").ProjEnv().source_paths() == [str(pkg)]


def test_an_override_of_hidden_paths_still_hides_the_code(proj):
    p, env, _ = proj
    e = env.OwnHidden()
    assert e.hidden_paths(e.task("t1")) == []
    assert str(p / "env.py") in hidden_from_agent(e, e.task("t1"))  # a base class's module: its code too
    assert str(p / "env.py") in project_paths(store=None, environment=e)


def test_built_in_and_wrapped_environments(proj):
    _, env, _ = proj
    assert TaskDirEnvironment(REPO / "examples" / "tasks").source_paths() == []  # openforge's own: masked already
    assert FaultyEnvironment(env.ProjEnv()).source_paths() == env.ProjEnv().source_paths()  # the inner one's


def test_the_default_agent_files_leave_the_environment_out(proj):
    p, env, harness = proj
    h = harness.ProjHarness()
    assert str(p / "env.py") in h.agent_paths()  # it sits beside harness.py ...
    shown = h.sandbox_paths(environment_code=env.ProjEnv().source_paths())
    assert shown == [str(p / "agent.py"), str(p / "harness.py")]  # ... and is not shown


@pytest.mark.parametrize("cls", ["ListsEnv", "ListsFolder"])
def test_agent_files_listing_the_environment_are_refused(proj, cls):
    p, env, harness = proj
    with pytest.raises(ConfigError, match=r"agent_files would show the agent the environment's own code") as e:
        getattr(harness, cls)().sandbox_paths(environment_code=env.ProjEnv().source_paths())
    assert str(p / "env.py") in str(e.value) and cls in str(e.value)
    harness.ListsAgent().check_environment_code(env.ProjEnv().source_paths())  # another file: fine


def test_an_agent_file_inside_the_environments_package_is_refused(tmp_path):
    pkg = tmp_path / "myproj" / "envs"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(ENV)
    (pkg / "helper.py").write_text("")
    code = _load(pkg / "__init__.py").ProjEnv().source_paths()

    from openforge.harness import Harness

    class Inside(Harness):
        agent_files = (str(pkg / "helper.py"),)

        async def run(self, ctx):  # pragma: no cover - not run
            raise AssertionError

    with pytest.raises(ConfigError, match=r"helper\.py"):
        Inside().check_environment_code(code)


def test_default_agent_files_inside_the_environments_package_are_left_out_with_a_warning(tmp_path, caplog):
    """A harness module kept in the environment's package: none of its files is shown, and the log says so."""
    pkg = tmp_path / "myproj" / "envs"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(ENV)
    (pkg / "harness.py").write_text(HARNESS)
    (pkg / "agent.py").write_text("print('hi')\n")
    code = _load(pkg / "__init__.py").ProjEnv().source_paths()
    h = _load(pkg / "harness.py").ProjHarness()
    with caplog.at_level("WARNING", logger="openforge.harness"):
        assert h.sandbox_paths(environment_code=code) == []
    assert "inside the environment's package" in caplog.text and str(pkg / "agent.py") in caplog.text


async def test_a_rollout_of_such_a_harness_is_a_harness_error_without_a_sandbox(proj, rig, monkeypatch):
    _, env, harness = proj
    proxy, launcher, store = await rig({"turns": [{"text": "hi"}]})
    started = []
    monkeypatch.setattr(launcher, "start", lambda spec: started.append(spec))
    e = env.ProjEnv()
    traj = await run_rollout(task=e.task("t1"), harness=harness.ListsEnv(), environment=e, launcher=launcher,
                             proxy=proxy, store=store)
    assert traj.status == S.HARNESS_ERROR and "environment's own code" in (traj.error or ""), traj.error
    assert started == []


def test_the_preflight_names_a_harness_that_lists_the_environment(proj):
    """``--dry-run``: the harness check fails on such a harness, before the run starts."""
    from openforge.config import RunConfig
    from openforge.runner.preflight import _harnesses

    _, env, harness = proj
    cfg = RunConfig(harness={"name": f"{harness.__name__}:ListsEnv"})
    with pytest.raises(ConfigError, match="environment's own code"):
        _harnesses(cfg, [env.ProjEnv()])
    assert "installed" in _harnesses(RunConfig(harness={"name": f"{harness.__name__}:ListsAgent"}), [env.ProjEnv()])


class _Interactive(Environment):
    def tasks(self, split=None):
        return [Task(id="t", instruction="x")]

    async def verify(self, task, sandbox):
        return VerifyResult(reward=0.0)


def test_a_class_without_a_file_hides_nothing(monkeypatch):
    monkeypatch.setattr(_Interactive, "__module__", "__no_such_module__")
    assert _Interactive().source_paths() == []
