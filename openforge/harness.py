"""The :class:`Harness` base class and the :class:`RolloutContext` a harness runs in.

Owns: ``Harness`` (one abstract method, :meth:`Harness.run`), ``RolloutContext`` (everything a
harness needs to point a real agent process at the proxy), ``HarnessResult`` (what came out), and
the framework side of a harness run: :meth:`Harness.execute` classifies every way a run can end
(crash / config error / not installed → ``harness_error`` with a clear message; budget exceeded →
``timeout``; killed by a signal the launcher did not send → ``policy_failure`` when only another
process sends it, ``harness_error`` for a crash of its own, ``infra_error`` for a cgroup OOM kill:
:func:`signal_verdict`), :meth:`RolloutContext.exec` runs a process through the sandbox with the remaining
budget (the sandbox kills the whole process group: SIGTERM, then SIGKILL) and captures
stdout/stderr/exit code. What the sandbox shows of the host for a harness: :meth:`Harness.ro_paths`
(its install) and :attr:`Harness.agent_files` (by default the Python files next to its module, so an
``agent.py`` beside ``harness.py`` runs without any hook). :class:`CliHarness` (in
``openforge.harnesses.cli``) is the convenience subclass for harnesses that are a command line.
Guide with a worked example: ``docs/sdk.md``.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import signal
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .core.errors import ConfigError, HarnessError, HarnessNotInstalled
from .core.types import RolloutStatus

if TYPE_CHECKING:
    from .core.task import Task
    from .launchers.base import ExecResult, Sandbox

__all__ = ["SELF_INFLICTED", "Harness", "HarnessResult", "RolloutContext", "killed_by", "signal_verdict", "tail"]

#: Seconds a harness gets on top of its budget to be killed and reaped before execute() gives up.
KILL_GRACE_S = 15.0
#: Exit codes 129..128+this are read as "killed by signal N" (Linux has 64 signals).
_MAX_SIGNAL = 64
#: Signals a process raises on itself: a fault of its own code (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP,
#: SIGSYS), ``abort()`` (SIGABRT: a failed assertion, an uncaught C++ exception, glibc's heap checks) or
#: one of its own rlimits (SIGXCPU: CPU time, SIGXFSZ: file size). A harness killed by one crashed.
SELF_INFLICTED = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGTRAP,
                            signal.SIGSYS, signal.SIGABRT, signal.SIGXCPU, signal.SIGXFSZ})
#: The openforge package: its own harnesses' folders are in every sandbox's view already.
_PACKAGE_DIR = Path(__file__).resolve().parent
log = logging.getLogger(__name__)
#: Harness classes already warned that their default agent files lie inside the environment's package.
_WARNED: set[type] = set()


def tail(text: str, n: int = 1200) -> str:
    """The last ``n`` characters of ``text`` (for error messages)."""
    text = text.strip()
    return text if len(text) <= n else "…" + text[-n:]


@dataclass
class RolloutContext:
    """What one harness run gets. URLs are as reachable from inside the sandbox."""

    rollout_id: str
    task: Task
    sandbox: Sandbox
    api_key: str  # per-rollout secret (Bearer / x-api-key)
    openai_base_url: str  # {proxy}/r/{rollout_id}/v1
    anthropic_base_url: str  # {proxy}/r/{rollout_id}
    model: str = "openforge-policy"
    budget_s: float = 300.0
    #: Extra environment for every process of the harness (e.g. DISPLAY set by an environment).
    env: dict[str, str] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)

    @property
    def workdir(self) -> Path:
        return self.sandbox.workdir

    @property
    def home(self) -> Path:
        """The rollout's private HOME: every config file a harness writes goes below it."""
        return self.sandbox.home

    @property
    def instruction(self) -> str:
        return self.task.instruction

    @property
    def gemini_base_url(self) -> str:
        """The Gemini API root (``{proxy}/r/{rollout_id}``: the SDKs add ``/v1beta/models/...``)."""
        return self.anthropic_base_url

    def remaining_s(self) -> float:
        """Seconds left of the wall-clock budget (never negative)."""
        return max(0.0, self.budget_s - (time.monotonic() - self.started_at))

    def base_env(self) -> dict[str, str]:
        """Environment every harness process gets: private HOME/XDG dirs, the proxy endpoints and
        secret under the names the OpenAI, Anthropic and Gemini SDKs read (``GOOGLE_GEMINI_BASE_URL`` /
        ``GEMINI_API_KEY``: google-genai and gemini-cli), and loopback-only hints."""
        home = str(self.home)
        env = {
            "HOME": home,
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_CACHE_HOME": f"{home}/.cache",
            "XDG_DATA_HOME": f"{home}/.local/share",
            "XDG_STATE_HOME": f"{home}/.local/state",
            "OPENAI_BASE_URL": self.openai_base_url,
            "OPENAI_API_KEY": self.api_key,
            "ANTHROPIC_BASE_URL": self.anthropic_base_url,
            "ANTHROPIC_API_KEY": self.api_key,
            "GOOGLE_GEMINI_BASE_URL": self.gemini_base_url,
            "GEMINI_API_KEY": self.api_key,
            "OPENFORGE_API_KEY": self.api_key,
            "OPENFORGE_MODEL": self.model,
            "OPENFORGE_ROLLOUT_ID": self.rollout_id,
            "NO_PROXY": "127.0.0.1,localhost,::1",
            "no_proxy": "127.0.0.1,localhost,::1",
            "DO_NOT_TRACK": "1",
            "CI": "1",
        }
        env.update(self.env)
        return env

    async def write_home_file(self, relpath: str, data: str | bytes, mode: int = 0o600) -> Path:
        """Write a config file below the private HOME (through the sandbox) and return its path."""
        path = self.home / relpath
        await self.sandbox.write_file(path, data.encode() if isinstance(data, str) else data, mode)
        return path

    async def exec(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        stdin: bytes | None = b"",
        timeout_s: float | None = None,
    ) -> ExecResult:
        """Run ``argv`` in the sandbox with the base env plus ``env``, in the workdir, limited to
        the remaining budget (or ``timeout_s`` if smaller). Stdin is empty (closed) by default."""
        budget = self.remaining_s()
        limit = budget if timeout_s is None else min(timeout_s, budget)
        if limit <= 0:
            from .launchers.base import ExecResult

            return ExecResult(returncode=None, stdout="", stderr="budget exhausted before start",
                              duration_s=0.0, timed_out=True)
        full_env = self.base_env()
        full_env.update(env or {})
        return await self.sandbox.exec(list(argv), env=full_env, cwd=cwd or self.workdir,
                                       timeout_s=limit, stdin=stdin)


@dataclass
class HarnessResult:
    """Outcome of one harness process run. ``status`` is None when the harness ended normally
    (the verifier then decides success vs policy_failure)."""

    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    status: RolloutStatus | None = None
    error: str | None = None
    final_text: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is None

    @classmethod
    def from_exec(cls, res: ExecResult, *, harness: str, budget_s: float | None = None) -> HarnessResult:
        """Classify a finished process: killed for the budget → ``timeout``; killed by a signal the
        launcher did not send → see :func:`signal_verdict` (``policy_failure`` when something inside the
        sandbox sent it, ``harness_error`` for a crash of its own, ``infra_error`` for the memory cgroup's
        OOM killer); another non-zero exit → ``harness_error`` with the tail of its stderr/stdout; zero →
        normal end (status None)."""
        out = cls(exit_code=res.returncode, stdout=res.stdout, stderr=res.stderr, duration_s=res.duration_s)
        sig = killed_by(res)
        if res.timed_out:
            out.status = RolloutStatus.TIMEOUT
            limit = f" of {budget_s:.0f}s" if budget_s is not None else ""
            out.error = f"{harness} exceeded its wall-clock budget{limit} and was killed"
        elif sig is not None:
            out.extra["killed_by_signal"] = sig
            out.status, out.error = signal_verdict(sig, res, harness)
        elif res.returncode != 0:
            out.status = RolloutStatus.HARNESS_ERROR
            detail = tail(res.stderr) or tail(res.stdout) or "(no output)"
            how = f"exit code {res.returncode}" if res.returncode is not None else "no exit code"
            out.error = f"{harness} crashed ({how}): {detail}"
        return out


def killed_by(res: ExecResult) -> int | None:
    """The signal that killed a process the launcher did not kill for the budget: a negative return
    code, or 128+N (how the sandbox's init, like a shell, reports a child killed by signal N); None
    otherwise. The launcher signals a harness only for the budget (``timed_out``) or a cancel (which
    raises instead of returning): who sent any other signal is :func:`signal_verdict`'s question."""
    rc = res.returncode
    if res.timed_out or rc is None:
        return None
    if rc < 0:
        return -rc
    if 128 < rc <= 128 + _MAX_SIGNAL:
        return rc - 128
    return None


def signal_verdict(sig: int, res: ExecResult, harness: str) -> tuple[RolloutStatus, str]:
    """Whose doing a harness's death by signal ``sig`` (not the launcher's) was:

    - a signal a process raises on itself (:data:`SELF_INFLICTED`: a fault of its own code, ``abort()``,
      its own CPU-time or file-size rlimit) → ``harness_error``: the harness crashed;
    - SIGKILL at the moment the rollout's memory cgroup OOM-killed (``res.oom_kills``: the local launcher
      reads the cgroup's counter in the last seconds before the death) → ``infra_error``: the memory limit
      is too small for the harness and what it runs (as a pod ``OOMKilled`` on Kubernetes). The kernel
      kills the cgroup's largest process: an agent's own command that blows the limit is killed itself,
      and the harness sees that as a tool's failure (an older OOM kill does not excuse a later SIGKILL);
    - any other signal (SIGKILL, SIGTERM, SIGINT, SIGHUP, ...) is one that only another process sends:
      something in the harness's own sandbox — the agent's commands — killed it → ``policy_failure``."""
    name = _signal_name(sig)
    if sig in SELF_INFLICTED:
        detail = tail(res.stderr) or tail(res.stdout) or "(no output)"
        return RolloutStatus.HARNESS_ERROR, (f"{harness} crashed (killed by signal {sig} ({name}): a fault, abort() "
                                             f"or resource limit of its own, not a kill from its sandbox): {detail}")
    if sig == signal.SIGKILL and res.oom_kills > 0:
        return RolloutStatus.INFRA_ERROR, (f"{harness} was killed by the rollout's memory cgroup (the out-of-memory "
                                           f"killer killed {res.oom_kills} process(es) as it died): the task's "
                                           "resources.memory_mb is too small for the harness and what it ran")
    return RolloutStatus.POLICY_FAILURE, (f"{harness} was killed by signal {sig} ({name}), which the launcher did "
                                          "not send (not the budget, not a cancel): something inside its own sandbox "
                                          "killed it — the agent's commands — so the rollout is the policy's failure")


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class Harness(abc.ABC):
    """Subclass and implement :meth:`run`. ``wire_api`` says which API the harness speaks.

    :meth:`run` gets a :class:`RolloutContext`: the task and its instruction, the sandbox, the proxy's
    URLs and the rollout's key (``base_env()`` has them under the names the OpenAI and Anthropic SDKs
    read), a private HOME (``write_home_file``), and ``exec``, which runs a process in the sandbox
    within the remaining budget. The sandbox shows the host read-only only where asked:
    :meth:`ro_paths` and :attr:`agent_files`. Constructor keywords are the harness's options
    (``--harness-opt KEY=VALUE``, ``harness.options`` in a recipe).

    Callers use :meth:`execute`, which never raises for a failed run: every failure becomes a
    :class:`HarnessResult` whose ``status`` says what kind it was.
    """

    name: ClassVar[str] = "harness"
    wire_api: ClassVar[str] = "chat"  # chat | responses | messages
    #: Every wire API the harness can be configured to speak (``wire_api=`` of the constructor).
    wire_apis: ClassVar[tuple[str, ...]] = ()
    #: One line telling a user how to get the harness (shown by `forge harness list` and errors).
    install_hint: ClassVar[str] = ""
    #: Host files the harness's agent process reads (its script, a prompt file), shown read-only in
    #: the sandbox at the same path. ``None`` (the default): the Python files next to the module
    #: that defines the harness class (``*.py`` of that directory: not its subfolders, not dotfiles,
    #: not symlinks, nothing else), so ``agent.py`` beside ``harness.py`` runs as
    #: ``Path(__file__).with_name("agent.py")``. A tuple: exactly these files or folders (relative
    #: paths: to the module's directory); ``()``: none. A listed path that does not exist makes the
    #: rollout a ``harness_error`` saying so. Never list the project root: only what is named here
    #: is shown, and the run's directories and task folders stay hidden even under a listed folder.
    #: The environment's own code (``Environment.source_paths``: its module, e.g. an ``env.py``
    #: beside ``harness.py``) is never shown: left out of the default, and a listed path that is,
    #: holds or lies inside it makes the rollout a ``harness_error`` (a ``ConfigError`` naming both).
    agent_files: ClassVar[tuple[str, ...] | None] = None

    @abc.abstractmethod
    async def run(self, ctx: RolloutContext) -> HarnessResult:
        """Run the agent on ``ctx.task`` until it stops; return what happened."""

    def check_installed(self) -> None:
        """Raise :class:`HarnessNotInstalled` (with how to install) if the harness cannot run.
        The default (a pure-Python harness) has nothing to check."""
        return None

    def install(self, *, force: bool = False) -> str:
        """Install what the harness needs (pinned versions, into the harness cache); idempotent.
        Returns a one-line description. The default has nothing to install."""
        self.check_installed()
        return f"{self.name}: nothing to install"

    def ro_paths(self) -> list[str]:
        """Host paths the harness must see inside the sandbox (its install dir, interpreter); a
        launcher that hides parts of the host file system binds these read-only. The agent files
        next to the harness module are added on their own (:attr:`agent_files`): an override of
        this method need not repeat them."""
        return []

    def agent_paths(self) -> list[str]:
        """The absolute host paths :attr:`agent_files` names (see there), those that exist."""
        return [str(p) for p in _agent_files(type(self)) if p.exists()]

    def sandbox_paths(self, hidden: Sequence[str] = (), environment_code: Sequence[str] = ()) -> list[str]:
        """Every host path the rollout's sandbox shows read-only for this harness: :meth:`ro_paths`
        and :meth:`agent_paths`, less any agent path that is, or lies under, one of ``hidden`` (the
        environment's and the run's hidden paths: a harness module inside a task folder never shows
        that task's verifier; the environment's module beside the harness module is not among the
        default agent files).

        ``environment_code``: the environment's own code
        (:meth:`Environment.source_paths <openforge.environment.Environment.source_paths>`). An
        explicit :attr:`agent_files` entry that is one of them, holds one, or lies inside one raises
        :class:`~openforge.core.errors.ConfigError` naming both: the agent would run the verifier's code."""
        self.check_environment_code(environment_code)
        masks = _forms([*hidden, *environment_code])
        agent = [p for p in self.agent_paths() if not any(_inside(q, m) for q in _forms([p]) for m in masks)]
        self._warn_inside_environment(environment_code)
        return list(dict.fromkeys([*self.ro_paths(), *agent]))

    def _warn_inside_environment(self, environment_code: Sequence[str]) -> None:
        """Warn once per class when default agent files lie inside the environment's package (not
        the environment's module itself: that one is left out as a matter of course)."""
        cls = type(self)
        if cls.agent_files is not None or cls in _WARNED:
            return
        code = _forms(environment_code)
        inside = [p for p in self.agent_paths() if p not in code
                  and any(_inside(q, c) and q != c for q in _forms([p]) for c in code)]
        if inside:
            _WARNED.add(cls)
            log.warning("%s: its default agent files %s lie inside the environment's package, which the agent "
                        "cannot see: they are not shown. Set %s.agent_files to files outside it if the agent "
                        "needs them", cls.__qualname__, ", ".join(inside), cls.__qualname__)

    def check_environment_code(self, environment_code: Sequence[str]) -> None:
        """Raise :class:`~openforge.core.errors.ConfigError` if an explicitly listed :attr:`agent_files`
        entry is, holds or lies inside one of ``environment_code`` (the environment's own code). The
        default agent files are never refused: the environment's module is left out of them."""
        if type(self).agent_files is None:
            return
        clashes = [(p, c) for p in self.agent_paths() for c in environment_code
                   if any(_inside(a, b) or _inside(b, a) for a in _forms([p]) for b in _forms([c]))]
        if clashes:
            which = "; ".join(f"{p} (the environment's code: {c})" for p, c in clashes)
            raise ConfigError(f"{type(self).__qualname__}.agent_files would show the agent the environment's own "
                              f"code, which is hidden from it (its checks and answer keys): {which}. List only the "
                              "files the agent runs, or keep the environment's module out of them")

    def check_agent_files(self) -> None:
        """Raise :class:`HarnessNotInstalled` if a path listed in :attr:`agent_files` does not exist."""
        if type(self).agent_files is None:
            return
        missing = [str(p) for p in _agent_files(type(self)) if not p.exists()]
        if missing:
            raise HarnessNotInstalled(f"{type(self).__qualname__}.agent_files names what does not exist: "
                                      f"{', '.join(missing)}")

    def is_installed(self) -> bool:
        try:
            self.check_installed()
        except HarnessError:
            return False
        return True

    async def execute(self, ctx: RolloutContext) -> HarnessResult:
        """Run the harness with the framework's guarantees: a hard wall-clock limit and
        classification of every failure (never raises except for cancellation)."""
        t0 = time.monotonic()
        try:
            self.check_agent_files()
            self.check_installed()
            res = await asyncio.wait_for(self.run(ctx), timeout=ctx.remaining_s() + KILL_GRACE_S)
            if not isinstance(res, HarnessResult):  # None (a missing return): the harness's bug, not the machine's
                res = HarnessResult(status=RolloutStatus.HARNESS_ERROR, error=(
                    f"{type(self).__name__}.run returned {type(res).__name__}, not a HarnessResult: return "
                    f"HarnessResult.from_exec(res, harness=self.name, budget_s=ctx.budget_s)"))
        except asyncio.TimeoutError:
            res = HarnessResult(status=RolloutStatus.TIMEOUT,
                                error=f"{self.name} did not return within its budget of {ctx.budget_s:.0f}s")
        except HarnessNotInstalled as e:
            res = HarnessResult(status=RolloutStatus.HARNESS_ERROR, error=f"{self.name} is not installed: {e}")
        except (HarnessError, ConfigError) as e:
            res = HarnessResult(status=RolloutStatus.HARNESS_ERROR, error=f"{self.name} failed: {e}")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            tb = tail("".join(traceback.format_exception(type(e), e, e.__traceback__)), 2000)
            res = HarnessResult(status=RolloutStatus.HARNESS_ERROR,
                                error=f"{self.name} raised {type(e).__name__}: {e}", stderr=tb)
        if (res.exit_code is not None and res.status in (None, RolloutStatus.HARNESS_ERROR)
                and "killed_by_signal" not in res.extra):  # a death by signal is signal_verdict's
            own = self.classify_exit(res.exit_code, res.stderr)
            if own is None or own == RolloutStatus.SUCCESS:  # "success" is the verifier's to say
                res.status, res.error = None, None
            elif own != res.status:
                res.status, res.error = own, res.error or f"{self.name} exited with code {res.exit_code}"
        if not res.duration_s:
            res.duration_s = time.monotonic() - t0
        res.extra.setdefault("harness", self.name)
        return res

    def classify_exit(self, exit_code: int, stderr: str) -> RolloutStatus | None:
        """What this harness's exit code means: ``None`` — it ended normally and the verifier
        decides (``success`` means the same: only the verifier says success); a status — that outcome:
        ``harness_error`` / ``env_error`` / ``infra_error`` are discarded, never scored;
        ``policy_failure`` is honoured (trained, reward 0); ``timeout`` goes through the timeout rule.
        The default reads 0 as normal and anything else as ``harness_error``. Override it when the
        harness has codes of its own, e.g. one that means "gave up on the task" (``None``: let the
        verifier score what was done, or ``policy_failure``) or "the model API refused the request"
        (``infra_error``). A context overflow needs no code: the proxy records it and the outcome rule
        decides. Not consulted when the harness was killed by a signal: :func:`signal_verdict` decides
        (one sent from inside its sandbox is the policy's failure whatever the hook says)."""
        return None if exit_code == 0 else RolloutStatus.HARNESS_ERROR

    def location(self) -> str:
        """Where the installed harness lives (for `forge harness list`)."""
        return "built in"

    def describe(self) -> dict[str, Any]:
        """Name, wire API(s), install state, location or the reason it cannot run, install hint."""
        try:
            self.check_installed()
            state, detail = True, self.location()
        except HarnessError as e:
            state, detail = False, str(e)
        apis = self.wire_apis or (self.wire_api,)
        return {"name": self.name, "wire_api": "|".join(apis), "installed": state,
                "install": self.install_hint, "detail": detail}


def _module_dir(cls: type) -> Path | None:
    """The directory of the file that defines ``cls`` (None: no file, or the openforge package's own
    harnesses, whose package directory every sandbox already shows)."""
    mod = sys.modules.get(cls.__module__)
    file = getattr(mod, "__file__", None)
    if not file:
        return None
    here = Path(file).absolute().parent  # as the module sees itself (``__file__``), a symlinked folder too
    own = _PACKAGE_DIR
    return None if here.resolve() == own or here.resolve().is_relative_to(own) else here


def _agent_files(cls: type[Harness]) -> list[Path]:
    """What :attr:`Harness.agent_files` names for ``cls``, as absolute host paths (see there)."""
    where = _module_dir(cls)
    if cls.agent_files is not None:
        return [(p if p.is_absolute() or where is None else where / p).absolute()
                for p in map(Path, cls.agent_files)]
    if where is None:
        return []
    try:
        entries = sorted(where.iterdir())
    except OSError:
        return []
    return [p for p in entries if p.suffix == ".py" and not p.name.startswith(".") and not p.is_symlink()
            and p.is_file()]


def _forms(paths: Sequence[str]) -> list[str]:
    """Each of ``paths`` as given (absolute) and resolved (symlinks followed), without repeats."""
    return list(dict.fromkeys(str(q) for p in paths for q in (Path(p).absolute(), Path(p).resolve())))


def _inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies under it."""
    return path == root or path.startswith(root.rstrip("/") + "/")
