"""A user's project, played by an agent: ``proj/harness.py`` starts ``proj/agent.py`` (the default
agent files), ``proj/env.py`` is an environment whose module holds its answer key, and
``proj/src/myproj`` is the user's package, installed editable into the checkout's venv, whose
``myproj/envs`` package is a second environment (its answer key in ``myproj/answers.py``). The
driver runs a real session and one rollout per environment; the agent tries to read every one of
those files, and looks for that rollout's answer key in every file it can reach. Prints one JSON report on stdout.

Run with the checkout's venv Python:
``$HOME/proj/.venv/bin/python _envcode_scenario.py --proj DIR [--ro-bind DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import py_compile
import sys
from pathlib import Path

from openforge.launchers.local import LocalLauncher
from openforge.proxy.backends.scripted import ScriptedBackend
from openforge.runner.session import Session

HARNESS = '''
import sys
from pathlib import Path
from openforge.harness import Harness, HarnessResult

SEEN = []

class ProjHarness(Harness):
    name = "proj-harness"

    async def run(self, ctx):
        targets = Path(__file__).with_name("targets.json").read_text()  # read by the driver: argv
        res = await ctx.exec([sys.executable, str(Path(__file__).with_name("agent.py")), targets])
        SEEN.append({"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr[-2000:]})
        return HarnessResult.from_exec(res, harness=self.name)
'''

AGENT = r'''
import json, os, subprocess, sys
def read(path):
    try:
        if os.path.isdir(path):
            return f"listed {sorted(os.listdir(path))}"
        with open(path, "rb") as f:
            return f"read {f.read(200)!r}"
    except OSError as e:
        return f"denied {e.strerror}"
targets = json.loads(sys.argv[1])
grep = subprocess.run(["grep", "-rl", "".join(targets["pattern"]), *targets["roots"]], capture_output=True, text=True)
print(json.dumps({"reads": {k: read(p) for k, p in targets["reads"].items()},
                  "grep": grep.stdout.split()}))
'''

ENV = '''
from openforge.environment import Environment, Task, VerifyResult

ANSWER = "ANSWER-KEY-FLAT-7391"

class ProjEnv(Environment):
    name = "proj-env"

    def tasks(self, split=None):
        return [Task(id="t1", instruction="guess", split="train", timeout_s=120)]

    async def verify(self, task, sandbox):
        return VerifyResult(reward=0.0)
'''

PKG_ENV = '''
from openforge.environment import Environment, Task, VerifyResult
from myproj.answers import ANSWER

class PkgEnv(Environment):
    name = "pkg-env"

    def tasks(self, split=None):
        return [Task(id="t1", instruction="guess", split="train", timeout_s=120)]

    async def verify(self, task, sandbox):
        return VerifyResult(reward=0.0)
'''

FINDER = '''
import sys
from importlib.util import spec_from_file_location

MAPPING: dict[str, str] = {{"myproj": {pkg!r}}}


class _EditableFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname in MAPPING:
            return spec_from_file_location(fullname, MAPPING[fullname] + "/__init__.py",
                                           submodule_search_locations=[MAPPING[fullname]])
        return None


def install():
    if _EditableFinder not in sys.meta_path:
        sys.meta_path.append(_EditableFinder)
'''


def write_project(proj: Path, venv_site: Path, editable: str) -> None:
    """The project's files, and its editable install into ``venv_site`` as setuptools writes one:
    a ``.pth`` path line (``editable="pth"``) or an ``__editable__`` finder (``"finder"``)."""
    pkg = proj / "src" / "myproj"
    files = {proj / "harness.py": HARNESS, proj / "agent.py": AGENT, proj / "env.py": ENV,
             pkg / "__init__.py": "", pkg / "tools.py": "def tool():\n    return 1\n",
             pkg / "answers.py": 'ANSWER = "ANSWER-KEY-PKG-5120"\n', pkg / "envs" / "__init__.py": PKG_ENV}
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if editable == "pth":
        (venv_site / "__editable__.myproj-0.1.pth").write_text(f"{proj / 'src'}\n")
    else:
        (venv_site / "__editable__.myproj-0.1.pth").write_text(
            "import __editable___myproj_0_1_finder; __editable___myproj_0_1_finder.install()\n")
        (venv_site / "__editable___myproj_0_1_finder.py").write_text(FINDER.format(pkg=str(pkg)))


def targets(proj: Path, key: str) -> dict:
    """What the agent reads, and the answer key it looks for in every file it can reach (split, so
    that no file holds it whole but the environment's)."""
    pkg = proj / "src" / "myproj"
    pyc = sorted((proj / "__pycache__").glob("env.*.pyc"))
    return {"reads": {"agent": str(proj / "agent.py"), "env_py": str(proj / "env.py"),
                      "env_pyc": str(pyc[0]) if pyc else str(proj / "__pycache__" / "env.pyc"),
                      "pkg_env": str(pkg / "envs" / "__init__.py"), "pkg_answers": str(pkg / "answers.py"),
                      "pkg_tools": str(pkg / "tools.py"), "pkg_dir": str(pkg)},
            "roots": [str(proj), sys.prefix], "pattern": ["ANSWER-KEY-", key]}


async def scenario(proj: Path, ro_bind: str | None) -> dict:
    sys.path.insert(0, str(proj))
    py_compile.compile(str(proj / "env.py"))  # its bytecode holds the answer key too
    import env as flat_env  # the project's own modules
    import harness
    import myproj.envs

    report: dict = {"sys_prefix": sys.prefix, "myproj": myproj.envs.__file__, "rollouts": {}}
    for name, env, key in (("flat", flat_env.ProjEnv(), "FLAT"), ("package", myproj.envs.PkgEnv(), "PKG")):
        (proj / "targets.json").write_text(json.dumps(targets(proj, key)))  # the harness passes it on
        launcher = LocalLauncher(ro_binds=[ro_bind] if ro_bind else ())
        async with Session(ScriptedBackend({"turns": [{"text": "hi"}]}), environment=env, launcher=launcher,
                           harness=harness.ProjHarness, store=proj / "runs" / name / "trajectories.db") as session:
            traj = await session.rollout(env.task("t1"))
        seen = harness.SEEN.pop() if harness.SEEN else {}
        try:
            agent = json.loads(seen["stdout"].strip().splitlines()[-1])
        except (KeyError, IndexError, ValueError):
            agent = None
        report["rollouts"][name] = {"status": traj.status.value, "error": traj.error, "agent": agent,
                                    "raw": seen}
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proj", required=True)
    ap.add_argument("--ro-bind", default=None)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(scenario(Path(a.proj), a.ro_bind))), flush=True)


if __name__ == "__main__":
    main()
