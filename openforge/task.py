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
    #: gives each rollout a tmpfs of this size; otherwise no single file may grow beyond it
    disk_mb: int = Field(4096, ge=1)


class Task(BaseModel):
    """An instruction plus everything needed to set it up, run it and verify it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    instruction: str
    environment: str = "custom"
    split: Literal["train", "eval", "heldout"] = "train"
    category: str = "general"
    resources: Resources = Field(default_factory=Resources)
    timeout_s: float = 300.0  # wall-clock budget of the harness run
    setup_timeout_s: float = 60.0
    verify_timeout_s: float = 60.0
    image: str | None = None  # container image for the kubernetes launcher
    required_tools: tuple[str, ...] = ()
    subgoals: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
