"""The typed seams between the orchestrator and what it drives: what a rollout needs from a proxy
and from a trajectory store.

Owns: :class:`RolloutProxy` and :class:`TrajectorySink` (``typing.Protocol``s). The in-process
:class:`~openforge.proxy.server.ProxyServer` and :class:`~openforge.store.TrajectoryStore` satisfy
them structurally; a test double or another transport implements the same few methods, and a type
checker says when one is missing (in place of ``Any`` + ``getattr`` probing at run time).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..core.outcome import OutcomeFacts
from ..core.trajectory import Trajectory
from ..proxy.recorder import RolloutHandle

__all__ = ["RolloutProxy", "TrajectorySink"]


@runtime_checkable
class RolloutProxy(Protocol):
    """What :func:`~openforge.runner.rollout.run_rollout` needs from a proxy: open a rollout, say where a
    sandbox reaches the proxy, and finish the rollout (waiting for calls in flight) into a trajectory."""

    @property
    def url(self) -> str:
        """Base URL for TCP clients."""
        ...

    @property
    def agent_uds(self) -> str | None:
        """The Unix socket sandboxes without a network reach (model routes only), if any."""
        ...

    def create_rollout(self, task_id: str, harness: str | None = None, metadata: dict[str, Any] | None = None,
                       *, environment: str | None = None, rollout_id: str | None = None) -> RolloutHandle:
        """Register a rollout (``rollout_id`` names it; default a fresh id) and return its handle."""
        ...

    @property
    def store(self) -> TrajectorySink | None:
        """The store the proxy logs calls and finished trajectories to, if any."""
        ...

    async def afinish_rollout(self, rollout_id: str, *, rewards: dict[str, float] | None = None,
                              environment: str | None = None, facts: OutcomeFacts | None = None,
                              metadata: dict[str, Any] | None = None,
                              metrics: dict[str, Any] | None = None) -> Trajectory:
        """Close the rollout: apply the outcome rule to ``facts`` and the recorded calls, build segments,
        add ``metadata`` / ``metrics``, and store the trajectory once in :attr:`store` (durable on return)."""
        ...


@runtime_checkable
class TrajectorySink(Protocol):
    """Where finished trajectories go (the run's durable store)."""

    def put_trajectory(self, traj: Trajectory) -> None:
        """Store (or replace) one trajectory durably."""
        ...

    async def aput_trajectory(self, traj: Trajectory) -> None:
        """:meth:`put_trajectory` without blocking the event loop (durable on return)."""
        ...
