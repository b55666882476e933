"""``browser-use``: the real ``browser_use.Agent`` (PyPI ``browser-use``) driving Debian Chromium,
against the proxy's Chat Completions API (non-streaming, structured-output actions).

Owns: finding the Python that has ``browser-use`` (``python=``, ``$OPENFORGE_BROWSER_USE_PYTHON``,
the installer's venv ``<cache>/browser-use/venv``, or the current interpreter) and Chromium
(``chromium=``, ``$OPENFORGE_CHROMIUM``, ``chromium`` on PATH), the telemetry / version-check /
cloud-sync switches, and running ``_browser_use_driver.py`` in the sandbox. Chromium's own
background lookups of Google hosts are only stopped by the sandbox's network namespace.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from ..core.errors import HarnessNotInstalled
from ..harness import RolloutContext
from . import installer
from .cli import PythonLoopHarness
from .versions import PYPI_PINS

__all__ = ["BrowserUseHarness", "find_chromium"]

DRIVER = Path(__file__).resolve().parent / "_browser_use_driver.py"


def find_chromium(explicit: str | None = None) -> str | None:
    for cand in (explicit, os.environ.get("OPENFORGE_CHROMIUM")):
        if cand:
            return cand if Path(cand).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserUseHarness(PythonLoopHarness):
    name = "browser-use"
    wire_api = "chat"
    install_hint = (f"forge harness install browser-use  (a venv with {PYPI_PINS['browser-use']} in the cache; "
                    "apt-get install chromium)")

    def __init__(self, *, python: str | None = None, chromium: str | None = None, max_steps: int = 6,
                 max_tokens: int = 1024, **kw: Any):
        super().__init__(python=python, **kw)
        self.python, self.chromium = python, chromium  # None: find the browser-use venv
        self.max_steps, self.max_tokens = max_steps, max_tokens

    def resolve_executable(self) -> str:
        for cand in (self.python, os.environ.get("OPENFORGE_BROWSER_USE_PYTHON")):
            if cand:
                if not Path(cand).is_file():
                    raise HarnessNotInstalled(f"browser-use: python {cand} does not exist")
                return cand
        venv_py = installer.cache_dir() / "browser-use" / "venv" / "bin" / "python"
        if venv_py.exists():
            return str(venv_py)
        if importlib.util.find_spec("browser_use") is not None:
            return sys.executable
        raise HarnessNotInstalled(f"the browser-use package is not installed: {self.install_hint}")

    def chromium_path(self) -> str:
        path = find_chromium(self.chromium)
        if path is None:
            raise HarnessNotInstalled("Chromium not found (apt-get install chromium, or set OPENFORGE_CHROMIUM)")
        return path

    def check_installed(self) -> None:
        self.resolve_executable()
        self.chromium_path()

    def location(self) -> str:
        return f"{self.resolve_executable()} + {self.chromium_path()}"

    def ro_paths(self) -> list[str]:
        try:
            py = Path(self.resolve_executable())
        except HarnessNotInstalled:
            return []
        prefix = py.parent.parent
        browser = find_chromium(self.chromium)  # e.g. /usr/bin/google-chrome -> /opt/google/chrome/google-chrome
        extra = {str(Path(browser).resolve().parent)} if browser else set()  # /opt is not in the sandbox's view
        return sorted({str(prefix), str(py.resolve().parent.parent), sys.base_prefix, str(DRIVER.parent), *extra})

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        return {"ANONYMIZED_TELEMETRY": "false", "BROWSER_USE_VERSION_CHECK": "false",
                "BROWSER_USE_CLOUD_SYNC": "false", "BROWSER_USE_LOGGING_LEVEL": "info",
                "BROWSER_USE_CONFIG_DIR": str(ctx.home / ".config" / "browseruse")}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        # -I: the script dir (openforge/harnesses, with its own browser_use.py) must not shadow the package
        return [exe, "-I", str(DRIVER), "--task-file", self.task_file(ctx), "--model", ctx.model,
                "--base-url", ctx.openai_base_url, "--chromium", self.chromium_path(),
                "--max-steps", str(self.max_steps), "--max-tokens", str(self.max_tokens), *self.extra_args]
