"""The SDK's names are where a user looks for them: the package root and ``openforge.environment``
(one import line for an environment), and importing them stays light."""

from __future__ import annotations

import subprocess
import sys

import openforge

SDK = ("Environment", "VerifyResult", "Task", "Sandbox", "SandboxError", "SandboxFileNotFound", "Harness",
       "HarnessResult", "RolloutContext", "Session", "run", "make_environment", "make_harness")


def test_the_package_root_exports_the_sdk():
    assert set(SDK) <= set(openforge.__all__)
    from openforge.core.errors import SandboxError
    from openforge.environment import Environment, Sandbox, SandboxFileNotFound, Task, VerifyResult
    from openforge.launchers.base import Sandbox as Base

    assert (openforge.Environment, openforge.VerifyResult, openforge.Task) == (Environment, VerifyResult, Task)
    assert openforge.Sandbox is Sandbox is Base and openforge.SandboxFileNotFound is SandboxFileNotFound
    assert issubclass(SandboxFileNotFound, SandboxError) and issubclass(SandboxFileNotFound, FileNotFoundError)


def test_importing_an_environment_stays_light():
    code = ("import sys\nfrom openforge import Environment, Sandbox, Task, VerifyResult\n"
            "print(sorted(m for m in ('torch', 'transformers', 'httpx', 'openforge.runner.session') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
