"""The convenience base for harnesses that are a command line: :class:`CliHarness`.

Owns: resolving the executable (explicit path → ``$OPENFORGE_<NAME>_BIN`` → the installer's cache
→ ``PATH``; otherwise :class:`HarnessNotInstalled` saying how to install it), writing the generated
config files below the rollout's private HOME, building argv + env from the context, running the
process through the sandbox with the budget, and turning the result into a
:class:`~openforge.harness.HarnessResult`. A subclass only implements :meth:`CliHarness.command`
and, as needed, :meth:`environment`, :meth:`config_files` and :meth:`final_text`.
"""

from __future__ import annotations

import abc
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from ..core.errors import HarnessNotInstalled
from ..harness import Harness, HarnessResult, RolloutContext
from . import installer

__all__ = ["CliHarness", "PythonLoopHarness", "last_json_event"]


def last_json_event(stdout: str, pick: Callable[[dict[str, Any]], Any]) -> Any:
    """The last non-None ``pick(event)`` over the JSON-object lines of a harness's event stream
    (Codex ``--json``, Claude Code ``stream-json``, the built-in loops' ``{"final": ...}``)."""
    for line in reversed(stdout.splitlines()):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and (value := pick(ev)) is not None:
            return value
    return None


class CliHarness(Harness):
    """A harness run as ``command(ctx, exe)`` inside the sandbox.

    Args:
        binary: path of the executable (overrides every lookup).
        extra_args: appended to the generated argv (before the task text where a CLI needs that,
            see the subclass).
        env: extra environment for the process.
    """

    #: Executable name looked up in the installer cache and on PATH.
    executable: ClassVar[str] = ""

    def __init__(self, *, binary: str | os.PathLike[str] | None = None, extra_args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None):
        self.binary = str(binary) if binary else None
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})

    # -- lookup -------------------------------------------------------------------------------
    @property
    def bin_env_var(self) -> str:
        return "OPENFORGE_" + self.name.upper().replace("-", "_") + "_BIN"

    def resolve_executable(self) -> str:
        """Absolute path of the CLI, or :class:`HarnessNotInstalled` with how to get it."""
        candidates: list[tuple[str, str | None]] = [
            ("binary=", self.binary),
            (f"${self.bin_env_var}", os.environ.get(self.bin_env_var)),
        ]
        cached = installer.find_executable(self.name)
        candidates.append(("cache", str(cached) if cached else None))
        candidates.append(("PATH", shutil.which(self.executable) if self.executable else None))
        for source, path in candidates:
            if not path:
                continue
            p = Path(path)
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
            if source in ("binary=", f"${self.bin_env_var}"):
                raise HarnessNotInstalled(f"{self.name}: {source} points to {path}, which is not an executable file")
        raise HarnessNotInstalled(f"{self.name} CLI `{self.executable}` not found (looked in "
                                  f"${self.bin_env_var}, {installer.cache_dir()} and PATH); "
                                  f"install it with: {self.install_hint}")

    def node_path_dirs(self) -> list[str]:
        """PATH entries giving the CLI a new enough Node (npm CLIs); raises if none is installed."""
        dirs = installer.path_dirs(self.name)
        if dirs is None:
            raise HarnessNotInstalled(f"{self.name} needs a newer Node.js than the system's; run "
                                      f"`forge harness install node` (or `forge harness install {self.name}`)")
        return dirs

    def ro_paths(self) -> list[str]:
        """The install dir of the CLI (the whole npm prefix in the cache) and the Node it needs."""
        try:
            exe = Path(self.resolve_executable()).resolve()
            dirs = self.node_path_dirs()
        except HarnessNotInstalled:
            return []
        cache = installer.cache_dir().resolve()
        root = cache / self.name if exe.is_relative_to(cache) else exe.parent
        return [str(root), *(str(Path(d).parent.parent) for d in dirs)]

    def check_installed(self) -> None:
        self.resolve_executable()
        self.node_path_dirs()

    def install(self, *, force: bool = False) -> str:
        return installer.install(self.name, force=force)

    def version(self) -> str | None:
        """The installed version of the CLI (None when unknown); notes and drift are keyed by it."""
        return installer.installed_version(self.name)

    def location(self) -> str:
        exe = self.resolve_executable()
        version = installer.installed_version(self.name)
        return f"{exe}" + (f" ({version})" if version else "")

    # -- what subclasses provide --------------------------------------------------------------
    @abc.abstractmethod
    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        """The argv that runs the agent headless on ``ctx.instruction``."""

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        """Harness-specific environment (endpoint, key, telemetry switches)."""
        return {}

    def runtime_env(self) -> dict[str, str]:
        """Environment the harness's runtime needs whatever the rollout (e.g. where its code is)."""
        return {}

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        """Config files to write, as {path relative to the private HOME: content}."""
        return {}

    def final_text(self, stdout: str) -> str | None:
        """The agent's final answer from its stdout (default: the last non-empty line)."""
        lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else None

    # -- the run ------------------------------------------------------------------------------
    async def run(self, ctx: RolloutContext) -> HarnessResult:
        exe = self.resolve_executable()
        # the environment's PATH (e.g. fault-injection shims first) when it gives one, else the host's
        path = os.pathsep.join([*self.node_path_dirs(), str(Path(exe).parent),
                                ctx.env.get("PATH") or os.environ.get("PATH", "")])
        for rel, content in self.config_files(ctx).items():
            await ctx.write_home_file(rel, content)
        env = {"PATH": path, **self.runtime_env(), **self.environment(ctx), **self.extra_env}
        if ctx.env.get("PYTHONPATH") and env.get("PYTHONPATH"):  # the environment's packages stay importable
            env["PYTHONPATH"] = f"{env['PYTHONPATH']}{os.pathsep}{ctx.env['PYTHONPATH']}"
        argv = self.command(ctx, exe)
        res = await ctx.exec(argv, env=env)
        out = HarnessResult.from_exec(res, harness=self.name, budget_s=ctx.budget_s)
        out.extra["argv"] = [a if len(a) < 300 else a[:300] + "…" for a in argv]
        if out.status is None:
            try:
                out.final_text = self.final_text(res.stdout)
            except Exception as e:  # a parse problem of the final text is not a failed run
                out.extra["final_text_error"] = f"{type(e).__name__}: {e}"
        return out


_PKG_DIR = Path(__file__).resolve().parent.parent


class PythonLoopHarness(CliHarness):
    """A harness whose agent loop is a Python program shipped with openforge (react,
    computer-use, the browser-use driver): it runs with this interpreter (or ``python=``), gets the
    task in a file under its private HOME, and prints its final answer as a JSON line
    ``{"final": ...}``."""

    TASK_FILE: ClassVar[str] = ".openforge-task.txt"

    def __init__(self, *, python: str | None = None, **kw: object):
        super().__init__(**kw)  # type: ignore[arg-type]
        self.python = python or sys.executable

    def resolve_executable(self) -> str:
        return self.python

    def node_path_dirs(self) -> list[str]:
        return []

    def version(self) -> str | None:
        from .. import __version__

        return f"openforge {__version__}"

    def location(self) -> str:
        return f"built in ({self.python})"

    def ro_paths(self) -> list[str]:
        """The Python environment and the openforge package the loop runs from (the package
        directory alone: a source checkout around it, with its run directories, stays hidden)."""
        return sorted({sys.prefix, sys.base_prefix, str(_PKG_DIR)})

    def runtime_env(self) -> dict[str, str]:
        """The loop imports the same openforge as the driver (in a sandbox its parent directory
        holds nothing but the package)."""
        return {"PYTHONPATH": str(_PKG_DIR.parent)}

    def task_file(self, ctx: RolloutContext) -> str:
        return str(ctx.home / self.TASK_FILE)

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        return {self.TASK_FILE: ctx.instruction}

    def final_text(self, stdout: str) -> str | None:
        return last_json_event(stdout, lambda ev: ev.get("final"))
