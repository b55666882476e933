"""The README's own layout, attacked from inside a sandbox (a driver running as root, and as a normal user): the checkout ``$HOME/proj`` holds the
driver's ``.venv`` (its ``sys.prefix``), the run directory with its store and SFT teacher data,
another run, the task folders, a cache and ``.env``; ``~/.local/bin`` is on ``PATH``. The agent must
read none of them, nor ``/opt``, ``/var``, ``/sys/fs/cgroup``, and its mount table must not name
the hidden task directory or the run directory — while the venv's Python still runs in it.

The checkout lives under ``/home/<user>/`` (where a tool install's top directory used to be bound
whole), not under the test runner's own checkout. A second scenario binds the checkout on purpose
(``ro_binds``): the session's explicit hiding must then still mask the run, the tasks and the cache.
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

from openforge.launchers import _bwrap
from security.test_sandbox_escapes import TEST_UID, _user_python

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(os.geteuid() != 0, reason="building a layout under /home needs root"),
              pytest.mark.skipif(not _bwrap.probe_bwrap().ok, reason="bubblewrap cannot run here")]

#: Reads that must fail in every scenario (names of ``_layout_scenario.targets``).
ALWAYS_DENIED = ("store", "run_dir", "sft_teacher", "other_run_store", "runs", "task_verifier", "task_solution",
                 "sibling_solution", "task_root", "sft_cache", "cache_models", "local_share", "opt", "var_lib",
                 "var_log", "sys_cgroup", "sys")


def _venv(proj: Path, base: str) -> Path:
    """``proj/.venv``: a real venv of ``base`` (a Python of this minor version) whose site-packages is
    the test runner's (so it imports openforge and its dependencies, and ``sys.prefix`` lies inside
    the checkout)."""
    venv = proj / ".venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    shutil.rmtree(site)
    site.symlink_to(sysconfig.get_paths()["purelib"])
    return venv


@pytest.fixture(params=["root", "user"])
def layout(request):
    """``/home/<user>/proj`` as the README makes it, with everything an agent must not see; the
    driver runs as root, or as a normal user who owns the home (then the venv's base Python is a
    system one that user can run)."""
    as_user = request.param == "user"
    base = _user_python() if as_user else str(Path(sys.executable).resolve())
    if base is None or (as_user and shutil.which("setpriv") is None):
        pytest.skip("no system Python of this version or no setpriv to run a non-root driver")
    home = Path("/home") / f"ofsec-{uuid.uuid4().hex[:8]}"
    proj = home / "proj"
    try:
        proj.mkdir(parents=True)
        home.chmod(0o755)
        venv = _venv(proj, base)
        files = {proj / ".env": "OPENAI_API_KEY=sk-DOTENV-SECRET",
                 proj / "runs" / "r1" / "sft" / "teacher.jsonl": '{"reference": "SFT-ANSWER"}',
                 proj / "runs" / "old" / "trajectories.db": "OLD-RUN-STORE",
                 proj / ".openforge-cache" / "sft" / "k1" / "teacher.jsonl": "CACHED-SFT",
                 proj / ".openforge-cache" / "models" / "m" / "weights.bin": "WEIGHTS",
                 home / ".local" / "share" / "token": "LOCAL-TOKEN"}
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (home / ".local" / "bin").mkdir(parents=True)
        (home / "tmp").mkdir()  # the user's TMPDIR (the sandboxes' base dir)
        for name in ("log-report", "git-bugfix"):
            shutil.copytree(REPO / "examples" / "tasks" / name, proj / "tasks" / name)
        for p in [home, *home.rglob("*")]:  # readable by all, as a checkout usually is: only the view protects it
            if not p.is_symlink():
                p.chmod(0o755 if p.is_dir() else 0o644)
            if as_user:
                os.chown(p, TEST_UID, TEST_UID, follow_symlinks=False)
        yield home, proj, venv, as_user
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_layout(home: Path, proj: Path, venv: Path, as_user: bool, *, ro_bind: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(home), OPENFORGE_CACHE=str(proj / ".openforge-cache"), TMPDIR=str(home / "tmp"),
               PATH=f"{home / '.local' / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    cmd = [str(venv / "bin" / "python"), str(HERE / "_layout_scenario.py"), "--proj", str(proj)]
    if ro_bind is not None:
        cmd += ["--ro-bind", str(ro_bind)]
    if as_user:
        probe = subprocess.run(["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}", "--clear-groups", cmd[0], "-c",
                                "import openforge, transformers"], env=env, capture_output=True, text=True)
        if probe.returncode != 0:
            pytest.skip(f"the runner's site-packages is not readable by a normal user: {probe.stderr.strip()[-300:]}")
        cmd = ["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}", "--clear-groups", *cmd]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400, cwd=str(proj))
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert "agent" in report, report.get("agent_failed")
    assert report["sys_prefix"] == str(venv), report["sys_prefix"]  # the driver really runs from the checkout
    assert report["agent"]["python_ok"] is True  # the venv's Python (a symlink into its base install) runs
    return report


def _leaks(reads: dict[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """Reads that got something: a file's bytes or a folder's entries (an empty mask shows ``listed []``)."""
    return {n: reads[n] for n in names if reads[n].startswith("read") or
            (reads[n].startswith("listed") and reads[n] != "listed []")}


def test_readme_layout_shows_the_agent_nothing_of_the_project(layout):
    report = run_layout(*layout)
    reads = report["agent"]["reads"]
    # Nothing hidden needed a mask, so the mount table names none of it.
    assert report["agent"]["mountinfo_shows"] == []
    assert _leaks(reads, (*ALWAYS_DENIED, "dotenv")) == {}
    assert reads["checkout"] == "listed ['.venv']", reads["checkout"]  # the checkout: an empty mount-point parent


def test_bound_checkout_still_hides_the_run_tasks_and_cache(layout):
    """A user who binds the checkout itself (``ro_binds``) still gets the run, every store, the
    task root and the cache masked: the session hides them explicitly."""
    home, proj, venv, as_user = layout
    report = run_layout(home, proj, venv, as_user, ro_bind=proj)
    reads = report["agent"]["reads"]
    assert reads["checkout"].startswith("listed"), reads["checkout"]  # the bind is real: the masks do the work
    # ``runs/`` itself is the bound checkout's: it shows the runs' names, each run masked (read below).
    assert _leaks(reads, tuple(n for n in ALWAYS_DENIED if n != "runs")) == {}
    hidden = set(report["hidden_by_session"])
    assert {str(proj / "runs" / "r1"), str(proj / "runs" / "old"), str(proj / "tasks"),
            str(proj / ".openforge-cache")} <= hidden, hidden
