"""The :class:`Task` model: one executable task of an environment (frozen pydantic model)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Resources", "Task"]


class Resources(BaseModel):
    """What one rollout of the task may use (pod requests/limits; local rlimits)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: float = 2.0
    memory_mb: int = 2048
    max_processes: int = 256
    max_open_files: int = 1024
    #: Disk the rollout may fill (its workdir, HOME and tmp together): a root driver's local launcher
    #: gives each rollout a tmpfs of this size; otherwise no single file may grow beyond it. The bubblewrap
    #: sandbox's scratch mounts (``/tmp``, ``/var/tmp``, ``/run``, ``/dev/shm``, fresh for each command)
    #: are memory-backed tmpfs of a quarter of it each
    disk_mb: int = Field(4096, ge=1)


class Task(BaseModel):
    """An instruction plus everything needed to set it up, run it and verify it.

    Frozen (hashable, safe to share between rollouts); unknown fields are refused. Only ``id`` and
    ``instruction`` are required. An environment builds its tasks in :meth:`Environment.tasks
    <openforge.environment.Environment.tasks>` and reads them back in ``setup`` / ``verify``; what the
    verifier needs (an expected answer, a reference solution) goes in ``metadata``, which the agent
    never sees.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Unique within the environment (``forge rollout --task ID``, ``env.task_ids``).
    id: str
    #: What the agent is told (the harness's prompt); :meth:`Environment.instruction` may fill it in.
    instruction: str
    #: The environment's name (recorded on every trajectory).
    environment: str = "custom"
    #: ``train`` (training runs), ``eval`` (``forge eval``'s default) or ``heldout`` (held-out evaluation).
    split: Literal["train", "eval", "heldout"] = "train"
    #: A free label: per-category results in reports; ``env.subset=NAME`` also selects by it.
    category: str = "general"
    #: What one rollout may use (CPU, memory, processes, open files, disk).
    resources: Resources = Field(default_factory=Resources)
    #: Wall-clock budget of the harness run, seconds (``forge rollout --budget-s`` overrides it).
    timeout_s: float = 300.0
    #: Limit for :meth:`Environment.setup`, seconds (over it: ``env_error``).
    setup_timeout_s: float = 60.0
    #: Limit for :meth:`Environment.verify`, seconds (over it: ``env_error``).
    verify_timeout_s: float = 60.0
    #: Container image for the kubernetes launcher (None: the launcher's default).
    image: str | None = None
    #: Tools the task exercises (recorded for tool-coverage analysis).
    required_tools: tuple[str, ...] = ()
    #: Named steps of the task (recorded; verifiers may score them as sub-rewards).
    subgoals: tuple[str, ...] = ()
    #: Free-form data for the environment and its verifier: an expected answer, ``solution`` (a list of
    #: shell commands: the reference solution ``--backend reference`` and the SFT teacher replay),
    #: ``subsets`` / ``tags`` / ``difficulty`` (what ``env.subset`` selects by). Never shown to the agent.
    metadata: dict[str, Any] = Field(default_factory=dict)
