"""The rollout runtime of a veRL agent-loop worker process: one session per process, one rollout per
veRL episode.

Owns: :func:`episode_runner` (starts the worker's :class:`~openforge.runner.session.Session` from names and
``OPENFORGE_PROXY_*`` / ``OPENFORGE_ADMIN_TOKEN`` environment variables) and the episode callable it
returns. Used by :mod:`openforge.train.verl.agent_loop`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.task import Task
from ..core.trajectory import Trajectory
from .session import ProxySettings, RolloutSettings, Session

if TYPE_CHECKING:
    from ..proxy.backends.base import Backend
    from ..proxy.server import ProxyServer

__all__ = ["episode_runner"]


async def episode_runner(*, backend: Backend, max_tokens: int, harness: str, harness_options: dict[str, Any],
                         launcher: str, launcher_options: dict[str, Any], environment: str,
                         environment_options: dict[str, Any],
                         rollout_timeout_s: float | None = None,
                         train_calls: str = "harness") -> Callable[[Task, str], Any]:
    """Start a session over ``backend`` in this process and return ``run(task, rollout_id) -> Trajectory``
    (one real rollout: sandbox, harness, verifier; the proxy's rollout is named ``rollout_id``). Used
    by the veRL agent loop, once per worker process; it lives as long as the worker. ``rollout_timeout_s``:
    each rollout's wall-clock budget (``rollout.timeout_s``; None: the task's ``timeout_s``). ``train_calls``:
    ``rollout.train_calls`` (:mod:`openforge.core.call_origin`)."""
    session = Session.from_names(
        backend, environment=environment, environment_options=environment_options, harness=harness,
        harness_options=harness_options, launcher=launcher, launcher_options=launcher_options,
        proxy=ProxySettings(host=os.environ.get("OPENFORGE_PROXY_HOST", "127.0.0.1"),
                            admin_token=os.environ.get("OPENFORGE_ADMIN_TOKEN"),
                            public_url=os.environ.get("OPENFORGE_PROXY_PUBLIC_URL"),
                            sampling={"max_tokens": max_tokens}, train_calls=train_calls),
        rollouts=RolloutSettings(progress=False, budget_s=rollout_timeout_s))
    await session.start()
    return _WorkerEpisodes(session)


class _WorkerEpisodes:
    """``await episodes(task, rollout_id) -> Trajectory``: one rollout under veRL's session id; the
    proxy forgets it once the trajectory is returned (handed to veRL: the worker keeps nothing)."""

    def __init__(self, session: Session):
        self.session = session

    @property
    def proxy(self) -> ProxyServer:
        return self.session.proxy

    async def __call__(self, task: Task, rollout_id: str) -> Trajectory:
        try:
            return await self.session.rollout(task, rollout_id=rollout_id, metadata={"verl_session": rollout_id})
        finally:
            self.session.proxy.release_rollout(rollout_id)
