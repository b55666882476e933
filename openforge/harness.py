"""The :class:`Harness` base class and the :class:`RolloutContext` a harness runs in.

Owns: ``Harness`` (one abstract method, :meth:`Harness.run`), ``RolloutContext`` (everything a
harness needs to point a real agent process at the proxy), ``HarnessResult`` (what came out).
The framework owns sandboxing, timeouts and classification; a harness only says what to run.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .types import RolloutStatus

if TYPE_CHECKING:
    from .launchers.base import Sandbox
    from .task import Task

__all__ = ["Harness", "HarnessResult", "RolloutContext"]


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

    @property
    def workdir(self) -> Path:
        return self.sandbox.workdir

    @property
    def home(self) -> Path:
        return self.sandbox.home


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


class Harness(abc.ABC):
    """Subclass and implement :meth:`run`. ``wire_api`` says which API the harness speaks."""

    name: ClassVar[str] = "harness"
    wire_api: ClassVar[str] = "chat"  # chat | responses | messages

    @abc.abstractmethod
    async def run(self, ctx: RolloutContext) -> HarnessResult:
        """Run the agent on ``ctx.task`` until it stops; return what happened."""
