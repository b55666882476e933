"""What a fault is, declaratively, and which faults one episode gets.

Owns: the fault models (:data:`FaultSpec`, one per ``kind``), :class:`FaultConfig` (the run-level
``env.options.faults``: candidate faults, the faulty fraction, faults per episode),
:func:`parse_faults` (``[[faults]]`` of a ``task.toml`` and ``env.options.faults``, every problem
reported in the caller's terms) and :func:`plan_faults` (the seeded choice for one task group).

Seeding: the choice depends only on the task id and the group's seed (``task.metadata["group_seed"]``,
set by :func:`openforge.runner.rollout.run_groups` for every member of a group), never on the rollout id,
so GRPO siblings face the same faults and different groups of the same task differ.
"""

from __future__ import annotations

import hashlib
import random
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..core.errors import ConfigError
from ..core.task import Task

__all__ = ["KINDS", "FaultConfig", "FaultSpec", "parse_faults", "plan_faults", "task_faults"]


class _Fault(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServiceFault(_Fault):
    """The environment's HTTP service fails its first ``calls`` requests: ``503`` (unavailable) or
    held for ``delay_s`` and then answered ``504`` (timeout). Injected by a forwarder in front of
    every service the environment exposes into the sandbox."""

    kind: Literal["service_unavailable", "service_timeout"]
    calls: int = Field(2, ge=1, le=100, description="how many first requests fail")
    status: int = Field(503, ge=400, le=599, description="status of an unavailable answer")
    delay_s: float = Field(8.0, gt=0, le=300, description="how long a timing-out request is held")


class FileFault(_Fault):
    """A file of the workdir made unreadable/unwritable (``permission_denied``: chmod ``mode``), or a
    stale lock file left behind (``locked_file``: ``path`` is the lock, default ``.git/index.lock`` of
    the first git repository of the workdir). ``path`` is relative to the workdir; left out, a file
    the reference solution names is chosen (seeded)."""

    kind: Literal["permission_denied", "locked_file"]
    path: str | None = None
    mode: int = Field(0o000, ge=0, le=0o777, description="permission_denied: the file's mode")


class CommandFault(_Fault):
    """A command fails: ``flaky_command`` fails its first ``fails`` calls, ``missing_tool`` is never
    found (exit 127). A shim earlier on the harness's ``PATH``; left out, ``command`` is a program the
    reference solution uses (seeded; ``missing_tool`` only picks one Python can stand in for)."""

    kind: Literal["flaky_command", "missing_tool"]
    command: str | None = Field(None, pattern=r"^[A-Za-z0-9_.+-]+$")
    fails: int = Field(1, ge=1, le=100, description="flaky_command: how many first calls fail")
    exit_code: int = Field(1, ge=1, le=255, description="flaky_command: exit status of a failing call")


class CorruptFault(_Fault):
    """State partly corrupted before the agent starts: ``truncate`` cuts the file to half its size,
    ``garbage`` appends a malformed line, ``delete`` removes it. ``path`` relative to the workdir; left
    out, a file of the workdir the reference solution names (seeded)."""

    kind: Literal["corrupt_state"]
    path: str | None = None
    how: Literal["truncate", "garbage", "delete"] = "garbage"


FaultSpec = Annotated[ServiceFault | FileFault | CommandFault | CorruptFault, Field(discriminator="kind")]
KINDS = ("service_unavailable", "service_timeout", "permission_denied", "locked_file", "flaky_command",
         "missing_tool", "corrupt_state")
_SPECS: TypeAdapter[list[FaultSpec]] = TypeAdapter(list[FaultSpec])


class FaultConfig(_Fault):
    """Run-level faults (``env.options.faults``). A list alone means ``{faults: LIST}``.

    ``fraction`` of the task groups are faulty (seeded per group); a faulty episode gets ``per_episode``
    faults drawn from those that apply to its task: the task's own ``[[faults]]`` when it declares any,
    else ``faults`` (default: every kind in :data:`RECOVERABLE`, with its defaults)."""

    faults: list[FaultSpec] = Field(default_factory=list)
    fraction: float = Field(1.0, ge=0.0, le=1.0)
    per_episode: int = Field(1, ge=1, le=len(KINDS))
    seed: int = 0


def _problems(e: ValidationError, where: str) -> list[str]:
    """``where[0].calls: Input should be ...`` per error (the union's kind tag left out of the path)."""
    out = []
    for err in e.errors():
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"] if p not in KINDS)
        msg = err["msg"]
        if "tag" in err["type"]:
            msg = f"unknown or missing fault kind; use one of {', '.join(KINDS)}"
        out.append(f"{where}{loc}: {msg}")
    return out


def parse_faults(value: Any, where: str = "faults") -> list[FaultSpec]:
    """A list of fault tables (``[[faults]]`` of a task.toml) → validated specs, or a ConfigError
    naming every bad entry as ``where[i].field``."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: must be a list of fault tables ([[faults]] in task.toml), got {type(value).__name__}")
    try:
        return _SPECS.validate_python(value)
    except ValidationError as e:
        raise ConfigError(_problems(e, where)) from None


def parse_fault_config(value: Any, where: str = "env.options.faults") -> FaultConfig:
    """``env.options.faults`` (a mapping, a list of fault tables, or ``true`` for every kind)."""
    if value is True:
        value = {}
    if isinstance(value, list):
        value = {"faults": value}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: a mapping (faults, fraction, per_episode, seed) or a list of faults, "
                          f"got {type(value).__name__}")
    try:
        return FaultConfig.model_validate(value)
    except ValidationError as e:
        raise ConfigError(_problems(e, where)) from None


def task_faults(task: Task) -> list[FaultSpec]:
    """The faults a task declares (``[[faults]]`` of its task.toml, kept in ``metadata["faults"]``)."""
    raw = task.metadata.get("faults")
    return parse_faults(raw, f"task {task.id}: faults") if raw else []


#: The kinds a run gets when it names none: those every task stays solvable under (``missing_tool`` and
#: ``corrupt_state`` depend on the task, so a task or run declares them by name).
RECOVERABLE = ("service_unavailable", "service_timeout", "permission_denied", "locked_file", "flaky_command")


def _default_faults() -> list[FaultSpec]:
    return _SPECS.validate_python([{"kind": k} for k in RECOVERABLE])


def group_rng(task: Task, salt: str, seed: int = 0) -> random.Random:
    """A RNG that depends on the task id, its group's seed, ``seed`` and ``salt`` only."""
    gs = task.metadata.get("group_seed", "")
    h = hashlib.sha256(f"{task.id}\0{gs}\0{seed}\0{salt}".encode()).digest()
    return random.Random(int.from_bytes(h[:8], "big"))


def applies(spec: FaultSpec, task: Task) -> bool:
    """Whether a fault can meet the agent on this task before the sandbox exists (service faults
    need services; targets left out are resolved against the sandbox later)."""
    if isinstance(spec, ServiceFault):  # claw: metadata.services; task dirs: metadata.taskdir.services
        return bool(task.metadata.get("services") or (task.metadata.get("taskdir") or {}).get("services"))
    if isinstance(spec, FileFault) and spec.kind == "locked_file" and spec.path is None:
        return any(".git" in s or "git " in s for s in task.metadata.get("solution") or [])
    return True


def plan_faults(task: Task, config: FaultConfig | None) -> tuple[bool, list[FaultSpec]]:
    """(faulty?, the faults) of one episode of ``task``: identical for every member of its group."""
    own = task_faults(task)
    cfg = config or FaultConfig(faults=own)
    if not own and config is None:
        return False, []
    if group_rng(task, "faulty", cfg.seed).random() >= cfg.fraction:
        return False, []
    candidates = [s for s in (own or cfg.faults or _default_faults()) if applies(s, task)]
    if own and config is None:
        return bool(candidates), candidates  # a task's own faults all apply on every episode
    rng = group_rng(task, "choice", cfg.seed)
    chosen = rng.sample(candidates, min(cfg.per_episode, len(candidates)))
    return bool(chosen), chosen
