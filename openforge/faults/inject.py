"""Injecting the in-sandbox faults: files and commands.

Owns: :class:`Injected` (one injected fault and the evidence of it) and :func:`inject` (apply a
:class:`~openforge.faults.spec.FileFault`, :class:`~openforge.faults.spec.CommandFault` or
:class:`~openforge.faults.spec.CorruptFault` to a prepared sandbox, after the environment's setup and
before the agent starts), :func:`solution_programs` (the programs a reference solution runs).

Everything happens through the sandbox's own ``exec`` / ``write_file``, as the agent's user, so it
works wherever the sandbox runs (local namespaces or a pod). Command faults are shims in a
directory put first on the harness's ``PATH``. Where the sandbox can share a driver-owned directory
(the local launcher) the shims live there, read-only, and ask a driver-side
:class:`~openforge.faults.oracle.ShimOracle`, which decides and records each failure: evidence the
agent cannot forge. Elsewhere (a pod) a shim appends the time of every failure it injects to a log
next to it in HOME, read back after the run (:func:`read_evidence`) — evidence the agent could write.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from ..core.errors import EnvironmentError_
from ..core.task import Task
from ..launchers.base import Sandbox
from .oracle import ShimOracle
from .spec import CommandFault, CorruptFault, FileFault, ServiceFault, group_rng

__all__ = ["Injected", "inject", "read_evidence", "shim_dir", "solution_programs"]

_SHELL_WORDS = {"cd", "echo", "printf", "export", "test", "[", "[[", "true", "false", "set", "for", "do", "done", "if",
                "then", "else", "elif", "fi", "while", "until", "read", "exit", "return", "local", "eval", "exec",
                "source", ".", ":", "wait", "sh", "bash", "env", "case", "esac", "in", "function", "unset", "shift",
                "trap", "umask", "command", "type", "mkdir"}
#: Programs a missing_tool fault may take away by default: Python (or the shell) can stand in for them.
SUBSTITUTABLE = ("jq", "sqlite3", "curl", "awk", "sed", "sort", "wc", "cut", "tr", "head", "tail", "uniq", "grep")
_GARBAGE = r"\000\000 <<< corrupted record: bytes lost in a crash >>> \357\277\275\n"  # a printf format


@dataclass
class Injected:
    """One fault as injected into one rollout (``metadata["faults"]["injected"][i]`` before analysis)."""

    kind: str
    target: str  # the service (env var of its URL), the file (workdir-relative) or the program
    params: dict[str, Any] = field(default_factory=dict)
    fired_at: list[float] = field(default_factory=list)  # when a service/command fault failed a call
    armed: bool = True  # False: nothing to inject it into (e.g. the environment exposed no service)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "params": self.params, "armed": self.armed,
                "fired": len(self.fired_at), "fired_at": [round(t, 3) for t in self.fired_at]}


def shim_dir(sandbox: Sandbox) -> PurePosixPath:
    return PurePosixPath(str(sandbox.home)) / ".cache" / "openforge-faults" / "bin"


def solution_programs(solution: list[str] | None) -> list[str]:
    """The programs a reference solution's commands run, in order of first use: the first word of
    every pipeline stage, quoted strings (a ``python3 -c '...'`` program) left alone; no shell
    keywords, and no Python (a harness's own interpreter directory may come first on its PATH)."""
    out: list[str] = []
    for line in (ln for script in solution or [] for ln in script.splitlines()):  # a solution.sh is one script
        try:
            lex = shlex.shlex(line, posix=True, punctuation_chars=True)
            lex.whitespace_split = True
            toks = list(lex)
        except ValueError:  # unbalanced quotes: not a command line we can read
            continue
        first = True
        for tok in toks:
            if tok and set(tok) <= set("|&;()<>"):
                first = tok[0] in "|&;("
                continue
            if first and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tok):
                continue  # VAR=value before the program
            if first and re.fullmatch(r"[A-Za-z][A-Za-z0-9_.+-]*", tok) and tok not in _SHELL_WORDS \
                    and not tok.startswith("python") and tok not in out:
                out.append(tok)
            first = False
    return out


async def _sh(sandbox: Sandbox, script: str, what: str) -> str:
    res = await sandbox.exec(["sh", "-c", script], timeout_s=30)
    if res.returncode != 0:
        raise EnvironmentError_(f"fault injection ({what}) failed: {(res.stderr or res.stdout)[-300:]}")
    return res.stdout


async def _workdir_files(sandbox: Sandbox) -> list[str]:
    out = await _sh(sandbox, "find . -type f -not -path '*/.git/*' | sed 's|^\\./||' | sort", "list files")
    return [ln for ln in out.splitlines() if ln]


async def _pick_file(sandbox: Sandbox, task: Task, salt: str) -> str | None:
    """A workdir file the reference solution names (seeded per group), or None."""
    text = "\n".join(task.metadata.get("solution") or [])
    named = [f for f in await _workdir_files(sandbox) if PurePosixPath(f).name in text]
    return group_rng(task, salt).choice(named) if named else None


async def _pick_program(sandbox: Sandbox, task: Task, spec: CommandFault) -> str | None:
    progs = solution_programs(task.metadata.get("solution"))
    if spec.kind == "missing_tool":
        progs = [p for p in progs if p in SUBSTITUTABLE]
    group_rng(task, spec.kind).shuffle(progs)
    for p in progs:
        if (await sandbox.exec(["sh", "-c", f"command -v {shlex.quote(p)}"], timeout_s=10)).returncode == 0:
            return p
    return None


async def inject(spec: FileFault | CommandFault | CorruptFault, task: Task, sandbox: Sandbox,
                 oracle: ShimOracle | None = None) -> Injected:
    """Apply one in-sandbox fault; an :class:`Injected` with ``armed=False`` when it has no target here.
    Command faults go through ``oracle`` when given (see the module docstring)."""
    if isinstance(spec, CommandFault):
        return await _inject_command(spec, task, sandbox, oracle)
    if isinstance(spec, FileFault) and spec.kind == "locked_file":
        return await _inject_lock(spec, task, sandbox)
    path = spec.path or await _pick_file(sandbox, task, spec.kind)
    if path is None:
        return Injected(spec.kind, "", armed=False)
    q = shlex.quote(path)
    if isinstance(spec, FileFault):
        before = (await _sh(sandbox, f"stat -c %a {q}", f"stat {path}")).strip()
        await _sh(sandbox, f"chmod {spec.mode:o} {q}", f"chmod {path}")
        return Injected(spec.kind, path, {"mode": f"{spec.mode:03o}", "original_mode": before})
    if spec.how == "delete":
        await _sh(sandbox, f"rm -f {q}", f"delete {path}")
    elif spec.how == "truncate":
        await _sh(sandbox, f"n=$(wc -c < {q}); truncate -s $((n / 2)) {q}", f"truncate {path}")
    else:
        await _sh(sandbox, f"printf {shlex.quote(_GARBAGE)} >> {q}", f"corrupt {path}")
    return Injected(spec.kind, path, {"how": spec.how})


async def _inject_lock(spec: FileFault, task: Task, sandbox: Sandbox) -> Injected:
    path = spec.path
    if path is None:
        out = await _sh(sandbox, "find . -name .git -type d | sed 's|^\\./||' | sort | head -1", "find a git repository")
        if not out.strip():
            return Injected(spec.kind, "", armed=False)
        path = f"{out.strip()}/index.lock"
    q = shlex.quote(path)
    await _sh(sandbox, f"mkdir -p \"$(dirname {q})\" && : > {q}", f"create {path}")
    return Injected(spec.kind, path, {"lock": path})


def _shim(spec: CommandFault, prog: str, real: str, d: PurePosixPath) -> str:
    log = shlex.quote(f"{d}/{prog}.fired")
    if spec.kind == "missing_tool":
        return (f"#!/bin/sh\ndate +%s.%N >> {log}\n"
                f"echo \"sh: 1: {prog}: not found\" >&2\nexit 127\n")
    return (f"#!/bin/sh\nn=0\n[ -f {log} ] && n=$(wc -l < {log})\n"
            f"if [ \"$n\" -lt {spec.fails} ]; then\n  date +%s.%N >> {log}\n"
            f"  echo \"{prog}: error: resource temporarily unavailable (try again)\" >&2\n  exit {spec.exit_code}\nfi\n"
            f"exec {shlex.quote(real)} \"$@\"\n")


async def _inject_command(spec: CommandFault, task: Task, sandbox: Sandbox, oracle: ShimOracle | None) -> Injected:
    prog = spec.command or await _pick_program(sandbox, task, spec)
    if prog is None:
        return Injected(spec.kind, "", armed=False)
    res = await sandbox.exec(["sh", "-c", f"command -v {shlex.quote(prog)}"], timeout_s=10)
    real = res.stdout.strip() if res.returncode == 0 else ""
    if spec.kind == "flaky_command" and not real.startswith("/"):
        raise EnvironmentError_(f"flaky_command: {prog!r} is not a program in the sandbox")
    if oracle is not None:
        oracle.add(prog, real, missing=spec.kind == "missing_tool", fails=spec.fails, exit_code=spec.exit_code)
    else:
        d = shim_dir(sandbox)
        await sandbox.write_file(d / prog, _shim(spec, prog, real, d).encode(), 0o755)
    params = {"fails": spec.fails} if spec.kind == "flaky_command" else {}
    return Injected(spec.kind, prog, params)


async def read_evidence(sandbox: Sandbox, injected: list[Injected], oracle: ShimOracle | None = None) -> None:
    """Fill in ``fired_at`` of command faults: from the oracle's own record when there is one, else
    from their shims' logs (missing log: never called)."""
    d = shim_dir(sandbox)
    for inj in injected:
        if inj.kind in ("flaky_command", "missing_tool") and inj.armed:
            if oracle is not None:
                inj.fired_at = list(oracle.fired.get(inj.target, []))
                continue
            try:
                text = (await sandbox.read_file(d / f"{inj.target}.fired")).decode(errors="replace")
            except Exception:
                continue
            inj.fired_at = [float(x) for x in text.split() if re.fullmatch(r"\d+(\.\d+)?", x)]


def service_injected(spec: ServiceFault, name: str, fwd_record: dict[str, Any]) -> Injected:
    params: dict[str, Any] = {"calls": spec.calls}
    params.update({"delay_s": spec.delay_s} if spec.kind == "service_timeout" else {"status": spec.status})
    inj = Injected(spec.kind, name, params)
    inj.fired_at = list(fwd_record.get("fired_at", []))
    return inj
