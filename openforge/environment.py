"""The :class:`Environment` base class: where tasks come from, how a sandbox is prepared for one,
and how its end state is scored.

Owns: :class:`Environment` (implement :meth:`Environment.tasks` and :meth:`Environment.verify`)
and :class:`VerifyResult` (reward + named sub-scores + detail). Looking environments up by name or
task-directory path is :mod:`openforge.plugins`' job (:func:`~openforge.plugins.make_environment`).

The verifier runs after the agent has stopped, outside every agent process, and reads state the
agent cannot forge: files through :meth:`Sandbox.read_file` / :meth:`Sandbox.pull_workdir`
(Python checks in the driver, which must treat the workdir as hostile: bounded reads, no links out
of it), and the mock services' in-driver state. A verifier that is a *program* (a task directory's
``verify.py``) never runs in the driver: it runs in a fresh sandbox of the same launcher
(:meth:`Sandbox.verifier_view`). Sandbox options an
environment needs (paths to hide from the agent, services to expose) come from
:meth:`Environment.hidden_paths` and :meth:`Environment.setup`.

The environment's own code is never shown to the agent: :meth:`Environment.source_paths` (the file
that defines the subclass, or its package directory when that file is a package's ``__init__.py``)
is hidden from every sandbox on top of whatever :meth:`Environment.hidden_paths` returns
(:func:`hidden_from_agent` is what the framework hides), and a harness whose listed agent files
include it is refused (:meth:`Harness.sandbox_paths <openforge.harness.Harness.sandbox_paths>`).

Missing and hostile files: :meth:`Sandbox.read_file` of a file the agent did not write raises
:class:`~openforge.core.errors.SandboxFileNotFound`, and of one the driver will not read (a FIFO, socket,
device, directory or symlink, or a file over the read's size cap)
:class:`~openforge.core.errors.SandboxFileRefused`; a verifier that lets either escape is not broken — the
rollout is scored 0 as ``policy_failure`` and trained; so is
:class:`~openforge.core.errors.AgentOutputError`, which a verifier raises when the agent's output is
unusable (a wrong type in its answer, a file it cannot load). Every other exception a verifier raises (and a
verdict that is not a finite number) is ``env_error``: discarded, never trained. The whole surface,
with a worked example, is in ``docs/sdk.md``.
"""

from __future__ import annotations

import abc
import difflib
import glob
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .core.errors import AgentOutputError, ConfigError, SandboxFileNotFound, SandboxFileRefused
from .core.task import Task
from .launchers.base import Sandbox

if TYPE_CHECKING:
    from collections.abc import Iterator

# Environment, VerifyResult, and what a verifier works with, importable from here in one line
__all__ = ["AgentOutputError", "Environment", "Sandbox", "SandboxFileNotFound", "SandboxFileRefused", "Task",
           "VerifyResult", "hidden_from_agent"]

#: The openforge package: its built-in environments' code is hidden by every launcher already
#: (``openforge/envs``), and the rest of it is the sandbox's own tooling (the react harness).
_PACKAGE_DIR = Path(__file__).resolve().parent


class VerifyResult(BaseModel):
    """A verifier's verdict: ``reward`` (what GRPO trains on), ``rewards`` (named sub-scores for
    analysis), a human-readable ``detail`` and free-form ``metadata`` (recorded on the trajectory as
    ``metadata["verify_metadata"]``). Rewards are finite: NaN or ±Infinity is refused (a verifier
    that produces one has failed: ``env_error``)."""

    model_config = ConfigDict(extra="forbid")

    reward: float
    rewards: dict[str, float] = Field(default_factory=dict)
    detail: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("reward")
    @classmethod
    def _finite_reward(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError(f"reward must be a finite number, got {v}")
        return v

    @field_validator("rewards")
    @classmethod
    def _finite_rewards(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: x for k, x in v.items() if not math.isfinite(x)}
        if bad:
            raise ValueError(f"sub-scores must be finite numbers, got {bad}")
        return v

    def check_finite(self) -> None:
        """Raise ValueError if a reward is NaN or infinite (e.g. one built with ``model_construct``)."""
        self._finite_reward(self.reward)
        self._finite_rewards(self.rewards)

    @classmethod
    def from_checks(cls, checks: dict[str, bool], *, partial: bool = False, detail: str = "") -> VerifyResult:
        """One sub-score per named check; reward 1.0 when all pass (or their mean if ``partial``)."""
        rewards = {k: 1.0 if v else 0.0 for k, v in checks.items()}
        if not rewards:
            return cls(reward=0.0, detail=detail or "no checks")
        reward = sum(rewards.values()) / len(rewards) if partial else float(all(checks.values()))
        failed = [k for k, v in checks.items() if not v]
        return cls(reward=reward, rewards=rewards, detail=detail or ("all checks passed" if not failed
                                                                     else "failed: " + ", ".join(failed)))


class Environment(abc.ABC):
    """A set of executable tasks with a verifier. Subclasses implement :meth:`tasks` and
    :meth:`verify`; :meth:`setup` and :meth:`teardown` are optional.

    One rollout calls, in order: :meth:`hidden_paths` (before the sandbox exists), :meth:`setup`,
    :meth:`instruction` and :meth:`harness_env` (what the harness gets), the harness runs,
    :meth:`verify` (only when the harness ended normally), :meth:`rollout_metadata`, then
    :meth:`teardown` (always). Constructor keywords are the environment's options
    (``env.options.KEY=VALUE`` in a run config).
    """

    name: ClassVar[str] = "custom"

    @abc.abstractmethod
    def tasks(self, split: str | None = None) -> list[Task]:
        """All tasks (``split`` None), or those of ``split`` (``train`` / ``eval`` / ``heldout``).
        Called often (listing, selection, lookups by id): return the same tasks every time, cheaply."""

    def task(self, task_id: str) -> Task:
        """The task called ``task_id``; a clear error naming close matches otherwise."""
        tasks = {t.id: t for t in self.tasks()}
        if task_id in tasks:
            return tasks[task_id]
        close = difflib.get_close_matches(task_id, tasks, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else f" ({len(tasks)} tasks: `forge env tasks {self.name}`)"
        raise ConfigError(f"environment {self.name!r} has no task {task_id!r}{hint}")

    def splits(self) -> dict[str, int]:
        """Task counts per split."""
        out: dict[str, int] = {}
        for t in self.tasks():
            out[t.split] = out.get(t.split, 0) + 1
        return out

    def hidden_paths(self, task: Task) -> list[str]:
        """Host paths the agent must not see (verifier code, answer keys, reference solutions).
        Default: :meth:`source_paths`, this environment's own code. An override need not repeat
        them: the framework hides :meth:`source_paths` on top of what this returns
        (:func:`hidden_from_agent`). Name here what the environment's code reads or imports from
        elsewhere (an answers file, a checks module beside it, a data folder)."""
        return self.source_paths()

    def source_paths(self) -> list[str]:
        """Host paths of this environment's own code, always hidden from the agent: for the class
        and each :class:`Environment` base class outside openforge, the file of the module that
        defines it (with its cached bytecode), or the whole package directory when that module is a
        package's ``__init__.py``. A module ``myproj/env.py`` hides that file (not ``myproj/``); a
        package ``myproj/envs/__init__.py`` hides ``myproj/envs/``. Classes with no file (defined
        interactively) and openforge's own give nothing. A wrapper environment returns its inner
        one's."""
        classes = [k for k in type(self).__mro__ if issubclass(k, Environment)]  # not a mixin's, not abc's
        return list(dict.fromkeys(p for klass in classes for p in _module_paths(klass)))

    def harness_env(self, task: Task, sandbox: Sandbox) -> dict[str, str]:
        """Extra environment for the harness processes (e.g. ``DISPLAY``, service URLs); valid
        after :meth:`setup`."""
        return {}

    def instruction(self, task: Task, sandbox: Sandbox) -> str:
        """The instruction as the agent sees it, valid after :meth:`setup` (e.g. with the URL of a
        web app filled in); default: ``task.instruction``."""
        return task.instruction

    async def setup(self, task: Task, sandbox: Sandbox) -> None:
        """Prepare the sandbox for ``task`` before the harness starts: seed files
        (:meth:`Sandbox.write_file`), run commands (:meth:`Sandbox.exec`), start services and
        :meth:`Sandbox.expose` them. Within ``task.setup_timeout_s``; raising (or running over) makes
        the rollout an ``env_error`` (a full disk: ``infra_error``), and the harness never runs."""
        return None

    @abc.abstractmethod
    async def verify(self, task: Task, sandbox: Sandbox) -> VerifyResult:
        """Score the end state after the agent stopped; called only when the harness ended normally
        (not on a crash or a timeout), within ``task.verify_timeout_s``, before :meth:`teardown`.

        Read what the agent left through ``sandbox`` (:meth:`Sandbox.read_file`, :meth:`Sandbox.exists`,
        :meth:`Sandbox.pull_workdir`; treat it as hostile: bound what you read) and your own state (a
        service's records). Return a :class:`VerifyResult`: a reward at or above the run's
        ``success_threshold`` (``RolloutSettings``; 1.0 by default) is ``success``, below it
        ``policy_failure``; both are trained. Letting :class:`~openforge.core.errors.SandboxFileNotFound` escape (the agent did not
        write a file you read) or :class:`~openforge.core.errors.SandboxFileRefused` (it left a FIFO, a
        link, a huge file there) is the same as returning reward 0, and so is raising
        :class:`~openforge.core.errors.AgentOutputError` when what the agent left is unusable (say why: it
        is the detail; never for your own bug). Any other exception, running over
        the limit, or a NaN / infinite reward is ``env_error``: the rollout is discarded, its
        traceback kept in ``metadata["verifier_traceback"]``."""

    async def teardown(self, task: Task, sandbox: Sandbox) -> None:
        """Stop what :meth:`setup` started (called always, before the sandbox is closed; an error
        here is recorded in ``metadata["teardown_error"]`` and changes no status)."""
        return None

    async def rollout_metadata(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        """Facts about this rollout to record in the trajectory's metadata (e.g. the injected faults,
        ``openforge.faults``); called always, after the verifier and before :meth:`teardown`."""
        return {}

    def use_run_dir(self, run_dir: Path) -> None:
        """The run directory of the caller (``forge rollout --out``, ``forge eval --out``, a training
        run): an environment may write logs there (task-dir services do). Default: nothing."""
        return None

    def reference_solution(self, task: Task) -> list[str] | None:
        """Shell commands that solve ``task`` (replayable as a scripted teacher: each one a shell-tool
        call, so one multi-line script is one call), if known."""
        sol = task.metadata.get("solution")
        return list(sol) if sol else None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "splits": self.splits(), "doc": (type(self).__doc__ or "").strip().split("\n")[0]}


def hidden_from_agent(environment: Environment, task: Task) -> list[str]:
    """What a rollout of ``task`` hides from the agent for ``environment``: its
    :meth:`~Environment.hidden_paths` and, always, its :meth:`~Environment.source_paths` (an
    override of ``hidden_paths`` cannot show the environment's own code)."""
    return list(dict.fromkeys([*environment.hidden_paths(task), *environment.source_paths()]))


def _module_paths(klass: type) -> Iterator[str]:
    """The host paths of the module that defines ``klass`` (see :meth:`Environment.source_paths`)."""
    module = sys.modules.get(klass.__module__)
    file = getattr(module, "__file__", None)
    if not file:
        return
    path = Path(file).absolute()
    if path.resolve().is_relative_to(_PACKAGE_DIR):
        return
    if getattr(module, "__path__", None) is not None:  # a package: its whole folder
        yield str(path.parent)
        return
    yield str(path)
    try:  # the compiled module holds every constant of the source (an answer key too)
        yield from sorted(str(p) for p in (path.parent / "__pycache__").glob(f"{glob.escape(path.stem)}.*.pyc"))
    except OSError:
        return
