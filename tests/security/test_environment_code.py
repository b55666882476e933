"""The environment's own code, attacked from inside a sandbox (a driver running as root, and as a
normal user): a project ``$HOME/proj`` with ``harness.py``, ``agent.py`` and ``env.py`` side by side
(the environment's answer key in ``env.py`` and its bytecode), and the user's package
``proj/src/myproj`` installed editable into the checkout's venv (a ``.pth`` path line, or a
setuptools ``__editable__`` finder), whose ``myproj.envs`` environment imports its answer key from
``myproj/answers.py``. Real sessions run one rollout of each environment; the agent (the harness's
default agent files) must read none of that environment's code, nothing of the editable package that
holds it, and no file it can reach may hold that environment's answer key — while its own
``agent.py`` still runs. A second scenario binds the checkout on purpose
(``ro_binds``): the environment's code must then still be masked.

The driver imports openforge from the tree under test (``PYTHONPATH``), and the venv has a
``site-packages`` of its own (the editable install is written into it, never into the runner's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

import openforge
from openforge.launchers import _bwrap
from security._envcode_scenario import write_project
from security.test_sandbox_escapes import TEST_UID, _user_python

HERE = Path(__file__).resolve().parent
SOURCE_ROOT = Path(openforge.__file__).resolve().parents[1]  # the openforge under test

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(os.geteuid() != 0, reason="building a project under /home needs root"),
              pytest.mark.skipif(not _bwrap.probe_bwrap().ok, reason="bubblewrap cannot run here")]

#: What of each rollout's environment the agent must not read (names of ``_envcode_scenario.targets``):
#: the flat one's module and bytecode; the package one's package, and the rest of the editable
#: install that holds it (not bound at all).
ENV_CODE = {"flat": ("env_py", "env_pyc"), "package": ("pkg_env",)}
UNBOUND_PROJECT = ("pkg_answers", "pkg_tools", "pkg_dir")


def _venv(proj: Path, base: str) -> Path:
    """``proj/.venv``: a real venv of ``base`` with a ``site-packages`` of its own (the project's
    editable install goes there); the runner's packages come from ``PYTHONPATH``."""
    venv = proj / ".venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv


def _site(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


@pytest.fixture(params=[("root", "pth"), ("root", "finder"), ("user", "finder")], ids="-".join)
def project(request):
    """``/home/<user>/proj`` with the harness, the agent and two environments, the package installed
    editable; the driver is root, or a normal user who owns the home."""
    as_user = request.param[0] == "user"
    base = _user_python() if as_user else str(Path(sys.executable).resolve())
    if base is None or (as_user and shutil.which("setpriv") is None):
        pytest.skip("no system Python of this version or no setpriv to run a non-root driver")
    home = Path("/home") / f"ofenv-{uuid.uuid4().hex[:8]}"
    proj = home / "proj"
    try:
        proj.mkdir(parents=True)
        venv = _venv(proj, base)
        write_project(proj, _site(venv), request.param[1])
        (home / "tmp").mkdir()  # the driver's TMPDIR (the sandboxes' base dir)
        (home / f".editable-{request.param[1]}").touch()
        for p in [home, *home.rglob("*")]:  # readable by all, as a checkout usually is: only the view protects it
            if not p.is_symlink():
                p.chmod(0o755 if p.is_dir() else 0o644)
            if as_user:
                os.chown(p, TEST_UID, TEST_UID, follow_symlinks=False)
        yield home, proj, venv, as_user
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_project(home: Path, proj: Path, venv: Path, as_user: bool, *, ro_bind: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(home), OPENFORGE_CACHE=str(home / ".cache" / "openforge"), TMPDIR=str(home / "tmp"),
               PYTHONPATH=os.pathsep.join([str(SOURCE_ROOT), str(HERE.parent), sysconfig.get_paths()["purelib"]]))
    cmd = [str(venv / "bin" / "python"), str(HERE / "_envcode_scenario.py"), "--proj", str(proj)]
    if ro_bind is not None:
        cmd += ["--ro-bind", str(ro_bind)]
    if as_user:
        drop = ["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}", "--clear-groups"]
        probe = subprocess.run([*drop, cmd[0], "-c", "import openforge, myproj"], env=env, capture_output=True,
                               text=True)
        if probe.returncode != 0:
            pytest.skip(f"the tree under test or the runner's site-packages is not readable by a normal user: "
                        f"{probe.stderr.strip()[-300:]}")
        cmd = [*drop, *cmd]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400, cwd=str(proj))
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["sys_prefix"] == str(venv), report["sys_prefix"]
    assert report["myproj"] == str(proj / "src" / "myproj" / "envs" / "__init__.py")  # the editable install
    for name, rollout in report["rollouts"].items():
        assert rollout["agent"] is not None, (name, rollout)
        assert rollout["status"] == "policy_failure", (name, rollout)  # the harness ran; reward 0
        assert rollout["agent"]["reads"]["agent"].startswith("read"), rollout  # its own file is there
    return report


def _shown(reads: dict[str, str], names: tuple[str, ...]) -> dict[str, str]:
    return {n: reads[n] for n in names if not reads[n].startswith("denied")}


def test_the_agent_reads_no_environment_code_nor_the_editable_project(project):
    """``env.py`` next to ``harness.py`` is not an agent file; the editable package holding the
    environment is not bound (so neither its environment nor the answers it imports show); no
    file the agent can reach holds an answer key."""
    report = run_project(*project)
    for name, rollout in report["rollouts"].items():
        reads = rollout["agent"]["reads"]
        assert _shown(reads, ENV_CODE[name]) == {}, (name, reads)
        assert rollout["agent"]["grep"] == [], (name, rollout["agent"]["grep"])  # no file holds its answer key
    pkg_reads = report["rollouts"]["package"]["agent"]["reads"]
    assert _shown(pkg_reads, UNBOUND_PROJECT) == {}, pkg_reads


def test_a_bound_checkout_still_masks_the_environment_code(project):
    """A user who binds the checkout itself (``ro_binds``) shows the agent its files, but never the
    environments' code: ``env.py``, its bytecode and the ``myproj.envs`` package are masked."""
    home, proj, venv, as_user = project
    if as_user or (proj.parent / ".editable-pth").exists():
        pytest.skip("one driver and one form of editable install are enough for the explicit bind")
    report = run_project(home, proj, venv, as_user, ro_bind=proj)
    for name, rollout in report["rollouts"].items():
        reads = rollout["agent"]["reads"]
        assert reads["pkg_tools"].startswith("read"), reads  # the bind is real: the masks do the work
        assert _shown(reads, ENV_CODE[name]) == {}, (name, reads)
