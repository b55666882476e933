"""Running an attack scenario as its own driver process (as root, or as a normal user through
``setpriv``), for the tests of this folder."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_sandbox_escapes import REPO, TEST_UID, _user_python


def run_driver(script: str, args: list[str], *, as_user: bool) -> dict:
    """Run ``tests/security/<script>`` as its own driver process (as a normal user with ``as_user``)."""
    import json
    import subprocess
    import sys
    import sysconfig

    cmd = [sys.executable, str(Path(__file__).with_name(script)), *args]
    env = dict(os.environ)
    if as_user:
        py = _user_python()
        if py is None or os.geteuid() != 0:
            pytest.skip("needs root and a system Python of this version to run a normal-user driver")
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])
        cmd = ["setpriv", f"--reuid={TEST_UID}", f"--regid={TEST_UID}", "--clear-groups", py, *cmd[1:]]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def driver_base(kind: str, *, as_user: bool) -> Iterator[Path]:
    """A fresh directory inside the checkout (not under /tmp, which sandboxes mask) for one scenario,
    owned by the normal-user driver when ``as_user``; removed afterwards whatever the scenario left."""
    base = REPO / ".pytest-security" / f"{kind}-{os.getpid()}-{'u' if as_user else 'r'}"
    base.mkdir(parents=True)
    if as_user:
        os.chown(base, TEST_UID, TEST_UID)
    try:
        yield base
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
